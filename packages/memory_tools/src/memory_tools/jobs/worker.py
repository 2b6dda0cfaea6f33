"""The durable worker (docs/design.md#worker): embeddings, and jobs of other kinds.

Jobs live in PostgreSQL. A worker claims a batch of due jobs in one statement (``FOR UPDATE
SKIP LOCKED``, so two workers never take the same job), holding each under a lease it renews
while it works; a job whose worker died is claimed again once its lease expires. One embedder
call embeds the whole batch. Each job then completes in its own transaction that first locks
the asset row and checks the lease, so a job finishes exactly once, a worker that lost its
lease writes nothing, and an asset that entered deletion gets no new vectors. Vector ids are
deterministic, so a repeated upsert replaces rather than duplicates.

Jobs of other kinds (``ocr``, ``describe``) share the queue, its leases and failure policy; the
worker hands each to the handler registered for its kind (:mod:`memory_tools.jobs.handlers`).
A running worker claims them in a lane of their own, one batch at a time, beside its embedding
slots: a save's embedding (what makes it searchable) never waits behind a slow OCR read, and a
stream of saves never starves the OCR.

Workers wake on the job queue's notification (``memory_db.repositories.JOB_CHANNEL``, sent by
every save) and poll as a fallback.

A database outage does not end a worker: its loops log and back off, the listener reconnects,
and jobs whose batch the outage cut short are handed back (without counting the attempt) as soon
as the database answers again, instead of waiting out their lease.
"""

from __future__ import annotations

import contextlib
import os
import random
import secrets
import socket
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import structlog

from memory_db import (
    AssetRecord,
    DatabaseUnavailable,
    JobRecord,
    MemoryDbError,
    ObjectRecord,
    UnitOfWork,
    VaultScope,
    get_logger,
)
from memory_db.embedding import (
    Embedder,
    FusedInput,
    FusesByCombining,
    ImageInput,
    TextInput,
    Usage,
)
from memory_db.errors import (
    ChecksumMismatch,
    ConfigurationError,
    EmbeddingError,
    ProviderContractError,
    ProviderUnavailable,
)
from memory_db.priority import background_priority, current_background_nice
from memory_db.repositories import AssetSettled, listen_for_jobs
from memory_db.runtime import prepare_vector_index
from memory_db.settings import DEFAULT_WORKER_CONCURRENCY
from memory_db.vectors import (
    FinishedJob,
    StoredVector,
    VectorIndex,
    VectorRecord,
)
from memory_tools import metrics
from memory_tools.ingest.plan import asset_fused_text
from memory_tools.jobs.embed_reuse import Known, Need, plan_request
from memory_tools.jobs.handlers import (
    JobFailed,
    JobHandler,
    JobResult,
    JobSubject,
)
from memory_tools.jobs.ocr import ocr_binding
from memory_tools.services import MemoryServices
from memory_tools.workflows import near_duplicates
from memory_tools.workflows.artifacts import sweep_expired_artifacts
from memory_tools.workflows.assets import read_preview
from memory_tools.workflows.changes import purge_deleted_objects

log = get_logger(__name__)

WORKER_ACTOR = "system:worker"  # the actor of what the worker records (asset_embed)
LISTEN_RETRY_SECONDS = 1.0  # after the listening connection is lost or refused
# Longer than any save can take between writing bytes and committing (fetch deadline included).
ORPHAN_SAFETY_WINDOW = timedelta(hours=1)
# How long a provider outage (ProviderUnavailable: rate limits, 5xx, timeouts, unreachable) may
# keep a job waiting without spending its attempts: an outage is not the image's fault, and
# failing every image saved during an hour-long outage would leave them all to be retried by
# hand. Older jobs spend attempts again, so a provider gone for good fails them in the end.
OUTAGE_PATIENCE = timedelta(days=1)

# The store check a sweep runs every ``reconcile_seconds``: given the services, the safety
# window for unclaimed bytes and how many objects' bytes to verify, how many findings it had.
# It is an operator task (memory_tools.operations.reconcile) that serving passes in, so the
# worker does not import a room above its own.
StoreCheck = Callable[[MemoryServices, timedelta, int], Awaitable[int]]


@dataclass(frozen=True)
class WorkerConfig:
    """How a worker claims and paces work."""

    concurrency: int = DEFAULT_WORKER_CONCURRENCY  # batches in flight at once
    batch_size: int = 16
    lease_seconds: float = 120.0
    heartbeat_seconds: float = 30.0
    poll_seconds: float = 5.0
    sweep_seconds: float = 30.0
    # How often a sweep also lists the store against the accounts (see
    # memory_tools.operations.reconcile);
    # the first sweep of every worker does. None: never (ASSET_WORKER_RECONCILE_SECONDS=0, for
    # an operator who runs `memory-server reconcile` on a schedule of their own).
    reconcile_seconds: float | None = 600.0
    # Objects per namespace whose bytes each reconciling sweep reads and hashes, least recently
    # verified first: checksumming reads every byte, so the scheduled pass takes a rolling
    # window (`memory-server reconcile --verify-checksums` reads them all).
    verify_objects_per_pass: int = 50
    retry_base_seconds: float = 5.0
    retry_max_seconds: float = 600.0


# A claimed job with its asset and object, as the batch read them.
_Loaded = tuple[JobRecord, AssetRecord, ObjectRecord]


@dataclass(frozen=True)
class _Plan:
    """Which indexes a batch writes: the alias's, and the rebuild filling beside it (if any).

    Read before embedding, so the batch is embedded with each index's own embedder; the
    completion checks the alias still points at ``active`` (else the jobs are retried).
    A plan with no rebuild to write is remembered for the next batches
    (:meth:`JobWorker._plan`): its completion checks it is still right.
    """

    active: str
    embedder: Embedder
    target: str | None = None
    target_embedder: Embedder | None = None
    # The rebuild filling beside the alias when the plan was read (its target index), whether
    # this worker writes it or not.
    filling: str | None = None
    # Read for an earlier batch: a completion that finds it outdated writes nothing and the
    # batch is planned again.
    remembered: bool = False
    # The shapes (dimensions, element type) of the indexes named above, as read for this
    # batch: reading the stored vectors to reuse needs them, and need not read them again.
    shapes: Mapping[str, VectorIndex] = field(default_factory=dict[str, VectorIndex])


@dataclass(frozen=True)
class _Embedded:
    """A batch's vectors (one per job, in order) with each job's share of the tokens."""

    embeddings: list[list[float]]
    usages: list[dict[str, int]]
    request_id: str | None


