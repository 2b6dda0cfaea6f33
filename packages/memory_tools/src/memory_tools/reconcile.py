"""Reconciling the store with the accounts (docs/design.md#reconciliation): no byte outside.

Every byte in the store should be accounted for by the database: an object row (original or
preview, counted in the owner's ``used_bytes``), an open upload reservation (its staging bytes,
counted in ``reserved_bytes``) or an artifact row (``.../artifacts/{artifact}/...``, bounded per
owner instead of counted; an expired one is the sweep's to delete, with its row). The pass lists
each owner's namespace prefix in the store and deletes what none accounts for:

- staging bytes (``.../uploads/{reservation}/...``) whose reservation is no longer open, at
  once: no flow reads a closed reservation's staging bytes again (completion reads them only
  while the reservation is active, and closes it before deleting them), so they can only be
  what a replayed upload link wrote after the fact;
- object bytes (``.../objects/{object}/...``) that no object row claims, once they are older
  than the orphan safety window: a save writes its bytes before it commits the row, and no save
  takes longer than the window;
- artifact bytes that no artifact row claims (the row was swept but deleting the bytes failed,
  or a failed write left them), once older than the same window.

Keys under a namespace that no key builder makes are counted and reported (``foreign``), never
deleted: the store may be shared, and such bytes are an operator's to judge.

Each deletion is recorded as ``asset_reconcile`` provenance (actor ``system:worker``) with the
key, its size and the reason, and resolves any orphan candidate recorded for the key. A delete
the store refuses stays for the next pass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from memory_db import (
    DatabaseUnavailable,
    InvalidStorageKey,
    MemoryDbError,
    StorageError,
    get_logger,
)
from memory_db.storage import ListedObject, namespace_prefix, parse_storage_key
from memory_tools.services import MemoryServices

log = get_logger(__name__)

OPERATION = "asset_reconcile"
ACTOR = "system:worker"


@dataclass(frozen=True)
class Reconciliation:
    """What one pass found and did."""

    namespaces: int = 0
    listed: int = 0
    removed: int = 0
    removed_bytes: int = 0
    waiting: int = 0  # unaccounted object bytes still inside the safety window
    foreign: int = 0  # keys under a namespace that no builder makes: left for an operator


@dataclass(frozen=True)
class _Doomed:
    item: ListedObject
    target_kind: str  # "object", "upload" or "artifact"
    target_id: str
    reason: str


async def reconcile_store(
    services: MemoryServices,
    *,
    safety_window: timedelta,
    now: datetime | None = None,
    progress: Callable[[int, int], None] | None = None,
    actor: str = ACTOR,
) -> Reconciliation:
    """One pass over every namespace; see the module docstring.

    ``progress(done, total)`` is told as each namespace is listed (``memory-server admin reconcile``
    shows it: a pass lists the whole store, which takes long on a large bucket). ``actor`` is
    who the deletions are recorded for (``operator`` when that command runs the pass).

    Every pass that ends is recorded as a reconciliation run with its findings, or with what
    stopped it (the operator's Jobs page lists them).
    """
    started = datetime.now(UTC)
    try:
        report = await _reconcile(services, safety_window, now, progress, actor)
    except Exception as exc:
        await _record_run(services, actor, started, None, exc)
        raise
    await _record_run(services, actor, started, report, None)
    return report


async def _record_run(
    services: MemoryServices,
    actor: str,
    started: datetime,
    report: Reconciliation | None,
    failure: Exception | None,
) -> None:
    """Record a finished pass; a database that cannot take it is logged, not raised."""
    found = report or Reconciliation()
    try:
        async with services.database.unit_of_work() as uow:
            await uow.work.record_reconcile_run(
                actor_identity=actor,
                status="done" if failure is None else "failed",
                started_at=started,
                namespaces=found.namespaces,
                listed=found.listed,
                removed=found.removed,
                removed_bytes=found.removed_bytes,
                waiting=found.waiting,
                foreign_keys=found.foreign,
                error_code=None if failure is None else _failure_code(failure),
                error=None if failure is None else f"the pass stopped ({type(failure).__name__})",
            )
    except MemoryDbError:
        log.warning("store_reconcile_run_unrecorded", exc_info=True)


def _failure_code(exc: Exception) -> str:
    """A short stable name for what stopped a pass (not the exception's text: it may hold keys)."""
    if isinstance(exc, StorageError):
        return "store_unavailable"
    if isinstance(exc, DatabaseUnavailable):
        return "database_unavailable"
    return "internal"


async def _reconcile(
    services: MemoryServices,
    safety_window: timedelta,
    now: datetime | None,
    progress: Callable[[int, int], None] | None,
    actor: str,
) -> Reconciliation:
    env = services.settings.asset_storage_env_prefix
    async with services.database.unit_of_work() as uow:
        namespaces = await uow.quota.namespaces()
    listed = removed = removed_bytes = waiting = foreign = 0
    for done, (owner, namespace_id) in enumerate(namespaces, start=1):
        items = [
            item
            async for item in services.store.list_namespace(namespace_prefix(env, namespace_id))
        ]
        if progress is not None:
            progress(done, len(namespaces))
        if not items:
            continue
        listed += len(items)
        # Read the accounts after listing: a row committed meanwhile is seen, so its bytes stay.
        async with services.database.unit_of_work() as uow:
            accounted = await uow.objects.stored_keys(owner)
            artifacts = await uow.artifacts.stored_keys(owner)
            open_uploads = await uow.quota.open_reservation_ids(owner)
        cutoff = (now or datetime.now(UTC)) - safety_window
        doomed: list[_Doomed] = []
        for item in items:
            try:
                parsed = parse_storage_key(item.key)
            except InvalidStorageKey:
                # Nothing of ours writes such a key (a bucket shared with another tool, a file
                # put there by hand): it is reported, never deleted, and the pass goes on.
                foreign += 1
                continue
            if parsed.kind == "staging":
                assert parsed.reservation_id is not None
                if parsed.reservation_id not in open_uploads:
                    doomed.append(
                        _Doomed(item, "upload", parsed.reservation_id, "upload is closed")
                    )
            elif parsed.kind == "artifact":
                assert parsed.artifact_id is not None
                if item.key in artifacts:
                    continue
                if item.modified > cutoff:
                    waiting += 1
                else:
                    doomed.append(_Doomed(item, "artifact", parsed.artifact_id, "no artifact row"))
            elif item.key not in accounted:
                assert parsed.object_id is not None
                if item.modified > cutoff:
                    waiting += 1
                else:
                    doomed.append(_Doomed(item, "object", parsed.object_id, "no object row"))
        gone = await _delete(services, doomed)
        if gone:
            await _record(services, owner, gone, actor)
            removed += len(gone)
            removed_bytes += sum(entry.item.bytes for entry in gone)
    report = Reconciliation(len(namespaces), listed, removed, removed_bytes, waiting, foreign)
    if foreign:
        log.warning("store_foreign_keys_found", namespaces=report.namespaces, keys=foreign)
    if removed:
        log.info(
            "store_reconciled",
            namespaces=report.namespaces,
            listed=report.listed,
            removed=report.removed,
            removed_bytes=report.removed_bytes,
        )
    return report


async def _delete(services: MemoryServices, doomed: list[_Doomed]) -> list[_Doomed]:
    gone: list[_Doomed] = []
    for entry in doomed:
        try:
            await services.store.delete(entry.item.key)
        except MemoryDbError as exc:
            log.warning(
                "store_reconcile_delete_failed",
                target_kind=entry.target_kind,
                target_id=entry.target_id,
                error=type(exc).__name__,
                exc_info=True,
            )
            continue
        gone.append(entry)
    return gone


async def _record(services: MemoryServices, owner: str, gone: list[_Doomed], actor: str) -> None:
    async with services.database.unit_of_work() as uow:
        for entry in gone:
            await uow.provenance.record(
                OPERATION,
                actor_identity=actor,
                owner_identity=owner,
                target_kind=entry.target_kind,
                target_id=entry.target_id,
                detail={"key": entry.item.key, "bytes": entry.item.bytes, "reason": entry.reason},
            )
        await uow.orphans.resolve([entry.item.key for entry in gone])
