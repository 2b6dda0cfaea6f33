"""Reconciliation: the store, rows, vectors and counters agree (docs/runbooks/reconcile.md).

One pass walks the namespaces (one owner each; ``owner`` limits it to one) and runs these
checks, each finding counted by check and action: ``repaired``, or ``reported`` only (a dry run,
or what cannot be repaired here). Every repair is recorded as ``asset_reconcile`` provenance.

- ``orphan_bytes``: store bytes nothing accounts for. Staging bytes
  (``.../uploads/{reservation}/...``) whose reservation is no longer open are deleted at once (no
  flow reads a closed reservation's staging bytes again, so they can only be what a replayed
  upload link wrote after the fact); object and artifact bytes that no object or artifact row
  claims are deleted once older than the orphan safety window (a save writes its bytes before it
  commits the row, and no save takes longer than the window). Keys under a namespace that no key
  builder makes are ``foreign_keys``: reported, never deleted (the store may be shared).
- ``object_missing`` and ``object_corrupt``: an available object whose original or preview is
  not in the store, or whose bytes no longer hash to the recorded SHA-256 (checked only when
  verifying: ``verify_limit`` objects per namespace, least recently verified first, or all).
  Bytes cannot be invented: the object is quarantined (never reused, embedded or served) and
  its images become ``failed`` with that code, every row kept. The integrity report names the
  object, the key, its images and the namespace; an operator restores the bytes from a backup
  (the next pass sees them back, ``object_restored``, and lifts the quarantine) or deletes the
  images and saves them again.
- ``missing_vector``: a ready image without its visual vector in the active index, and no
  visual job waiting: its visual embedding is queued again (the image is never dropped).
- ``stray_vector``: a vector whose image is deleted or missing: deleted.
- ``expired_reservation`` and ``stale_lease``: what the worker's sweep expires and fails
  (the same repository calls); a lapsed lease with attempts left is only reported, since the
  next worker claims that job again.
- ``counter_drift``: ``used_bytes`` and ``reserved_bytes`` recomputed from the object, job and
  reservation rows, corrected in one transaction under the namespace's quota lock.

Two reconcilers never work on one namespace at once: each takes a PostgreSQL advisory lock per
namespace and skips (reports) a namespace another holds. A pass that ends is recorded in
``mem_reconcile_runs`` (a dry run, which changes nothing, is not).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from memory_db import (
    DatabaseUnavailable,
    InvalidStorageKey,
    MemoryDbError,
    NotFound,
    ObjectRecord,
    StorageError,
    get_logger,
)
from memory_db.errors import ObjectNotFound
from memory_db.repositories import namespace_lock
from memory_db.storage import ListedObject, namespace_prefix, parse_storage_key
from memory_tools import metrics
from memory_tools.ingest.save import vector_bytes
from memory_tools.operations.admin import unknown_identity
from memory_tools.services import MemoryServices

log = get_logger(__name__)

OPERATION = "asset_reconcile"
ACTOR = "system:worker"
CHECKS = (
    "orphan_bytes",
    "foreign_keys",
    "object_missing",
    "object_corrupt",
    "object_restored",
    "missing_vector",
    "stray_vector",
    "expired_reservation",
    "stale_lease",
    "counter_drift",
)
REPAIRED = "repaired"
REPORTED = "reported"
_PAGE = 200  # rows per query: no check loads a whole table
_END_OF_TIME = datetime.max.replace(tzinfo=UTC)
_MESSAGES = {
    "object_missing": "the stored bytes of this image are missing; restore them from a backup "
    "or delete the image and save it again",
    "object_corrupt": "the stored bytes of this image no longer match their checksum; restore "
    "them from a backup or delete the image and save it again",
}


@dataclass(frozen=True)
class IntegrityFinding:
    """One object whose bytes are missing or changed (or back again), with who uses it."""

    check: str  # object_missing, object_corrupt or object_restored
    action: str
    owner: str
    namespace_id: str
    object_id: str
    key: str
    asset_ids: tuple[str, ...]


@dataclass(frozen=True)
class CounterDrift:
    """A namespace whose counters disagreed with its rows: before and after."""

    action: str
    owner: str
    namespace_id: str
    used_before: int
    used_after: int
    reserved_before: int
    reserved_after: int


@dataclass(frozen=True)
class Reconciliation:
    """What one pass found and did."""

    namespaces: int = 0
    listed: int = 0
    removed: int = 0
    removed_bytes: int = 0
    waiting: int = 0  # unaccounted object bytes still inside the safety window
    foreign: int = 0  # keys under a namespace that no builder makes: left for an operator
    dry_run: bool = False
    verified: int = 0  # objects whose bytes were read and matched their hashes
    skipped: tuple[str, ...] = ()  # namespace ids another reconciler was working on
    findings: dict[tuple[str, str], int] = field(default_factory=dict[tuple[str, str], int])
    integrity: tuple[IntegrityFinding, ...] = ()
    drift: tuple[CounterDrift, ...] = ()

    def count(self, check: str, action: str | None = None) -> int:
        """How many findings of ``check`` (with ``action``, or any)."""
        return sum(n for (c, a), n in self.findings.items() if c == check and action in (None, a))

    @property
    def total(self) -> int:
        """Every finding of the pass (foreign keys included)."""
        return sum(self.findings.values())


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
    dry_run: bool = False,
    owner: str | None = None,
    verify_limit: int | None = 0,
) -> Reconciliation:
    """One pass; see the module docstring.

    ``progress(done, total)`` is told as each namespace is done (``memory-server reconcile``
    shows it). ``actor`` is who repairs are recorded for (``operator`` for that command).
    ``dry_run`` changes nothing and reports everything. ``owner`` limits the pass to that
    identity's namespace (an unknown owner is ``not_found``). ``verify_limit`` is how many
    objects per namespace have their bytes read and hashed, least recently verified first
    (``None``: every object; ``0``: none).
    """
    started = datetime.now(UTC)
    run = _Pass(services, safety_window, now, actor, dry_run, verify_limit)
    try:
        report = await run.all(owner, progress)
    except Exception as exc:
        if not dry_run:
            await _record_run(services, actor, started, None, exc)
        raise
    for (check, action), count in report.findings.items():
        metrics.RECONCILE_FINDINGS.labels(check=check, action=action).inc(count)
    if not dry_run:
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


class _Pass:
    """One pass's state: its settings and what it has found so far."""

    def __init__(
        self,
        services: MemoryServices,
        safety_window: timedelta,
        now: datetime | None,
        actor: str,
        dry_run: bool,
        verify_limit: int | None,
    ) -> None:
        self.services = services
        self.safety_window = safety_window
        self.now = now
        self.actor = actor
        self.dry_run = dry_run
        self.verify_limit = verify_limit
        self.action = REPORTED if dry_run else REPAIRED
        self.findings: Counter[tuple[str, str]] = Counter()
        self.integrity: list[IntegrityFinding] = []
        self.drift: list[CounterDrift] = []
        self.skipped: list[str] = []
        self.listed = self.removed = self.removed_bytes = self.waiting = self.foreign = 0
        self.verified = 0

    def found(self, check: str, count: int = 1, action: str | None = None) -> None:
        if count:
            self.findings[(check, action or self.action)] += count

    async def all(
        self, owner: str | None, progress: Callable[[int, int], None] | None
    ) -> Reconciliation:
        async with self.services.database.unit_of_work() as uow:
            namespaces = await uow.quota.namespaces()
        if owner is not None:
            wanted = owner.strip().lower()
            namespaces = [pair for pair in namespaces if pair[0] == wanted]
            if not namespaces:
                raise unknown_identity(wanted)
        for done, (who, namespace_id) in enumerate(namespaces, start=1):
            async with namespace_lock(self.services.database.engine, namespace_id) as taken:
                if taken:
                    await self.namespace(who, namespace_id)
                else:
                    self.skipped.append(namespace_id)
                    log.info("reconcile_namespace_skipped", namespace=namespace_id)
            if progress is not None:
                progress(done, len(namespaces))
        report = Reconciliation(
            namespaces=len(namespaces),
            listed=self.listed,
            removed=self.removed,
            removed_bytes=self.removed_bytes,
            waiting=self.waiting,
            foreign=self.foreign,
            dry_run=self.dry_run,
            verified=self.verified,
            skipped=tuple(self.skipped),
            findings=dict(self.findings),
            integrity=tuple(self.integrity),
            drift=tuple(self.drift),
        )
        if report.total or report.skipped:
            log.info(
                "store_reconciled",
                namespaces=report.namespaces,
                listed=report.listed,
                removed=report.removed,
                removed_bytes=report.removed_bytes,
                findings=report.total,
                skipped=len(report.skipped),
                dry_run=self.dry_run,
            )
        if self.foreign:
            log.warning("store_foreign_keys_found", namespaces=report.namespaces, keys=self.foreign)
        return report

    async def namespace(self, owner: str, namespace_id: str) -> None:
        listed_at = datetime.now(UTC)
        present = await self.store(owner, namespace_id)
        cutoff = min(listed_at, (self.now or datetime.now(UTC)) - self.safety_window)
        missing = await self.missing(owner, namespace_id, present, cutoff)
        await self.verify(owner, namespace_id, missing)
        await self.restored(owner, namespace_id)
        await self.vectors(owner)
        await self.leases(owner)
        await self.counters(owner, namespace_id)

    # --- the store against the accounts ---------------------------------------------------------

    async def store(self, owner: str, namespace_id: str) -> set[str]:
        """Delete (or report) unaccounted bytes; returns the keys the listing found."""
        env = self.services.settings.asset_storage_env_prefix
        items = [
            item
            async for item in self.services.store.list_namespace(
                namespace_prefix(env, namespace_id)
            )
        ]
        present = {item.key for item in items}
        if not items:
            return present
        self.listed += len(items)
        # Read the accounts after listing: a row committed meanwhile is seen, so its bytes stay.
        async with self.services.database.unit_of_work() as uow:
            accounted = await uow.objects.stored_keys(owner)
            artifacts = await uow.artifacts.stored_keys(owner)
            open_uploads = await uow.quota.open_reservation_ids(owner)
        cutoff = (self.now or datetime.now(UTC)) - self.safety_window
        doomed: list[_Doomed] = []
        for item in items:
            try:
                parsed = parse_storage_key(item.key)
            except InvalidStorageKey:
                # Nothing of ours writes such a key (a bucket shared with another tool, a file
                # put there by hand): it is reported, never deleted, and the pass goes on.
                self.foreign += 1
                self.found("foreign_keys", action=REPORTED)
                continue
            if parsed.kind == "staging" and parsed.reservation_id is not None:
                if parsed.reservation_id not in open_uploads:
                    doomed.append(
                        _Doomed(item, "upload", parsed.reservation_id, "upload is closed")
                    )
            elif parsed.kind == "artifact" and parsed.artifact_id is not None:
                if item.key in artifacts:
                    continue
                if item.modified > cutoff:
                    self.waiting += 1
                else:
                    doomed.append(_Doomed(item, "artifact", parsed.artifact_id, "no artifact row"))
            elif item.key not in accounted and parsed.object_id is not None:
                if item.modified > cutoff:
                    self.waiting += 1
                else:
                    doomed.append(_Doomed(item, "object", parsed.object_id, "no object row"))
        if self.dry_run:
            self.found("orphan_bytes", len(doomed))
            return present
        gone = await self._delete(doomed)
        self.found("orphan_bytes", len(gone))
        self.found("orphan_bytes", len(doomed) - len(gone), action=REPORTED)
        if gone:
            await self._record_deleted(owner, gone)
            self.removed += len(gone)
            self.removed_bytes += sum(entry.item.bytes for entry in gone)
        return present

    async def _delete(self, doomed: list[_Doomed]) -> list[_Doomed]:
        gone: list[_Doomed] = []
        for entry in doomed:
            try:
                await self.services.store.delete(entry.item.key)
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

    async def _record_deleted(self, owner: str, gone: list[_Doomed]) -> None:
        async with self.services.database.unit_of_work() as uow:
            for entry in gone:
                await uow.provenance.record(
                    OPERATION,
                    actor_identity=self.actor,
                    owner_identity=owner,
                    target_kind=entry.target_kind,
                    target_id=entry.target_id,
                    detail={
                        "key": entry.item.key,
                        "bytes": entry.item.bytes,
                        "reason": entry.reason,
                    },
                )
            await uow.orphans.resolve([entry.item.key for entry in gone])

    # --- objects against their bytes ------------------------------------------------------------

    async def missing(
        self, owner: str, namespace_id: str, present: set[str], cutoff: datetime
    ) -> set[str]:
        """Objects the listing did not find (confirmed one by one); returns their ids."""
        found: set[str] = set()
        after = ""
        while True:
            async with self.services.database.unit_of_work() as uow:
                page = await uow.integrity.available_page(
                    owner, after=after, limit=_PAGE, created_before=cutoff
                )
            for stored in page:
                for key in _keys(stored):
                    if key in present or await self._exists(key):
                        continue
                    await self.broken(owner, namespace_id, stored, key, "object_missing")
                    found.add(stored.id)
                    break
            if len(page) < _PAGE:
                return found
            after = page[-1].id

    async def _exists(self, key: str) -> bool:
        # The listing may be older than a key that arrived since: ask once before judging.
        return (await self.services.store.head(key)).exists

    async def verify(self, owner: str, namespace_id: str, skip: set[str]) -> None:
        """Read and hash objects' bytes: ``verify_limit`` least recently verified, or all."""
        budget = self.verify_limit
        if budget == 0:
            return
        after, checked = "", 0
        while budget is None or checked < budget:
            limit = _PAGE if budget is None else min(_PAGE, budget - checked)
            async with self.services.database.unit_of_work() as uow:
                if budget is None:
                    page = await uow.integrity.available_page(
                        owner, after=after, limit=limit, created_before=_END_OF_TIME
                    )
                else:
                    page = await uow.integrity.least_verified(owner, limit=limit)
            good: list[str] = []
            for stored in page:
                if stored.id in skip:
                    continue
                problem = await self._check(stored)
                if problem is None:
                    good.append(stored.id)
                else:
                    await self.broken(owner, namespace_id, stored, *problem)
            self.verified += len(good)
            if good and not self.dry_run:
                async with self.services.database.unit_of_work() as uow:
                    await uow.integrity.mark_verified(owner, good)
            checked += len(page)
            if len(page) < limit:
                return
            if budget is not None and self.dry_run:
                # A dry run marks nothing verified, so the window would not move on.
                return
            after = page[-1].id

    async def _check(self, stored: ObjectRecord) -> tuple[str, str] | None:
        """``(key, check)`` of the first key whose bytes are missing or changed, else ``None``."""
        for key, expected in _hashed_keys(stored):
            digest = hashlib.sha256()
            try:
                async for chunk in self.services.store.get_stream(key):
                    digest.update(chunk)
            except ObjectNotFound:
                return key, "object_missing"
            if expected is not None and digest.hexdigest() != expected:
                return key, "object_corrupt"
        return None

    async def broken(
        self, owner: str, namespace_id: str, stored: ObjectRecord, key: str, check: str
    ) -> None:
        """Quarantine an object whose bytes are missing or changed (or only report it)."""
        async with self.services.database.unit_of_work() as uow:
            users = [asset_id for asset_id, _vault in await uow.integrity.users(owner, stored.id)]
            if not self.dry_run:
                changed = await uow.integrity.quarantine(owner, stored.id, check, _MESSAGES[check])
                if changed is None:
                    return  # deleted or quarantined meanwhile: nothing left to repair
                await uow.provenance.record(
                    OPERATION,
                    actor_identity=self.actor,
                    owner_identity=owner,
                    target_kind="object",
                    target_id=stored.id,
                    detail={"key": key, "reason": check, "assetIds": users},
                )
        self.found(check)
        self.integrity.append(
            IntegrityFinding(check, self.action, owner, namespace_id, stored.id, key, tuple(users))
        )
        log.warning(
            "reconcile_object_integrity",
            check=check,
            namespace=namespace_id,
            object_id=stored.id,
            assets=len(users),
            dry_run=self.dry_run,
        )

    async def restored(self, owner: str, namespace_id: str) -> None:
        """Lift the quarantine of objects reconciliation quarantined whose bytes are back."""
        async with self.services.database.unit_of_work() as uow:
            candidates = await uow.integrity.quarantined_by_reconcile(owner, limit=_PAGE)
        for stored in candidates:
            try:
                if await self._check(stored) is not None:
                    continue
            except MemoryDbError:
                log.warning("reconcile_restore_check_failed", object_id=stored.id, exc_info=True)
                continue
            async with self.services.database.unit_of_work() as uow:
                users = [a for a, _vault in await uow.integrity.users(owner, stored.id)]
                if not self.dry_run:
                    lifted = await uow.integrity.lift(owner, stored.id)
                    if lifted is None:
                        continue  # another reconciler lifted it meanwhile
                    await uow.assets.reconcile_many(owner, lifted)
                    await uow.provenance.record(
                        OPERATION,
                        actor_identity=self.actor,
                        owner_identity=owner,
                        target_kind="object",
                        target_id=stored.id,
                        detail={"reason": "object_restored", "assetIds": lifted},
                    )
            self.found("object_restored")
            self.integrity.append(
                IntegrityFinding(
                    "object_restored",
                    self.action,
                    owner,
                    namespace_id,
                    stored.id,
                    stored.storage_key,
                    tuple(users),
                )
            )

    # --- assets against their vectors -----------------------------------------------------------

    async def vectors(self, owner: str) -> None:
        alias = self.services.vector_alias
        try:
            async with self.services.database.unit_of_work() as uow:
                index = (await uow.vector_indexes.open_alias(alias)).name
        except NotFound:
            return  # no index yet: nothing was ever embedded
        await self._missing_vectors(owner, index)
        await self._stray_vectors(owner, index)

    async def _missing_vectors(self, owner: str, index: str) -> None:
        after = ""
        while True:
            async with self.services.database.unit_of_work() as uow:
                found = await uow.integrity.ready_without_visual(
                    index, owner, limit=_PAGE, after=after
                )
                if self.dry_run or not found:
                    self.found("missing_vector", len(found))
                    if len(found) < _PAGE:
                        return
                    after = found[-1][0]
                    continue
                ids = [asset_id for asset_id, _vault in found]
                # Lock the rows (a completion or a delete waits), then look again.
                await uow.assets.lock_many_for_owners([(owner, asset_id) for asset_id in ids])
                still = await uow.integrity.ready_without_visual(
                    index, owner, limit=_PAGE, only=ids
                )
                for asset_id, vault in still:
                    model = await uow.integrity.latest_visual_model(owner, asset_id)
                    name, dimensions = model or (
                        self.services.settings.asset_embed_model,
                        self.services.settings.asset_embed_dim,
                    )
                    job = await uow.jobs.create(
                        owner, asset_id, representation="visual", model=name, dimensions=dimensions
                    )
                    await uow.provenance.record(
                        OPERATION,
                        actor_identity=self.actor,
                        owner_identity=owner,
                        vault=vault,
                        target_kind="asset",
                        target_id=asset_id,
                        detail={"reason": "missing_vector", "jobId": job.id},
                    )
                await uow.assets.reconcile_many(owner, [asset_id for asset_id, _ in still])
                if still:
                    await uow.jobs.notify()
            self.found("missing_vector", len(still))
            if len(found) < _PAGE:
                return
            after = found[-1][0]

    async def _stray_vectors(self, owner: str, index: str) -> None:
        after = ""
        while True:
            async with self.services.database.unit_of_work() as uow:
                page = await uow.integrity.stray_vectors(index, owner, limit=_PAGE, after=after)
                if not page:
                    return
                if self.dry_run:
                    self.found("stray_vector", len(page))
                else:
                    removed = await uow.integrity.delete_stray_vectors(
                        index, owner, [vector_id for vector_id, _ in page]
                    )
                    for asset_id in sorted({asset_id for _, asset_id in page}):
                        await uow.provenance.record(
                            OPERATION,
                            actor_identity=self.actor,
                            owner_identity=owner,
                            target_kind="asset",
                            target_id=asset_id,
                            detail={"reason": "stray_vector"},
                        )
                    self.found("stray_vector", removed)
            if len(page) < _PAGE:
                return
            after = page[-1][0]

    # --- reservations, leases and counters ------------------------------------------------------

    async def leases(self, owner: str) -> None:
        async with self.services.database.unit_of_work() as uow:
            expired = await uow.integrity.expired_reservations(owner)
            lapsed, abandoned = await uow.integrity.stale_leases(owner)
            if not self.dry_run:
                # The sweep's own calls, limited to this namespace.
                expired = await uow.quota.release_expired(owner=owner, limit=max(expired, 1))
                failed = await uow.jobs.fail_abandoned(owner=owner)
                for who, asset_id in failed:
                    await uow.assets.reconcile_embedding(who, asset_id)
                abandoned = len(failed)
        self.found("expired_reservation", expired)
        self.found("stale_lease", abandoned)
        # Claimed again by the next worker that polls: nothing for a reconciler to do.
        self.found("stale_lease", lapsed - abandoned, action=REPORTED)

    async def counters(self, owner: str, namespace_id: str) -> None:
        unit = vector_bytes(self.services, 1)
        async with self.services.database.unit_of_work() as uow:
            usage = await uow.quota.usage(owner, lock=True)
            used, reserved = await uow.integrity.recomputed_counters(owner, vector_bytes=unit)
            if (used, reserved) == (usage.used_bytes, usage.reserved_bytes):
                return
            if not self.dry_run:
                await uow.integrity.set_counters(owner, used=used, reserved=reserved)
                await uow.provenance.record(
                    OPERATION,
                    actor_identity=self.actor,
                    owner_identity=owner,
                    target_kind="namespace",
                    target_id=namespace_id,
                    detail={
                        "reason": "counter_drift",
                        "usedBefore": usage.used_bytes,
                        "usedAfter": used,
                        "reservedBefore": usage.reserved_bytes,
                        "reservedAfter": reserved,
                    },
                )
        self.found("counter_drift")
        self.drift.append(
            CounterDrift(
                self.action,
                owner,
                namespace_id,
                usage.used_bytes,
                used,
                usage.reserved_bytes,
                reserved,
            )
        )
        log.warning(
            "reconcile_counter_drift",
            namespace=namespace_id,
            used_delta=used - usage.used_bytes,
            reserved_delta=reserved - usage.reserved_bytes,
            dry_run=self.dry_run,
        )


def _keys(stored: ObjectRecord) -> list[str]:
    return [key for key, _ in _hashed_keys(stored)]


def _hashed_keys(stored: ObjectRecord) -> list[tuple[str, str | None]]:
    """The object's keys with their recorded SHA-256 (``None``: a preview from before 0007)."""
    keys: list[tuple[str, str | None]] = [(stored.storage_key, stored.sha256)]
    if stored.preview_storage_key is not None:
        keys.append((stored.preview_storage_key, stored.preview_sha256))
    return keys