@dataclass(frozen=True)
class _Work:
    """A claimed job with what it needs to embed."""

    job: JobRecord
    asset: AssetRecord
    value: ImageInput | FusedInput | TextInput
    object_mime: str


def _caused_by_outage(exc: BaseException) -> bool:
    """Whether ``exc`` (or a leaf of an exception group) is a lost database."""
    if isinstance(exc, BaseExceptionGroup):
        group: BaseExceptionGroup[BaseException] = exc
        return any(_caused_by_outage(inner) for inner in group.exceptions)
    return isinstance(exc, DatabaseUnavailable)


def retry_delay(attempt: int, config: WorkerConfig) -> float:
    """Capped exponential backoff with equal jitter."""
    ceiling = min(config.retry_max_seconds, config.retry_base_seconds * 2 ** max(0, attempt - 1))
    return ceiling / 2 + random.uniform(0, ceiling / 2)  # noqa: S311 (jitter, not security)


class JobWorker:
    """Runs queued jobs; run any number of these, in one process or many.

    It embeds representations in batches itself and hands a job of any other kind (OCR,
    describe) to the handler it was given for that kind.
    """

    def __init__(
        self,
        services: MemoryServices,
        config: WorkerConfig | None = None,
        *,
        name: str = "",
        reuse_vectors: bool = True,
        handlers: Mapping[str, JobHandler] | None = None,
        store_check: StoreCheck | None = None,
    ) -> None:
        if services.embedder is None:
            raise ValueError("the worker needs an embedder")
        self._services = services
        self._embedder = services.embedder
        # Off only to measure what reuse saves (benchmarks/provider_cost.py): every job then
        # sends its own inputs, images included, as before reuse existed.
        self.reuse_vectors = reuse_vectors
        # The kinds besides ``embed`` this worker runs; it claims only jobs it can run.
        # Built where the app is composed (memory_tools.serving.job_worker); none: embed only.
        self._handlers = dict(handlers or {})
        self._store_check = store_check
        self._kinds = ("embed", *sorted(self._handlers))
        self.config = config or WorkerConfig()
        suffix = secrets.token_hex(4)
        self.worker_id = name or f"{socket.gethostname()}:{os.getpid()}:{suffix}"
        self._wake = anyio.Event()
        self._prepared = False
        self._reconcile_due = 0.0  # anyio clock: the first sweep reconciles
        self._stranded: set[str] = set()  # leased jobs an outage cut short; handed back later
        # The last plan with no rebuild to write (issue 31: no round trip per batch to read
        # the alias); forgotten when a completion finds the alias or its rebuild changed.
        self._remembered_plan: _Plan | None = None

    # --- the loop ----------------------------------------------------------------------------

    async def run(self, *, ready: anyio.Event | None = None) -> None:
        """Work until cancelled, its CPU work niced (``MEMORY_WORKER_NICE``).

        OCR, embedding batches and what they start run in threads of lower priority than the
        requests of a server this worker runs in (``memory_db.priority``).
        """
        with background_priority(self._services.settings.memory_worker_nice):
            await self._prepare()
            async with anyio.create_task_group() as group:
                group.start_soon(self._listen)
                group.start_soon(self._sweep_forever)
                # Lanes: an embedding never waits behind OCR or describe work. The slots claim
                # only embedding jobs (what makes a save searchable); jobs of other kinds have a
                # lane of their own, so they are never starved by a stream of saves either.
                for slot in range(self.config.concurrency):
                    group.start_soon(self._slot, slot, ("embed",))
                others = tuple(kind for kind in self._kinds if kind != "embed")
                if others:
                    group.start_soon(self._slot, self.config.concurrency, others)
                log.info(
                    "worker_started",
                    worker=self.worker_id,
                    concurrency=self.config.concurrency,
                    other_kinds=list(others),
                    ocr=ocr_binding() if "ocr" in others else None,
                    nice=current_background_nice(),
                )
                if ready is not None:
                    ready.set()

    async def _slot(self, slot: int, kinds: Sequence[str]) -> None:
        while True:
            try:
                done = await self.run_once(kinds=kinds)
            except Exception as exc:  # the database or store hiccupped: back off, keep the worker
                if _caused_by_outage(exc):  # expected while it lasts: one named event
                    log.warning(
                        "worker_database_unavailable",
                        worker=self.worker_id,
                        slot=slot,
                        exc_info=True,
                    )
                else:
                    log.exception("worker_batch_failed", worker=self.worker_id, slot=slot)
                done = 0
            if done:
                continue
            with anyio.move_on_after(self.config.poll_seconds):
                await self._wake.wait()
            self._wake = anyio.Event() if self._wake.is_set() else self._wake

    async def _listen(self) -> None:
        """Turn NOTIFYs into wake-ups, reconnecting after an outage; the slots also poll."""
        while True:
            try:
                await self._listen_once()
            except Exception:
                log.warning("worker_listen_unavailable", worker=self.worker_id, exc_info=True)
            await anyio.sleep(LISTEN_RETRY_SECONDS)

    async def _listen_once(self) -> None:
        """Listen on one connection until it is lost."""

        def wake() -> None:
            self._wake.set()  # the slots replace a set event, so look it up on every call

        await listen_for_jobs(self._services.database, wake)
        log.warning("worker_listen_lost", worker=self.worker_id)

    async def _sweep_forever(self) -> None:
        while True:
            try:
                await self.sweep()
            except Exception as exc:
                if _caused_by_outage(exc):
                    log.warning("worker_database_unavailable", worker=self.worker_id, exc_info=True)
                else:
                    log.exception("worker_sweep_failed", worker=self.worker_id)
            await anyio.sleep(self.config.sweep_seconds)

    async def sweep(self) -> None:
        """Housekeeping: expired reservations, abandoned jobs, orphans, deleted bytes, artifacts.

        Releases expired upload reservations, fails jobs abandoned on their last attempt,
        deletes orphaned uploads, purges the bytes of deleted images, deletes expired scraper
        artifacts (bytes, then rows) and, every
        ``reconcile_seconds``, runs the store check it was given (a reconciliation pass,
        ``memory_tools.operations.reconcile``, when serving composed it).
        """
        async with self._services.database.unit_of_work() as uow:
            expired = await uow.quota.release_expired()
            abandoned = await uow.jobs.fail_abandoned()
            settled = [
                change
                for owner, asset_id in abandoned
                for change in await uow.assets.reconcile_many(owner, [asset_id])
            ]
        if abandoned:
            metrics.JOBS_FAILED.labels("lease_expired").inc(len(abandoned))
        for change in settled:
            metrics.count_settled(change.status, change.source_kind)
        removed = await self._remove_orphans()
        purged = await purge_deleted_objects(self._services)
        artifacts = await sweep_expired_artifacts(self._services)
        reconciled = await self._reconcile()
        if expired or abandoned or removed or purged or artifacts or reconciled:
            log.info(
                "worker_swept",
                reservations=expired,
                abandoned_jobs=len(abandoned),
                orphans_removed=removed,
                objects_purged=purged,
                artifacts_expired=artifacts,
                reconcile_findings=reconciled,
            )

    async def _reconcile(self) -> int:
        """Reconcile the store when due; returns how many findings it had."""
        check, every = self._store_check, self.config.reconcile_seconds
        if check is None or every is None or anyio.current_time() < self._reconcile_due:
            return 0
        findings = await check(
            self._services, ORPHAN_SAFETY_WINDOW, self.config.verify_objects_per_pass
        )
        self._reconcile_due = anyio.current_time() + every
        return findings

    async def _remove_orphans(self) -> int:
        """Delete bytes whose save never committed, once no save can still claim them."""
        async with self._services.database.unit_of_work() as uow:
            keys = await uow.orphans.open_older_than(ORPHAN_SAFETY_WINDOW)
            claimed = await uow.orphans.claimed(keys)
        removed: list[str] = []
        for key in keys:
            if key in claimed:
                removed.append(key)  # an object owns it after all: resolved, kept
                continue
            try:
                await self._services.store.delete(key)
            except MemoryDbError:
                continue  # stays open; retried on the next sweep
            removed.append(key)
        if removed:
            async with self._services.database.unit_of_work() as uow:
                await uow.orphans.resolve(removed)
        return len(removed) - len(claimed & set(removed))

    async def _prepare(self) -> None:
        # Only the first-start creation of the index; which index the alias names is read
        # again by every batch (an index rebuild switches it while workers run).
        if not self._prepared:
            await prepare_vector_index(
                self._services.database, self._services.settings, self._embedder
            )
            self._prepared = True

    async def drain(self, *, limit: int | None = None) -> int:
        """Process due jobs until none is left (tests, benchmarks, one-shot runs)."""
        await self._prepare()
        total = 0
        while limit is None or total < limit:
            done = await self.run_once()
            if not done:
                return total
            total += done
        return total

    # --- one batch ---------------------------------------------------------------------------

    async def run_once(self, *, kinds: Sequence[str] | None = None) -> int:
        """Claim and process one batch; returns how many jobs it finished (any outcome).

        ``kinds``: the job kinds to claim (default: every kind this worker runs, embedding
        jobs first). Its CPU work runs niced (``MEMORY_WORKER_NICE``), called from
        :meth:`run` or not.
        """
        with background_priority(self._services.settings.memory_worker_nice):
            return await self._run_once(self._kinds if kinds is None else tuple(kinds))

    async def _run_once(self, kinds: Sequence[str]) -> int:
        await self._prepare()
        await self._release_stranded()
        # Statements of their own (no BEGIN and COMMIT round trips): a claim is one lease (two
        # when it also takes a claimed asset's sibling jobs), and each lease stands alone. It
        # reads each job's asset and object too, for all kinds of the batch at once.
        async with self._services.database.single_statements() as uow:
            claimed = await uow.jobs.claim_with_subjects(
                self.worker_id,
                limit=self.config.batch_size,
                lease_seconds=self.config.lease_seconds,
                kinds=kinds,
            )
        jobs = [job for job, _subject in claimed]
        if not jobs:
            return 0
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._heartbeat, [job.id for job in jobs])
                try:
                    # Each completion locks its assets again and looks at their state.
                    loaded = await self._live(claimed)
                    embeds = [one for one in loaded if one[0].kind == "embed"]
                    if embeds:
                        await self._process(embeds)
                    others = [one for one in loaded if one[0].kind != "embed"]
                    if others:
                        await self._run_handlers(others)
                finally:
                    group.cancel_scope.cancel()
        except Exception as exc:
            if _caused_by_outage(exc):
                self._stranded.update(job.id for job in jobs)
            raise
        return len(jobs)

    async def _release_stranded(self) -> None:
        """Hand back the jobs of batches an outage cut short, once the database answers."""
        if not self._stranded:
            return
        stranded = sorted(self._stranded)
        async with self._services.database.unit_of_work() as uow:
            released = await uow.jobs.release(self.worker_id, stranded)
        self._stranded.difference_update(stranded)
        log.info("worker_jobs_released", worker=self.worker_id, jobs=len(released))

    async def _heartbeat(self, job_ids: list[str]) -> None:
        while True:
            await anyio.sleep(self.config.heartbeat_seconds)
            async with self._services.database.unit_of_work() as uow:
                held = await uow.jobs.heartbeat(
                    self.worker_id, job_ids, lease_seconds=self.config.lease_seconds
                )
            if len(held) < len(job_ids):
                log.warning(
                    "worker_lease_lost", worker=self.worker_id, lost=len(job_ids) - len(held)
                )

    # --- jobs of other kinds -----------------------------------------------------------------

    async def _run_handlers(self, jobs: Sequence[_Loaded]) -> None:
        """Run each job with its kind's handler, one after another (they are CPU or I/O bound)."""
        for job, asset, stored in jobs:
            with _job_context(job):
                await self._run_handler(JobSubject(job=job, asset=asset, stored=stored))

    async def _run_handler(self, subject: JobSubject) -> None:
        job = subject.job
        handler = self._handlers[job.kind]
        try:
            result = await handler.run(subject)
        except JobFailed as exc:
            if not exc.retryable:
                await self._fail(job, exc.code, exc.message)
                return
            patient = exc.outage and datetime.now(UTC) - job.created_at < OUTAGE_PATIENCE
            await self._retry(job, exc.code, exc.message, spend_attempt=not patient)
            return
        except Exception as exc:
            if _caused_by_outage(exc):
                raise  # the batch's jobs are handed back once the database answers
            log.warning("worker_handler_failed", kind=job.kind, exc_info=True)
            await self._retry(job, f"{job.kind}_error", f"{job.kind} failed ({type(exc).__name__})")
            return
        await self._complete_kind(job, result)

    async def _complete_kind(self, job: JobRecord, result: JobResult) -> None:
        """Finish one job of another kind: lock its asset, check the lease, then write.

        The write may still refuse (``JobFailed``: the asset changed while the handler
        worked); the completion is then rolled back with it and the job fails with its code.
        """
        try:
            async with self._services.database.unit_of_work() as uow:
                # The asset locked and the job completed in one statement (if it lives).
                asset, done = await uow.jobs.complete_locked(self.worker_id, job, result.usage)
                if asset is None or asset.status in ("deleting", "deleted"):
                    await uow.jobs.cancel(job.id, self.worker_id, reason="asset deleted")
                    return
                if not done:
                    log.warning("worker_lease_lost_at_completion", job_id=job.id)
                    return
                if result.write is not None:
                    await result.write(uow, asset)
        except JobFailed as exc:
            await self._fail(job, exc.code, exc.message)
            return
        log.info("worker_job_done", worker=self.worker_id, kind=job.kind)

    # --- embeddings ----------------------------------------------------------------------------

    async def _process(self, jobs: Sequence[_Loaded]) -> None:
        # The model is the configured one until the batch's plan names the active index's
        # (they differ after a model switch); leaving this block restores both fields.
        with structlog.contextvars.bound_contextvars(
            model=self._embedder.model, task="retrieval.passage"
        ):
            await self._process_batch(jobs)

    async def _process_batch(self, jobs: Sequence[_Loaded]) -> None:
        work: list[_Work] = []
        for job, asset, stored in jobs:
            prepared = await self._load(job, asset, stored)
            if prepared is not None:
                work.append(prepared)
        if not work:
            return
        # Oldest asset first, visual before fused: an image two jobs share is charged to the
        # earliest save's visual job, never to a later save that deduplicated onto it.
        work.sort(key=lambda w: (w.asset.created_at, w.job.representation != "visual"))
        plan = await self._planned(work)
        if plan is not None and not await self._embed_and_complete(work, plan):
            # The remembered plan was outdated (an index switch, or a rebuild began or ended):
            # nothing was written and the jobs are still held. Plan afresh, once.
            plan = await self._planned(work, fresh=True)
            if plan is not None:
                await self._embed_and_complete(work, plan)

    async def _planned(self, work: Sequence[_Work], *, fresh: bool = False) -> _Plan | None:
        """The batch's plan, or ``None`` when this process cannot embed for the active index."""
        try:
            plan = await self._plan(fresh=fresh)
        except ConfigurationError as exc:
            # This process cannot build the active index's embedder (no key for its provider):
            # leave the jobs to a worker that can, and say why.
            log.error("worker_index_embedder_unavailable", worker=self.worker_id, exc_info=True)
            for item in work:
                await self._retry(item.job, "embedder_unavailable", str(exc))
            return None
        structlog.contextvars.bind_contextvars(model=plan.embedder.model)
        return plan

    async def _embed_and_complete(self, work: Sequence[_Work], plan: _Plan) -> bool:
        """Embed the batch and complete it; ``False``: the remembered plan was outdated."""
        try:
            embedded = await self._embed_work(plan.embedder, plan.active, work, plan.shapes)
        except EmbeddingError as exc:
            if not exc.retryable and len(work) > 1:
                # One bad item must not fail its batch-mates: embed them one by one, visual
                # vectors first (a fused job after them reuses its image's stored vector).
                for item in sorted(work, key=lambda w: w.job.representation != "visual"):
                    await self._embed_alone(item, plan)
                return True
            for item in work:
                await self._failed(item, exc)
            return True
        except MemoryDbError:
            raise  # reading the stored vectors met an outage: the batch is handed back
        except Exception as exc:
            for item in work:
                await self._retry(
                    item.job, "embed_error", f"embedding failed ({type(exc).__name__})"
                )
            return True
        targets = await self._embed_target(plan, work)
        return await self._complete(work, embedded, plan, targets, redo_when_outdated=True)

    async def _plan(self, *, fresh: bool = False) -> _Plan:
        """The active index and the rebuild filling beside it, with their embedders.

        Read outside a transaction: the batch's completion checks the alias again under its
        lock, and retries a batch that an index switch overtook. A plan with no rebuild to
        write is remembered and reused without a round trip (unless ``fresh``): the
        completion that writes its batch checks the alias and its filling rebuild under the
        alias's lock, and writes nothing when they changed (a process that switches or starts
        a rebuild may be another one).
        """
        if not fresh and self._remembered_plan is not None:
            return self._remembered_plan
        plan = await self._read_plan()
        # Not a plan whose index the embedder does not fit: its batches never reach the
        # completion that would find the alias switched back, so it would never be forgotten.
        fits = plan.shapes[plan.active].dimensions == plan.embedder.dimensions
        self._remembered_plan = (
            replace(plan, remembered=True) if plan.target is None and fits else None
        )
        return plan

    async def _read_plan(self) -> _Plan:
        """:meth:`_plan` as the database has it now."""
        async with self._services.database.single_statements() as uow:
            # Nothing to hold outside a transaction: the completion holds the alias.
            index = await uow.vector_indexes.open_alias(self._services.vector_alias, hold=False)
            # A filling rebuild's target is among the alias's mirrors: with none, there is none.
            rebuild = (
                await uow.vector_indexes.filling_rebuild(self._services.vector_alias)
                if index.mirrors
                else None
            )
            target = (
                None if rebuild is None else await uow.vector_indexes.open(rebuild.target_index)
            )
        embedders = self._services.embedders
        # An index made before identities were recorded was filled by the configured embedder.
        embedder = self._embedder if index.identity is None else embedders.get(index.identity)
        shapes = {index.name: index}
        filling = None if rebuild is None else rebuild.target_index
        if target is None or target.identity is None:
            return _Plan(active=index.name, embedder=embedder, filling=filling, shapes=shapes)
        try:
            target_embedder = embedders.get(target.identity)
        except ConfigurationError:
            # The rebuild's own run embeds what the worker could not (its verification finds it).
            log.warning("worker_rebuild_embedder_unavailable", target=target.name, exc_info=True)
            return _Plan(active=index.name, embedder=embedder, filling=filling, shapes=shapes)
        return _Plan(
            index.name,
            embedder,
            target.name,
            target_embedder,
            filling=filling,
            shapes={**shapes, target.name: target},
        )

    async def _embed_target(
        self, plan: _Plan, work: Sequence[_Work]
    ) -> Sequence[Sequence[float]] | None:
        """The batch embedded for the rebuild's index too; ``None`` if there is none or it failed.

        A failure here never holds back the active index: the rebuild's verification finds
        the assets missing from its index and embeds them itself.
        """
        if plan.target_embedder is None:
            return None
        try:
            embedded = await self._embed_work(
                plan.target_embedder, plan.target or "", work, plan.shapes
            )
        except Exception:
            log.warning("worker_rebuild_embed_failed", target=plan.target, exc_info=True)
            return None
        return embedded.embeddings

    async def _embed_work(
        self,
        embedder: Embedder,
        index_name: str,
        work: Sequence[_Work],
        shapes: Mapping[str, VectorIndex],
    ) -> _Embedded:
        """Embed ``work`` for ``index_name``, sending each image at most once (embed_reuse).

        Stored visual vectors of the same owner, object and model in that index are reused;
        a job that sent nothing is recorded with zero tokens.
        """
        combiner = embedder if isinstance(embedder, FusesByCombining) else None
        known = (
            await self._known_vectors(embedder.model, index_name, work, shapes)
            if self.reuse_vectors
            else Known()
        )
        needs: list[Need] = []
        for w in work:
            if w.job.representation is None:  # the queue writes one; a row edited by hand may not
                raise ProviderContractError(
                    "invalid_job", f"embedding job {w.job.id} names no representation"
                )
            needs.append(
                Need(w.job.owner_identity, w.asset.object_id, w.job.representation, w.value)
            )
        request = plan_request(
            needs,
            known,
            combiner.combine_fused if combiner is not None and combiner.combines_fused else None,
            reuse=self.reuse_vectors,
        )
        if request.copied:
            metrics.EMBED_REUSED.labels("stored_vector").inc(request.copied)
        if request.shared:
            metrics.EMBED_REUSED.labels("shared_input").inc(request.shared)
        if not request.values:
            return _Embedded(request.vectors([]), request.usages(Usage()), None)
        with metrics.embedding_call(embedder.model, "retrieval.passage"):
            result = await embedder.embed(request.values, "retrieval.passage")
        metrics.count_tokens(
            result.model, prompt=result.usage.prompt_tokens, image=result.usage.image_tokens
        )
        metrics.count_inputs(embedder.model, request.values)
        return _Embedded(
            request.vectors(result.embeddings), request.usages(result.usage), result.request_id
        )

    async def _known_vectors(
        self,
        model: str,
        index_name: str,
        work: Sequence[_Work],
        shapes: Mapping[str, VectorIndex],
    ) -> Known:
        """Stored vectors of ``model`` in ``index_name`` the batch can reuse, per owner.

        The visual vector of each of the batch's objects, and the current fused vectors of
        other assets of the objects of its fused jobs, keyed by their text.
        """
        objects: dict[str, set[str]] = {}
        for item in work:
            objects.setdefault(item.job.owner_identity, set()).add(item.asset.object_id)
        batch = {(item.job.owner_identity, item.asset.id) for item in work}
        fused_wanted: dict[str, set[str]] = {}  # objects of the batch's fused jobs, per owner
        for item in work:
            if item.job.representation == "fused":
                fused_wanted.setdefault(item.job.owner_identity, set()).add(item.asset.object_id)
        known = Known()
        fused: dict[tuple[str, str], StoredVector] = {}
        # Reads outside a transaction: under READ COMMITTED each statement had its own snapshot
        # anyway; a later read sees at least what an earlier one saw, which is all the
        # fused-text check below relies on.
        async with self._services.database.single_statements() as uow:
            shape = shapes.get(index_name)
            index = (
                await uow.vector_indexes.open(index_name)
                if shape is None
                else uow.vector_indexes.bind(shape)
            )
            for owner, object_ids in sorted(objects.items()):
                # Both representations in one statement per owner.
                for stored in await index.reusable_vectors(
                    owner,
                    sorted(object_ids),
                    sorted(fused_wanted.get(owner, ())),
                    model=model,
                ):
                    if stored.representation == "visual":
                        known.visual[(owner, stored.object_id)] = stored.embedding
                    elif (owner, stored.asset_id) not in batch:
                        fused[(owner, stored.asset_id)] = stored
            if not fused:
                return known
            # The text of each other asset's fused vector: its current text, trusted only when
            # its latest fused job is done (read after the asset: an edit that changed the
            # text queues a new job in the same transaction, which then shows as not done).
            assets = await uow.assets.get_many_for_owners(sorted(fused))
            for (owner, asset_id), stored in sorted(fused.items()):
                asset = assets.get((owner, asset_id))
                latest = await uow.jobs.latest(owner, asset_id, "fused")
                if asset is None or latest is None or latest.status != "done":
                    continue
                text = asset_fused_text(asset)
                if text is not None:
                    known.fused[(owner, stored.object_id, text)] = stored.embedding
        return known

    async def _embed_alone(self, item: _Work, plan: _Plan) -> None:
        try:
            embedded = await self._embed_work(plan.embedder, plan.active, [item], plan.shapes)
        except EmbeddingError as exc:
            await self._failed(item, exc)
            return
        except MemoryDbError:
            raise
        except Exception as exc:
            await self._retry(item.job, "embed_error", f"embedding failed ({type(exc).__name__})")
            return
        targets = await self._embed_target(plan, [item])
        await self._complete([item], embedded, plan, targets)  # outdated: retried as a switch

    async def _live(
        self, claimed: Sequence[tuple[JobRecord, tuple[AssetRecord, ObjectRecord] | None]]
    ) -> list[_Loaded]:
        """The claimed jobs with their assets and objects; those of assets in deletion cancelled.

        The claim read the assets outside a transaction (under READ COMMITTED a reload was no
        fresher), and the completion locks the assets again and looks at their state.
        """
        loaded: list[_Loaded] = []
        gone: list[JobRecord] = []
        for job, subject in claimed:
            if subject is None or subject[0].status in ("deleting", "deleted"):
                gone.append(job)
                continue
            loaded.append((job, *subject))
        if gone:
            async with self._services.database.single_statements() as uow:
                for job in gone:
                    await uow.jobs.cancel(
                        job.id, self.worker_id, reason="the asset is being deleted"
                    )
        return loaded

    async def _load(self, job: JobRecord, asset: AssetRecord, stored: ObjectRecord) -> _Work | None:
        """What to embed for one job; refuse what cannot be embedded."""
        with _job_context(job):
            return await self._load_job(job, asset, stored)

    async def _load_job(
        self, job: JobRecord, asset: AssetRecord, stored: ObjectRecord
    ) -> _Work | None:
        if stored.status != "available" or stored.preview_storage_key is None:
            await self._fail(job, "object_unavailable", f"the stored image is {stored.status}")
            return None
        try:
            preview = await read_preview(
                self._services, stored.preview_storage_key, stored.preview_sha256
            )
        except ChecksumMismatch:
            # Not the bytes that were validated: never embed them. Retrying cannot fix this.
            await self._fail(
                job, "integrity_failure", "the stored preview does not match its recorded SHA-256"
            )
            return None
        except MemoryDbError as exc:
            await self._retry(job, "store_unavailable", f"the preview could not be read ({exc})")
            return None
        image = ImageInput(data=preview)
        value: ImageInput | FusedInput | TextInput = image
        if job.representation == "fused":
            text = asset_fused_text(asset)
            if text is None:
                await self._fail(job, "no_text", "the asset has no text for a fused vector")
                return None
            value = FusedInput(parts=(TextInput(text), image))
        return _Work(job=job, asset=asset, value=value, object_mime=stored.mime_type)

    async def _complete(
        self,
        items: Sequence[_Work],
        embedded: _Embedded,
        plan: _Plan,
        targets: Sequence[Sequence[float]] | None = None,
        *,
        redo_when_outdated: bool = False,
    ) -> bool:
        """Finish a batch in one transaction; each job only if this worker still holds it.

        ``targets``: the same batch embedded for the rebuild filling beside the active index
        (new saves are embedded into both while a rebuild runs). ``False``: the plan was a
        remembered one the alias outdated, nothing was written and, ``redo_when_outdated``,
        the jobs are still held for the caller to plan again (else they are retried later).
        """
        if targets is None:
            return await self._complete_active(items, embedded, plan, redo_when_outdated)
        await self._complete_mirrored(items, embedded, plan, targets)
        return True

    async def _complete_active(
        self,
        items: Sequence[_Work],
        embedded: _Embedded,
        plan: _Plan,
        redo_when_outdated: bool = False,
    ) -> bool:
        """Finish a batch written to the active index only, in four round trips.

        BEGIN, the assets locked, then one statement that holds the alias, completes the jobs
        and writes the vectors, usage, provenance and the assets' state
        (``memory_db.vectors.completion``), COMMIT. The rare extras (an asset deleted while the
        batch was embedded) take statements of their own.
        """
        shape = plan.shapes[plan.active]
        embedder = plan.embedder
        mismatch = self._dimension_mismatch(shape, embedder)
        finishing: list[_Finishing] = []
        settled: Sequence[AssetSettled] = ()
        done: frozenset[str] = frozenset()
        outdated = False
        async with self._services.database.unit_of_work() as uow:
            # The completion statement reads the assets' jobs after this lock
            # (memory_db.vectors.completion says why it is a statement of its own).
            finishing, gone = _sort_out(items, embedded, await _lock_assets(uow, items))
            if gone:
                # Held like the completion holds it; its mirrors are where a delete applies.
                index = await uow.vector_indexes.open_alias(self._services.vector_alias)
                await self._cancel_deleted(uow, index, gone)
            if mismatch is None and finishing:
                completed = await uow.vector_indexes.complete_embeddings(
                    shape,
                    self._services.vector_alias,
                    self.worker_id,
                    [
                        _finished(
                            f.asset,
                            f.item,
                            embedder.model,
                            shape,
                            f.embedding,
                            f.usage,
                            embedded.request_id,
                        )
                        for f in finishing
                    ],
                    filling=plan.filling,
                )
                if (completed.alias_target, completed.filling) != (plan.active, plan.filling):
                    # Switched, or a rebuild began or ended, since the plan was read: the
                    # statement wrote nothing (the vectors may be of the old model, or miss
                    # the rebuild's index).
                    self._remembered_plan = None
                    if plan.remembered and redo_when_outdated:
                        log.info(
                            "worker_plan_outdated",
                            worker=self.worker_id,
                            index=completed.alias_target,
                            rebuild=completed.filling,
                        )
                        outdated = True
                    elif completed.alias_target != plan.active:
                        mismatch = self._switched(plan.active, completed.alias_target)
                    else:
                        mismatch = self._rebuild_changed(plan.filling, completed.filling)
                else:
                    # In this transaction: whoever the commit's notice wakes (a save or get
                    # waiting for the embedding) reads the pairs with the new state.
                    await near_duplicates.find_pairs(
                        uow,
                        self._services,
                        shape,
                        _visual_assets(finishing, completed.done),
                        after_completion=True,
                    )
                done, settled = completed.done, completed.settled
        if outdated:
            return False
        await self._report(finishing, done, settled, mismatch)
        return True

    async def _complete_mirrored(
        self,
        items: Sequence[_Work],
        embedded: _Embedded,
        plan: _Plan,
        targets: Sequence[Sequence[float]],
    ) -> None:
        """Finish a batch written to the active index and the rebuild filling beside it.

        Only while a rebuild fills: the statements of :meth:`_complete_active` and, per
        asset, the rebuild's vectors, in one transaction.
        """
        async with self._services.database.unit_of_work() as uow:
            current = await _lock_assets(uow, items)
            # Read again under its lock while a rebuild fills (the remembered plan is only for
            # batches without one): after a switch the next batch writes to the new index
            # (the switch waits for this one to commit).
            index = await uow.vector_indexes.open_alias(self._services.vector_alias)
            if index.name != plan.active:
                # Switched while this batch was embedded: its vectors are of the old model.
                mismatch = self._switched(plan.active, index.name)
            else:
                mismatch = self._dimension_mismatch(index, plan.embedder)
            target: VectorIndex | None = None
            if plan.target in index.mirrors:
                target = await uow.vector_indexes.open(plan.target)
            finishing, gone = _sort_out(items, embedded, current)
            await self._cancel_deleted(uow, index, gone)
            # On a mismatch nothing is written: the live jobs are retried after the commit.
            completing = finishing if mismatch is None else []
            done = await uow.jobs.complete_many(
                self.worker_id, {f.item.job.id: f.usage for f in completing}
            )
            writes = _mirrored_writes(
                [f for f in completing if f.item.job.id in done],
                plan,
                index,
                target,
                dict(zip((id(item) for item in items), targets, strict=False)),
                embedded.request_id,
            )
            settled = await _write_mirrored(uow, index, target, writes)
            if mismatch is None:
                await near_duplicates.find_pairs(
                    uow, self._services, index, _visual_assets(completing, done)
                )
        await self._report(finishing, done, settled, mismatch)

    async def _cancel_deleted(
        self, uow: UnitOfWork, index: VectorIndex, gone: Sequence[_Work]
    ) -> None:
        """Cancel the jobs of assets deleted while their batch was embedded, and their vectors."""
        for item in gone:
            if await uow.jobs.cancel(item.job.id, self.worker_id, reason="asset deleted"):
                scope = VaultScope(item.asset.owner_identity, item.asset.vault)
                await index.delete_asset(scope, item.job.asset_id)

    def _dimension_mismatch(self, index: VectorIndex, embedder: Embedder) -> str | None:
        """Why the batch cannot be written to ``index`` (its vectors' length), or ``None``."""
        if index.dimensions == embedder.dimensions:
            return None
        log.error("worker_index_mismatch", worker=self.worker_id, index=index.name)
        return (
            f"the active vector index {index.name} holds {index.dimensions}-d vectors, "
            f"this worker's embedder makes {embedder.dimensions}-d ones"
        )

    def _rebuild_changed(self, planned: str | None, now: str | None) -> str:
        """Why the batch cannot be written: the rebuild beside the alias is not the planned one."""
        log.info("worker_index_rebuild_changed", worker=self.worker_id, rebuild=now)
        return f"the rebuild filling beside the vector index changed from {planned} to {now}"

    def _switched(self, planned: str, now: str | None) -> str:
        """Why the batch cannot be written: the alias moved from ``planned`` to ``now``."""
        log.info("worker_index_switched", worker=self.worker_id, index=now)
        return f"the vector index switched from {planned} to {now}"

    async def _report(
        self,
        finishing: Sequence[_Finishing],
        done: Collection[str],
        settled: Iterable[AssetSettled],
        mismatch: str | None,
    ) -> None:
        """After the commit: count the settled assets, retry a mismatched batch, log the rest."""
        for change in settled:
            metrics.count_settled(change.status, change.source_kind)
        if mismatch is not None:
            for f in finishing:
                await self._retry(f.item.job, "index_mismatch", mismatch)
            return
        for f in finishing:
            if f.item.job.id not in done:
                log.warning("worker_lease_lost_at_completion", job_id=f.item.job.id)
        if done:
            log.info("worker_jobs_done", worker=self.worker_id, jobs=len(done))

    async def _failed(self, item: _Work, exc: EmbeddingError) -> None:
        """Apply the failure policy (docs/design.md#worker-failures) to one job."""
        job = item.job
        if exc.retryable:
            outage = isinstance(exc, ProviderUnavailable) and (
                datetime.now(UTC) - job.created_at < OUTAGE_PATIENCE
            )
            await self._retry(job, exc.code, str(exc), spend_attempt=not outage)
            return
        if isinstance(exc, ProviderContractError):
            # Wrong vector count, length or values: the provider broke its contract. Alert.
            log.error(
                "worker_provider_contract_violated", job_id=job.id, code=exc.code, exc_info=exc
            )
        await self._fail(job, exc.code, str(exc))
        if exc.code == "unsupported_media":
            # Our validation accepted what the provider cannot read: keep the object out of
            # dedupe and embedding until someone looks (docs/design.md#worker-failures).
            async with self._services.database.unit_of_work() as uow:
                await uow.objects.quarantine(job.owner_identity, item.asset.object_id)
            log.warning("worker_object_quarantined", object_id=item.asset.object_id)

    async def _retry(
        self, job: JobRecord, code: str, message: str, *, spend_attempt: bool = True
    ) -> None:
        with _job_context(job):
            await self._retry_job(job, code, message, spend_attempt=spend_attempt)

    async def _retry_job(
        self, job: JobRecord, code: str, message: str, *, spend_attempt: bool
    ) -> None:
        async with self._services.database.unit_of_work() as uow:
            await uow.jobs.retry_later(
                job,
                self.worker_id,
                code=code,
                message=message,
                delay=retry_delay(job.attempts, self.config),
                spend_attempt=spend_attempt,
            )
            settled = await uow.assets.reconcile_many(job.owner_identity, [job.asset_id])
        # No attempt left: the job failed for good (an outage spends none, so it never is).
        final = spend_attempt and job.attempts >= job.max_attempts
        counter = metrics.JOBS_FAILED if final else metrics.EMBED_RETRIES
        counter.labels(metrics.bounded(code)).inc()
        for change in settled:
            metrics.count_settled(change.status, change.source_kind)
        log.info("worker_job_retried", job_id=job.id, code=code, attempt=job.attempts)

    async def _fail(self, job: JobRecord, code: str, message: str) -> None:
        with _job_context(job):
            await self._fail_job(job, code, message)

    async def _fail_job(self, job: JobRecord, code: str, message: str) -> None:
        async with self._services.database.unit_of_work() as uow:
            await uow.jobs.fail(job.id, self.worker_id, code=code, message=message)
            settled = await uow.assets.reconcile_many(job.owner_identity, [job.asset_id])
        metrics.JOBS_FAILED.labels(metrics.bounded(code)).inc()
        for change in settled:
            metrics.count_settled(change.status, change.source_kind)
        log.warning("worker_job_failed", job_id=job.id, code=code)


