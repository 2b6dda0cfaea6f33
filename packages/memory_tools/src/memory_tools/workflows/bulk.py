"""One action for each of up to 100 assets, answered item by item (see docs/tools.md).

Moving forty images, tagging them, deleting or restoring them is forty calls of the workflow a
single image already has (``changes.move_asset``, ``edits.update_asset``, ``delete_asset``,
``restore_asset``, ``enrich_asset`` ...). :func:`run_each` runs that workflow once per id
(:func:`run_each_as_caller` one that opens its own transactions, as ``trash.purge_asset``),
each exactly as a single call would run (:mod:`memory_tools.workflows.calls`):

- in its own admitted turn and its own unit of work, with the credential checked again in it,
  so a refused or failing item rolls back only itself and never stops the rest; a key revoked
  mid-way is refused from the next item on;
- authorised alone by the workflow itself: another owner's id answers ``not_found`` exactly as
  a single call does (the same code and message, nothing more), a read-only grant
  ``forbidden``; quotas and feature switches are checked per item by the same workflow;
- recorded alone: the workflow writes each item's provenance, each item counts as a call of
  its key, and a ``forbidden`` item is audited as a denial the way the MCP tools audit a
  single refused call (:class:`Denials`).

A bulk call answers ``{items, succeeded, failed}``; each item is ``{assetId, ok: true, ...the
single call's answer}`` or ``{assetId, ok: false, error: {code, message}}``, in the order given.
An answer must fit one MCP message (the official SDK client refuses an event over 1 MiB, and
the answer travels twice): once the items pass ``answer_budget`` bytes of JSON, a succeeded
item holds only ``{assetId, ok: true}`` (a hundred edited images with long descriptions and
OCR text would otherwise be megabytes); ``image_asset_get`` shows such an image in full.
The whole call is refused (``invalid_input``, nothing done) when it names no id, more than
:data:`MAX_IDS`, or the same id twice: a repeated id would run its action twice and answer it
twice, which no caller means. An unknown or revoked key is refused once, before any item.
Items run one after another, in order: the same image named by two concurrent bulk calls is
serialised by the workflows' row locks, as two single calls are.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import SerializerFunctionWrapHandler, model_serializer

from memory_db import get_logger
from memory_tools.access import Caller
from memory_tools.errors import InvalidInputFailure, ToolFailure
from memory_tools.progress import Progress, no_progress
from memory_tools.services import MemoryServices
from memory_tools.wire import ANSWER_ITEMS_BUDGET, WireModel
from memory_tools.workflows.calls import Credential, admitted, count_call

log = get_logger(__name__)

R = TypeVar("R", bound=WireModel)

# The most ids one call may name: a library page of images.
MAX_IDS = 100
# The longest id a caller may name (asset ids are 30 characters; the single tools allow 64).
MAX_ID_LENGTH = 64

# A workflow run for one asset: ``action(uow, caller, services, asset_id=..., **arguments)``;
# one that opens its own transactions: ``action(caller, services, asset_id=..., **arguments)``.
ItemAction = Callable[..., Awaitable[R]]
CallerItemAction = Callable[..., Awaitable[R]]


class ItemError(WireModel):
    """Why one item was refused: the code and message a single call would have answered."""

    code: str
    message: str


class BulkItem(WireModel, Generic[R]):
    """One id's outcome: its single call's answer (``result``), or its refusal (``error``).

    On the wire the answer's fields sit beside ``assetId`` and ``ok``; a refused item carries
    ``error`` instead.
    """

    asset_id: str
    ok: bool
    result: R | None = None
    error: ItemError | None = None

    @model_serializer(mode="wrap")
    def _flat(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped: dict[str, Any] = handler(self)
        result = dumped.pop("result", None)
        if dumped.get("error") is None:
            dumped.pop("error", None)
        if isinstance(result, dict):
            dumped.update({name: value for name, value in result.items() if name not in dumped})
        return dumped


class BulkAnswer(WireModel, Generic[R]):
    """Each id's outcome, in the order given, and how many succeeded and failed."""

    items: list[BulkItem[R]]
    succeeded: int
    failed: int


