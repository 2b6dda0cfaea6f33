"""Calling workflows as a caller in tests, the way every adapter does (one admitted transaction).

``run`` authenticates the key and runs ``workflow(uow, caller, services, ...)`` in one unit of
work; ``run_outside`` runs a workflow that opens its own (``workflow(caller, services, ...)``).
Failures come back as ``"<code>: <message>"`` from ``refused``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from memory_tools import MemoryServices, ToolFailure
from memory_tools.access import Caller, authenticate
from memory_tools.errors import map_failures

T = TypeVar("T")


async def run(
    services: MemoryServices,
    key: str,
    workflow: Callable[..., Awaitable[T]],
    **kwargs: Any,
) -> T:
    """The workflow's answer for the caller holding ``key``."""
    with map_failures():
        async with services.database.unit_of_work() as uow:
            caller = await authenticate(uow, key)
            return await workflow(uow, caller, services, **kwargs)


async def run_outside(
    services: MemoryServices,
    key: str,
    workflow: Callable[..., Awaitable[T]],
    **kwargs: Any,
) -> T:
    """The answer of a workflow that opens its own transactions."""
    with map_failures():
        async with services.database.unit_of_work() as uow:
            caller: Caller = await authenticate(uow, key)
        return await workflow(caller, services, **kwargs)


async def refused(call: Awaitable[Any]) -> str:
    """``"<code>: <message>"`` of a call that must fail."""
    try:
        answer = await call
    except ToolFailure as failure:
        return f"{failure.code}: {failure.message}"
    raise AssertionError(f"expected a refusal, got {answer!r}")