def _job_context(job: JobRecord) -> contextlib.AbstractContextManager[Any]:
    """Log lines about one job name it, its kind, asset, model, representation (not its owner)."""
    return structlog.contextvars.bound_contextvars(
        job_id=job.id,
        kind=job.kind,
        asset_id=job.asset_id,
        model=job.model,
        representation=job.representation,
    )


@dataclass(frozen=True)
class _Finishing:
    """A job of a batch whose asset is still live, with its vector and its share of the usage."""

    item: _Work
    embedding: Sequence[float]
    usage: dict[str, int]
    asset: AssetRecord  # as locked for the completion


@dataclass
class _MirroredWrites:
    """What a completion writes while a rebuild fills: vectors of both indexes, the ledgers."""

    vectors: dict[VaultScope, list[VectorRecord]] = field(
        default_factory=dict[VaultScope, list[VectorRecord]]
    )
    target_vectors: dict[VaultScope, list[VectorRecord]] = field(
        default_factory=dict[VaultScope, list[VectorRecord]]
    )
    ledger: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    embedded: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])  # provenance
    touched: dict[str, set[str]] = field(default_factory=dict[str, set[str]])  # owner: asset ids


def _visual_assets(finishing: Sequence[_Finishing], done: Collection[str]) -> list[str]:
    """The assets whose visual vector this completion wrote: their pairs are searched."""
    return sorted(
        {
            f.item.job.asset_id
            for f in finishing
            if f.item.job.id in done and f.item.job.representation == "visual"
        }
    )