@dataclass(frozen=True)
class Denials:
    """How a ``forbidden`` item is audited: as the MCP tool records a refused call.

    ``operation`` is the tool's provenance operation, ``tool`` its name; adapters that do not
    audit a single refused call (the web app) pass none.
    """

    operation: str
    tool: str


def checked_ids(asset_ids: Sequence[str], field: str = "assetIds") -> list[str]:
    """The ids of one bulk call: ``invalid_input`` for none, too many, or a bad or repeated id.

    An empty id or one longer than any id could be is bad.
    """
    ids = list(asset_ids)
    if not 1 <= len(ids) <= MAX_IDS:
        raise InvalidInputFailure(f"{field}: give 1 to {MAX_IDS} ids, not {len(ids)}")
    first: dict[str, int] = {}
    for position, asset_id in enumerate(ids, start=1):
        # Each item's answer names its id: an id no asset can have is not echoed back.
        if not 1 <= len(asset_id) <= MAX_ID_LENGTH:
            raise InvalidInputFailure(
                f"{field}: item {position} is not an id (1 to {MAX_ID_LENGTH} characters)"
            )
        if asset_id in first:
            raise InvalidInputFailure(
                f"{field}: item {position} repeats item {first[asset_id]}; name each id once"
            )
        first[asset_id] = position
    return ids


def one_or_many(asset_id: str | None, asset_ids: Sequence[str] | None) -> str | list[str]:
    """The subject of a tool that takes ``assetId`` or ``assetIds``: exactly one of them."""
    if (asset_id is None) == (asset_ids is None):
        raise InvalidInputFailure("give exactly one of assetId and assetIds")
    return asset_id if asset_id is not None else checked_ids(asset_ids or ())


async def run_each(
    services: MemoryServices,
    credential: Credential,
    action: ItemAction[R],
    asset_ids: Sequence[str],
    *,
    progress: Progress = no_progress,
    denials: Denials | None = None,
    answer_budget: int | None = ANSWER_ITEMS_BUDGET,
    **arguments: Any,
) -> BulkAnswer[R]:
    """``action(uow, caller, services, asset_id=id, **arguments)`` for each id, item by item.

    Each item in its own unit of work, as :func:`memory_tools.workflows.calls.invoke` runs a
    single call. Refuses the whole call only for its ids (:func:`checked_ids`) and for a
    credential that is not valid; every other refusal is an item's. ``progress`` hears each
    item done (``done`` of ``total``).
    """

    async def attempt(asset_id: str) -> R:
        async with services.database.unit_of_work() as uow:
            caller = await credential.check(uow)
            return await action(uow, caller, services, asset_id=asset_id, **arguments)

    return await _each(services, credential, asset_ids, attempt, progress, denials, answer_budget)


async def run_each_as_caller(
    services: MemoryServices,
    credential: Credential,
    action: CallerItemAction[R],
    asset_ids: Sequence[str],
    *,
    progress: Progress = no_progress,
    denials: Denials | None = None,
    answer_budget: int | None = ANSWER_ITEMS_BUDGET,
    **arguments: Any,
) -> BulkAnswer[R]:
    """:func:`run_each` for workflows that open their own transactions (a purge).

    ``action(caller, services, asset_id=id, **arguments)``, as
    :func:`memory_tools.workflows.calls.invoke_as_caller` runs a single call.
    """

    async def attempt(asset_id: str) -> R:
        async with services.database.single_statements() as uow:
            caller = await credential.check(uow)
        return await action(caller, services, asset_id=asset_id, **arguments)

    return await _each(services, credential, asset_ids, attempt, progress, denials, answer_budget)


