"""The one call runner's contract (``memory_tools.workflows.calls``), whatever the adapter.

Every adapter (MCP tools, the web app, the upload routes) hands the runner a credential and an
action; these tests hold the runner itself to what each adapter relies on: the credential's
caller, one transaction that a failure rolls back, the mapped failure, the admission wait, a
session ended or a key revoked refused on the next call, and work outside any transaction.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import anyio
import pytest

from memory_db import UnitOfWork
from memory_tools import Caller, MemoryServices, ToolFailure, Unauthenticated
from memory_tools.errors import Busy, InvalidInputFailure
from memory_tools.operations import admin
from memory_tools.sessions import sign_in
from memory_tools.workflows.calls import ApiKey, WebSession, invoke, invoke_as_caller

LIFETIME = timedelta(hours=1)


async def _whoami(
    uow: UnitOfWork, caller: Caller, services: MemoryServices, *extra: Any, **named: Any
) -> tuple[Caller, int, tuple[Any, ...], dict[str, Any]]:
    return caller, services.call_admission.running, extra, named


async def _whoami_outside(caller: Caller) -> Caller:
    return caller


async def _session_of(services: MemoryServices, key: str) -> str:
    async with services.database.unit_of_work() as uow:
        return (await sign_in(uow, key, LIFETIME)).secret


async def test_invoke_runs_the_action_as_the_keys_caller_while_admitted(
    services: MemoryServices, alice: Any
) -> None:
    key = ApiKey(alice.key)
    caller, running, extra, named = await invoke(services, key, _whoami, 1, "two", three=3)
    assert (caller.identity, caller.key_id) == (alice.email, alice.key_id)
    assert running == 1  # inside the admitted call
    assert (extra, named) == ((1, "two"), {"three": 3})
    assert key.caller == caller
    assert services.call_admission.running == 0  # the turn is given back


@pytest.mark.parametrize("secret", [None, "", "mem_not_a_key"])
async def test_an_absent_or_unknown_key_runs_nothing(
    services: MemoryServices, secret: str | None
) -> None:
    ran: list[bool] = []

    async def action(uow: UnitOfWork, caller: Caller, services: MemoryServices) -> None:
        ran.append(True)

    key = ApiKey(secret)
    with pytest.raises(Unauthenticated):
        await invoke(services, key, action)
    assert ran == [] and key.caller is None


async def test_a_failure_rolls_the_transaction_back_and_names_the_caller(
    services: MemoryServices, alice: Any
) -> None:
    started: list[str] = []

    async def sign_in_then_refuse(uow: UnitOfWork, caller: Caller, services: MemoryServices):
        started.append((await sign_in(uow, alice.key, LIFETIME)).secret)
        raise InvalidInputFailure("refused after a write")

    key = ApiKey(alice.key)
    with pytest.raises(InvalidInputFailure, match="refused after a write"):
        await invoke(services, key, sign_in_then_refuse)
    assert key.caller is not None and key.caller.key_id == alice.key_id
    # The session the action started was rolled back with the call.
    with pytest.raises(Unauthenticated):
        await invoke(services, WebSession(started[0]), _whoami)


async def test_an_unexpected_error_is_answered_as_internal(
    services: MemoryServices, alice: Any
) -> None:
    async def crash(caller: Caller) -> None:
        raise RuntimeError("a bug")

    with pytest.raises(ToolFailure) as raised:
        await invoke_as_caller(services, ApiKey(alice.key), crash)
    assert raised.value.code == "internal"
    assert "a bug" not in raised.value.message


async def test_past_the_admission_wait_the_call_is_busy_and_runs_nothing(
    services: MemoryServices, alice: Any
) -> None:
    settings = services.settings.model_copy(
        update={"memory_max_concurrent_calls": 1, "memory_admission_wait_seconds": 0.05}
    )
    services = replace(services, settings=settings)
    holding, release = anyio.Event(), anyio.Event()

    async def hold(caller: Caller) -> None:
        holding.set()
        await release.wait()

    ran: list[bool] = []

    async def action(caller: Caller) -> None:
        ran.append(True)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(invoke_as_caller, services, ApiKey(alice.key), hold)
        await holding.wait()
        with pytest.raises(Busy):
            await invoke_as_caller(services, ApiKey(alice.key), action)
        release.set()
    assert ran == []


async def test_invoke_as_caller_holds_no_transaction_while_the_action_runs(
    services: MemoryServices, alice: Any
) -> None:
    async def opens_its_own(caller: Caller, services: MemoryServices) -> str:
        # One checkout per task: this would be refused if the runner still held one.
        async with services.database.unit_of_work() as uow:
            return (await sign_in(uow, alice.key, LIFETIME)).session_id

    assert await invoke_as_caller(services, ApiKey(alice.key), opens_its_own, services)


async def test_a_web_session_acts_as_its_key_until_it_is_revoked(
    services: MemoryServices, alice: Any
) -> None:
    secret = await _session_of(services, alice.key)
    session = WebSession(secret)
    caller, *_ = await invoke(services, session, _whoami)
    assert (caller.identity, caller.key_id) == (alice.email, alice.key_id)
    assert session.caller == caller

    await admin.revoke_key(services.database, alice.key_id)
    with pytest.raises(Unauthenticated, match="session has ended"):
        await invoke(services, WebSession(secret), _whoami)
    with pytest.raises(Unauthenticated, match="unknown or revoked"):
        await invoke_as_caller(services, ApiKey(alice.key), _whoami_outside)


async def test_no_session_cookie_is_unauthenticated(services: MemoryServices) -> None:
    with pytest.raises(Unauthenticated, match="sign in"):
        await invoke_as_caller(services, WebSession(None), _whoami_outside)