async def _lock_assets(
    uow: UnitOfWork, items: Sequence[_Work]
) -> Mapping[tuple[str, str], AssetRecord]:
    """Lock the batch's assets, in id order so concurrent batches cannot deadlock.

    Deletion updates these rows, so it waits for the completion, or the completion sees
    ``deleting`` and writes nothing for that asset.
    """
    return await uow.assets.lock_many_for_owners(
        [(item.job.owner_identity, item.job.asset_id) for item in items]
    )


def _sort_out(
    items: Sequence[_Work], embedded: _Embedded, current: Mapping[tuple[str, str], AssetRecord]
) -> tuple[list[_Finishing], list[_Work]]:
    """The jobs whose asset is live (to finish), and those whose asset was deleted meanwhile."""
    finishing: list[_Finishing] = []
    gone: list[_Work] = []
    for item, embedding, usage in zip(items, embedded.embeddings, embedded.usages, strict=True):
        asset = current.get((item.job.owner_identity, item.job.asset_id))
        if asset is None or asset.status in ("deleting", "deleted"):
            gone.append(item)
        else:
            finishing.append(_Finishing(item, embedding, usage, asset))
    return finishing, gone


def _mirrored_writes(
    completed: Sequence[_Finishing],
    plan: _Plan,
    index: VectorIndex,
    target: VectorIndex | None,
    target_of: Mapping[int, Sequence[float]],
    request_id: str | None,
) -> _MirroredWrites:
    """The rows a mirrored completion writes for the jobs it completed (no I/O).

    ``target_of`` maps each item (by ``id``) to its vector of the rebuild's embedder.
    """
    embedder, target_embedder = plan.embedder, plan.target_embedder
    mirrored = target.name if target is not None and target_embedder is not None else None
    writes = _MirroredWrites()
    for f in completed:
        job, asset = f.item.job, f.asset
        scope = VaultScope(asset.owner_identity, asset.vault)
        # Labelled with the model that made it (the job's label is the one asked for at save
        # time; an index switch may have changed the model since).
        writes.vectors.setdefault(scope, []).append(
            _record(asset, f.item, embedder.model, f.embedding)
        )
        if target is not None and target_embedder is not None:
            writes.target_vectors.setdefault(scope, []).append(
                _record(asset, f.item, target_embedder.model, target_of[id(f.item)])
            )
        writes.ledger.append(
            {
                "owner_identity": job.owner_identity,
                "source": "embed_image_document",
                "model": embedder.model,
                **f.usage,
                "asset_id": job.asset_id,
                "job_id": job.id,
                "request_id": request_id,
            }
        )
        writes.embedded.append(
            _embed_provenance(asset, job, embedder.model, index, f.usage, request_id, also=mirrored)
        )
        writes.touched.setdefault(job.owner_identity, set()).add(job.asset_id)
    return writes