async def _each(
    services: MemoryServices,
    credential: Credential,
    asset_ids: Sequence[str],
    attempt: Callable[[str], Awaitable[R]],
    progress: Progress,
    denials: Denials | None,
    answer_budget: int | None,
) -> BulkAnswer[R]:
    """The ids checked, the credential checked once for the call, then each item in turn."""
    ids = checked_ids(asset_ids)
    async with admitted(services), services.database.single_statements() as uow:
        await credential.check(uow)
    items: list[BulkItem[R]] = []
    for done, asset_id in enumerate(ids, start=1):
        items.append(await _run_one(services, credential, attempt, asset_id, denials))
        await progress(done, len(ids), f"{done} of {len(ids)} images")
    succeeded = sum(item.ok for item in items)
    if answer_budget is not None:
        items = _within(items, answer_budget)
    return BulkAnswer[R](items=items, succeeded=succeeded, failed=len(items) - succeeded)


def _within(items: list[BulkItem[R]], budget: int) -> list[BulkItem[R]]:
    """``items`` whose answers, once past ``budget`` bytes of JSON, are only ``{assetId, ok}``.

    Refusals stay whole (they are small and say what to do); a succeeded item past the budget
    keeps its id and ``ok``, so the caller still knows what happened to every id.
    """
    used = 0
    kept: list[BulkItem[R]] = []
    for item in items:
        used += _escaped_bytes(item)
        if used > budget and item.result is not None:
            item = BulkItem[R](asset_id=item.asset_id, ok=True)
        kept.append(item)
    return kept


def _escaped_bytes(item: BulkItem[Any]) -> int:
    """The bytes of ``item``'s JSON as it sits in the answer's text: a JSON string.

    The text is the structured answer's JSON escaped once more (each quote, backslash and
    newline takes two bytes or more), so it is the larger copy: counting it keeps both copies
    within twice the budget. Counting the JSON alone let an answer of quoted words pass 1 MiB.
    """
    return len(json.dumps(item.model_dump_json(), ensure_ascii=False).encode())


async def _run_one(
    services: MemoryServices,
    credential: Credential,
    attempt: Callable[[str], Awaitable[R]],
    asset_id: str,
    denials: Denials | None,
) -> BulkItem[R]:
    """One item as one single call: admitted, authenticated again, acted, counted."""
    try:
        async with admitted(services):
            result = await attempt(asset_id)
            caller = credential.caller
            if caller is not None:  # always set once the attempt's check passed
                await count_call(services, caller)
    except ToolFailure as failure:
        log.info("bulk_item_refused", code=failure.code)
        # Only a check that passed can lead to forbidden: credential.caller is this item's.
        caller = credential.caller
        if failure.code == "forbidden" and caller is not None and denials is not None:
            await _audit_denial(services, caller, denials, failure)
        return BulkItem[R](
            asset_id=asset_id,
            ok=False,
            error=ItemError(code=failure.code, message=failure.message),
        )
    return BulkItem[R](asset_id=asset_id, ok=True, result=result)


async def _audit_denial(
    services: MemoryServices, caller: Caller, denials: Denials, failure: ToolFailure
) -> None:
    """Record a refused item as the tool records a refused call (its transaction rolled back).

    A denial that cannot be recorded (the database went away) is logged and does not stop the
    other items: their answers matter more than the record of this one's refusal.
    """
    try:
        async with admitted(services), services.database.unit_of_work() as uow:
            await uow.provenance.record(
                denials.operation,
                actor_identity=caller.identity,
                outcome="denied",
                detail={"tool": denials.tool, "code": failure.code},
            )
    except ToolFailure:
        log.warning("bulk_denial_not_recorded", tool=denials.tool, exc_info=True)


__all__ = [
    "MAX_IDS",
    "MAX_ID_LENGTH",
    "BulkAnswer",
    "BulkItem",
    "CallerItemAction",
    "Denials",
    "ItemAction",
    "ItemError",
    "checked_ids",
    "one_or_many",
    "run_each",
    "run_each_as_caller",
]