async def _write_mirrored(
    uow: UnitOfWork, index: VectorIndex, target: VectorIndex | None, writes: _MirroredWrites
) -> list[AssetSettled]:
    """Write a mirrored completion's rows; the assets it settled."""
    for scope, records in writes.vectors.items():
        await index.upsert(scope, records)
    if target is not None:
        for scope, records in writes.target_vectors.items():
            await target.upsert(scope, records)
    await uow.usage.record_many(writes.ledger)
    # Who wrote which vector with what, committed with the vectors themselves.
    await uow.provenance.record_many(writes.embedded)
    return [
        change
        for owner, ids in sorted(writes.touched.items())
        for change in await uow.assets.reconcile_many(owner, sorted(ids))
    ]


def _embed_provenance(
    asset: AssetRecord,
    job: JobRecord,
    model: str,
    index: VectorIndex,
    usage: Mapping[str, int],
    request_id: str | None,
    *,
    also: str | None,
) -> dict[str, Any]:
    """The ``asset_embed`` provenance of one vector the worker wrote (no text, no vector).

    The model that made it, the index it went to (its dimensions and element type), the job,
    the provider's request and the tokens charged to it (0: a stored vector was reused), and
    the rebuild's index when the vector was written there too.
    """
    detail: dict[str, Any] = {
        "jobId": job.id,
        "representation": job.representation,
        "model": model,
        "index": index.name,
        "dimensions": index.dimensions,
        "element": index.element,
        "tokens": int(usage.get("total_tokens", 0)),
        "requestId": request_id,
    }
    if also is not None:
        detail["alsoIndex"] = also
    return {
        "operation": "asset_embed",
        "actor_identity": WORKER_ACTOR,
        "owner_identity": asset.owner_identity,
        "vault": asset.vault,
        "target_kind": "asset",
        "target_id": asset.id,
        "detail": detail,
    }


def _finished(
    asset: AssetRecord,
    item: _Work,
    model: str,
    index: VectorIndex,
    embedding: Sequence[float],
    usage: Mapping[str, int],
    request_id: str | None,
) -> FinishedJob:
    """One job's vector, usage and provenance, with the asset's placement as locked."""
    job = item.job
    provenance = _embed_provenance(asset, job, model, index, usage, request_id, also=None)
    return FinishedJob(
        job_id=job.id,
        owner_identity=job.owner_identity,
        vault=asset.vault,
        vector=_record(asset, item, model, embedding),
        usage=usage,
        usage_source="embed_image_document",
        request_id=request_id,
        provenance_operation=provenance["operation"],
        provenance_actor=provenance["actor_identity"],
        provenance_detail=provenance["detail"],
    )


def _record(
    asset: AssetRecord, item: _Work, model: str, embedding: Sequence[float]
) -> VectorRecord:
    """The vector of one finished job, with the asset's current placement."""
    representation = item.job.representation
    if representation is None:  # the schema forbids it: every embed job names its representation
        raise ValueError("an embedding job without a representation")
    return VectorRecord(
        asset_id=asset.id,
        object_id=asset.object_id,
        project_id=asset.project_id,
        folder_id=asset.folder_id,
        representation=representation,
        model=model,
        mime_type=item.object_mime,
        source_kind=asset.source_kind,
        created_at=asset.created_at,
        embedding=embedding,
    )
