"""The durable job queue (docs/design.md#jobs): jobs of every kind, leases, the wake-up channel.

A worker leases due jobs through ``FOR UPDATE SKIP LOCKED``, so two workers never take the same
job. Every later change of a running job (heartbeat, hand-back, outcome) applies only while that
worker still holds it (:func:`_held_by`), so a worker whose lease was taken over cannot
overwrite the work of the one that reclaimed the job.

Saves wake listening workers with a notification on :data:`JOB_CHANNEL`
(:meth:`JobRepository.notify`); workers listen with :func:`listen_for_jobs`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

import anyio
from sqlalchemy import (
    ColumnElement,
    Integer,
    Interval,
    Select,
    Text,
    and_,
    bindparam,
    case,
    func,
    literal,
    or_,
    select,
    text,
    tuple_,
    update,
)
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import aliased

from memory_db.ids import new_id
from memory_db.repositories._base import SessionRepository, asset_object_join, record_from_row
from memory_db.repositories.asset_states import ASSET_STATE_CHANNEL
from memory_db.repositories.assets import asset_record, object_record
from memory_db.repositories.records import AssetRecord, JobRecord, ObjectRecord
from memory_db.schema import ACTIVE_JOB_STATUSES, JOB_KINDS, Asset, AssetJob, AssetObject
from memory_db.statement_cache import StatementCache

if TYPE_CHECKING:
    from memory_db.unit_of_work import Database

# The one name of the channel saves notify and workers listen on (the docs spell it for operators).
JOB_CHANNEL = "memory_embedding_jobs"
# A statement that leases jobs and reads each one's asset and object (:func:`_leasing`).
_Leasing = Select[AssetJob, Asset, AssetObject]
# The claim statements, by the kinds they take, built once: a worker polls with the same one or
# two kinds every few seconds, and building and compiling this statement cost more CPU than
# running it on an empty queue. The lease's values are parameters (``JobRepository._lease``).
# Few sets of kinds exist (a worker's lanes); the bound only guards against a caller with many.
_CLAIMS: StatementCache[tuple[str, ...], _Leasing] = StatementCache(64)


def _job(row: AssetJob) -> JobRecord:
    return record_from_row(JobRecord, row, usage=dict(row.usage))


def _held_by(lease_owner: str, job_ids: Sequence[str]) -> ColumnElement[bool]:
    """Those of ``job_ids`` that ``lease_owner`` still holds: running under its name.

    A lease that ran out still counts until another worker claims the job, because claiming
    writes the new worker's name; from then on the old worker changes nothing.
    """
    return and_(
        AssetJob.id.in_(list(job_ids)),
        AssetJob.lease_owner == lease_owner,
        AssetJob.status == "running",
    )


def _enrichment_ended(finished: Any) -> Any:
    """A CTE notifying ``ASSET_STATE_CHANNEL`` of each asset whose non-embed job ``finished``.

    Calls waiting on an asset's enrichments (``image_asset_get`` with ``waitFor``) wake when
    this transaction commits; an embedding job's outcome wakes them through
    ``AssetRepository.reconcile_many``. The caller's statement must read the CTE (a SELECT in
    WITH runs only when read).
    """
    ended = select(finished.c.asset_id).where(finished.c.kind != "embed").distinct().subquery()
    return select(func.pg_notify(ASSET_STATE_CHANNEL, ended.c.asset_id).label("sent")).cte(
        "notified"
    )


def _lapsed() -> ColumnElement[bool]:
    """Running jobs whose lease ran out: their worker stopped renewing it."""
    return and_(
        AssetJob.status == "running",
        AssetJob.lease_until < func.now(),
    )


def _embeddings_first(kinds: Sequence[str]) -> tuple[ColumnElement[int], ...]:
    """The claim's first sort key when it takes embedding jobs and others: embeddings first.

    None when it takes one sort only, so that claim walks the claimable index by ``run_after``.
    """
    if "embed" not in kinds or len(set(kinds)) < 2:
        return ()
    return (case((AssetJob.kind == "embed", 0), else_=1),)


def _claim_statement(kinds: tuple[str, ...]) -> _Leasing:
    """The lease of up to ``:claim_limit`` due jobs of ``kinds``, built once per ``kinds``.

    Due: queued or waiting for a retry whose time came, or running with a lease that ran out
    and attempts left. Locked rows are skipped, so two workers never take the same job.
    """
    statement = _CLAIMS.get(kinds)
    if statement is None:
        due = (
            select(AssetJob.id)
            .where(
                AssetJob.kind.in_(list(kinds)),
                or_(
                    and_(
                        AssetJob.status.in_(("queued", "retry")),
                        AssetJob.run_after <= func.now(),
                    ),
                    and_(_lapsed(), AssetJob.attempts < AssetJob.max_attempts),
                ),
            )
            # A save's jobs share run_after: its visual job ("visual" > "fused") is claimed
            # no later than its fused one, whose image vector then comes from it.
            .order_by(
                *_embeddings_first(kinds),
                AssetJob.run_after,
                AssetJob.representation.desc(),
            )
            .limit(bindparam("claim_limit", type_=Integer))
            .with_for_update(skip_locked=True)
            .scalar_subquery()
        )
        statement = _CLAIMS.keep(kinds, _leasing(due))
    return statement


def _leasing(ids: Any) -> _Leasing:
    """Lease the jobs ``ids`` selects to ``:lease_owner`` for ``:lease_for``.

    Each job's asset and object are read in the same statement (outer joins: a job whose asset
    is gone has none).
    """
    leased = (
        update(AssetJob)
        .where(AssetJob.id.in_(ids))
        .values(
            status="running",
            lease_owner=bindparam("lease_owner", type_=Text),
            lease_until=func.now() + bindparam("lease_for", type_=Interval),
            attempts=AssetJob.attempts + 1,
            updated_at=func.now(),
        )
        .returning(*AssetJob.__table__.c)
        .cte("leased")
    )
    job = aliased(AssetJob, leased)
    return (
        select(job, Asset, AssetObject)
        .outerjoin(
            Asset, and_(Asset.owner_identity == job.owner_identity, Asset.id == job.asset_id)
        )
        .outerjoin(AssetObject, asset_object_join())
        .execution_options(populate_existing=True)
    )


@dataclass(frozen=True, slots=True)
class QueueHealth:
    """What :meth:`JobRepository.queue_health` reads: due-or-waiting, running, age, stale."""

    waiting: int  # queued or waiting for a retry
    running: int
    oldest_waiting_seconds: float  # 0 when nothing waits
    stale_leases: int  # running jobs whose lease ran out (their worker stopped renewing it)


class JobRepository(SessionRepository):
    """Durable jobs of every kind: creation, leasing, heartbeats and outcomes."""

    async def create(
        self,
        owner: str,
        asset_id: str,
        *,
        representation: str,
        model: str,
        dimensions: int,
        max_attempts: int = 5,
    ) -> JobRecord:
        """A queued job (one active job per asset, representation, model and dimension)."""
        row = AssetJob(
            id=new_id("aej"),
            asset_id=asset_id,
            owner_identity=owner,
            kind="embed",
            representation=representation,
            model=model,
            dimensions=dimensions,
            max_attempts=max_attempts,
            status="queued",
        )
        self._session.add(row)
        await self._session.flush()
        await self._session.refresh(row)
        return _job(row)

    async def create_many(
        self,
        owner: str,
        asset_id: str,
        *,
        representations: Sequence[str],
        model: str,
        dimensions: int,
        kinds: Sequence[tuple[str, str]] = (),
        max_attempts: int = 5,
    ) -> list[JobRecord]:
        """The queued jobs of one NEW asset, in one statement: what a save queues.

        An embedding job per representation (as :meth:`create`), then a job of each other
        ``(kind, model)`` in ``kinds`` (as :meth:`create_kind`; a new asset has no active job
        of any kind yet, so none is skipped). Returned in that order.
        """
        for kind, _model in kinds:
            if kind == "embed" or kind not in JOB_KINDS:
                raise ValueError(f"not a job kind for create_kind: {kind}")
        embeds = [
            {"kind": "embed", "representation": r, "model": model, "dimensions": dimensions}
            for r in representations
        ]
        others = [
            {"kind": kind, "representation": None, "model": m, "dimensions": None}
            for kind, m in kinds
        ]
        ids = [new_id("aej") for _ in range(len(embeds) + len(others))]
        wanted = [{"id": job_id, **row} for job_id, row in zip(ids, embeds + others, strict=True)]
        if not wanted:
            return []
        rows = await self._session.scalars(
            insert(AssetJob)
            .values(
                [
                    {
                        **row,
                        "asset_id": asset_id,
                        "owner_identity": owner,
                        "max_attempts": max_attempts,
                        "status": "queued",
                    }
                    for row in wanted
                ]
            )
            .returning(AssetJob)
            .execution_options(populate_existing=True)
        )
        made = {row.id: _job(row) for row in rows}
        return [made[job_id] for job_id in ids]

    async def create_kind(
        self, owner: str, asset_id: str, *, kind: str, model: str, max_attempts: int = 5
    ) -> JobRecord | None:
        """A queued job of a kind other than ``embed`` (``ocr``, ``describe``).

        An asset has at most one active job of each kind: when one is queued, running or
        retrying already, nothing is created and ``None`` is returned (that job does the work).
        """
        if kind == "embed" or kind not in JOB_KINDS:
            raise ValueError(f"not a job kind for create_kind: {kind}")
        row = await self._session.scalar(
            insert(AssetJob)
            .values(
                id=new_id("aej"),
                asset_id=asset_id,
                owner_identity=owner,
                kind=kind,
                model=model,
                max_attempts=max_attempts,
                status="queued",
            )
            .on_conflict_do_nothing(
                index_elements=["asset_id", "kind"],
                index_where=text("kind <> 'embed' AND status IN ('queued', 'running', 'retry')"),
            )
            .returning(AssetJob)
            .execution_options(populate_existing=True)
        )
        return None if row is None else _job(row)

    async def for_asset(self, owner: str, asset_id: str) -> list[JobRecord]:
        """Every job of one asset, oldest first."""
        rows = await self._session.scalars(
            select(AssetJob)
            .where(AssetJob.owner_identity == owner, AssetJob.asset_id == asset_id)
            .order_by(
                AssetJob.created_at,
                AssetJob.kind,
                AssetJob.representation,
            )
            .execution_options(populate_existing=True)
        )
        return [_job(row) for row in rows]

    async def notify(self) -> None:
        """Wake listening workers when this transaction commits."""
        await self._session.execute(
            text("SELECT pg_notify(:channel, '')"), {"channel": JOB_CHANNEL}
        )

    async def claim(
        self,
        lease_owner: str,
        *,
        limit: int,
        lease_seconds: float,
        kinds: Sequence[str] = JOB_KINDS,
    ) -> list[JobRecord]:
        """Lease up to ``limit`` due jobs, or running jobs whose lease expired, atomically.

        :meth:`claim_with_subjects` without the assets and objects.
        """
        claimed = await self.claim_with_subjects(
            lease_owner, limit=limit, lease_seconds=lease_seconds, kinds=kinds
        )
        return [job for job, _subject in claimed]

    async def claim_with_subjects(
        self,
        lease_owner: str,
        *,
        limit: int,
        lease_seconds: float,
        kinds: Sequence[str] = JOB_KINDS,
    ) -> list[tuple[JobRecord, tuple[AssetRecord, ObjectRecord] | None]]:
        """Lease up to ``limit`` due jobs, or running jobs whose lease expired, atomically.

        Each job comes with its asset and stored object, read by the statement that leases it
        under the job's owner (``None``: the asset is gone), so a worker reads nothing more
        before its work.

        ``kinds``: the kinds the claiming worker can run; others are left to workers that can.
        Embedding jobs come first, then the other kinds, each oldest due first: an embedding
        makes a save searchable and takes milliseconds, so it never waits in a batch behind
        OCR (a worker also runs the other kinds in a lane of their own, so they are not
        starved: ``memory_tools.jobs.worker``). The due embedding jobs of an asset whose embedding
        job was claimed come with it, even past ``limit``: a save's visual and fused jobs then
        share one batch, which sends their image once (two batches at once would each send it,
        neither vector being stored yet).
        """
        claim = _claim_statement(tuple(kinds))
        claimed = await self._lease(claim, lease_owner, lease_seconds, limit=limit)
        assets = sorted({(j.owner_identity, j.asset_id) for j, _s in claimed if j.kind == "embed"})
        # Fewer than ``limit``: every due job not locked by another claim is in hand already
        # (the same now(), the same predicates), siblings included; looking again finds none.
        if assets and len(claimed) >= limit:
            siblings = (
                select(AssetJob.id)
                .where(
                    AssetJob.kind == "embed",
                    AssetJob.status.in_(("queued", "retry")),
                    AssetJob.run_after <= func.now(),
                    tuple_(AssetJob.owner_identity, AssetJob.asset_id).in_(assets),
                )
                .with_for_update(skip_locked=True)
                .scalar_subquery()
            )
            claimed += await self._lease(_leasing(siblings), lease_owner, lease_seconds)
        return claimed

    async def _lease(
        self,
        statement: _Leasing,
        lease_owner: str,
        lease_seconds: float,
        *,
        limit: int | None = None,
    ) -> list[tuple[JobRecord, tuple[AssetRecord, ObjectRecord] | None]]:
        """Run a :func:`_leasing` statement for ``lease_owner``: the jobs it leased, with subjects.

        ``limit``: the ``claim_limit`` of a :func:`_claim_statement`.
        """
        values: dict[str, object] = {
            "lease_owner": lease_owner,
            "lease_for": timedelta(seconds=lease_seconds),
        }
        if limit is not None:
            values["claim_limit"] = limit
        rows = await self._session.execute(statement, values)
        claimed: list[tuple[JobRecord, tuple[AssetRecord, ObjectRecord] | None]] = []
        for row in rows:
            # Outer joins: a job whose asset is gone comes without one.
            asset = cast("Asset | None", row[1])
            stored = cast("AssetObject | None", row[2])
            subject = (
                None
                if asset is None or stored is None
                else (asset_record(asset), object_record(stored))
            )
            claimed.append((_job(row[0]), subject))
        return claimed

    async def fail_abandoned(self, *, owner: str | None = None) -> list[tuple[str, str]]:
        """Fail running jobs whose lease expired after their last allowed attempt.

        Returns ``(owner, asset_id)`` pairs whose status needs reconciling. ``owner`` limits it
        to one namespace (``memory-server reconcile --owner``).
        """
        only = () if owner is None else (AssetJob.owner_identity == owner,)
        rows = (
            await self._session.execute(
                update(AssetJob)
                .where(_lapsed(), AssetJob.attempts >= AssetJob.max_attempts, *only)
                .values(
                    status="failed",
                    lease_owner=None,
                    lease_until=None,
                    last_error_code="lease_expired",
                    last_error="the worker running this job stopped responding on its last attempt",
                    completed_at=func.now(),
                    updated_at=func.now(),
                )
                .returning(AssetJob.owner_identity, AssetJob.asset_id)
                .execution_options(synchronize_session=False)
            )
        ).all()
        return [(owner, asset_id) for owner, asset_id in rows]

    async def _update_held(
        self, holder: str, job_ids: Sequence[str], values: Mapping[str, Any]
    ) -> set[str]:
        """Set ``values`` on those of ``job_ids`` that ``holder`` still holds; returns their ids."""
        if not job_ids:
            return set()
        rows = await self._session.scalars(
            update(AssetJob)
            .where(_held_by(holder, job_ids))
            .values(**values)
            .returning(AssetJob.id)
            .execution_options(synchronize_session=False)
        )
        return set(rows)

    async def _finish(self, holder: str, job_ids: Sequence[str], **values: Any) -> set[str]:
        """End ``holder``'s lease on those of ``job_ids`` it still holds, setting ``values``.

        Calls waiting on an asset's enrichments (``image_asset_get`` with ``waitFor``) are
        woken on ``ASSET_STATE_CHANNEL`` when a job of another kind than ``embed`` ends or
        goes back to wait, once this transaction commits (an embedding job's outcome wakes
        them through ``AssetRepository.reconcile_many``).
        """
        if not job_ids:
            return set()
        ended = {"lease_owner": None, "lease_until": None, "updated_at": func.now()}
        finished = (
            update(AssetJob)
            .where(_held_by(holder, job_ids))
            .values(**values, **ended)
            .returning(AssetJob.id, AssetJob.asset_id, AssetJob.kind)
            .cte("finished")
        )
        # The wake-up in the same statement (no round trip of its own).
        notified = _enrichment_ended(finished)
        rows = await self._session.execute(
            select(finished.c.id, select(func.count()).select_from(notified).scalar_subquery())
        )
        return {row[0] for row in rows}

    async def complete_locked(
        self, lease_owner: str, job: JobRecord, usage: Mapping[str, int]
    ) -> tuple[AssetRecord | None, bool]:
        """Lock a job's asset and complete the job if its asset lives, in one statement.

        For a job of another kind than ``embed`` (an ``ocr`` or ``describe`` result): the
        asset row is locked first (deletion updates it, so it waits for this transaction or
        is seen), then the job is marked done only if ``lease_owner`` still holds it and the
        asset is not being deleted, and waiters are woken as :meth:`complete_many` does.
        Returns the asset as locked (``None``: gone) and whether the job was completed.
        """
        locked = (
            select(Asset)
            .where(Asset.owner_identity == job.owner_identity, Asset.id == job.asset_id)
            .with_for_update()
            .cte("locked")
        )
        live = select(locked.c.id).where(locked.c.status.not_in(("deleting", "deleted")))
        finished = (
            update(AssetJob)
            .where(_held_by(lease_owner, [job.id]), live.exists())
            .values(
                status="done",
                usage=literal(dict(usage), AssetJob.usage.type),
                last_error_code=None,
                last_error=None,
                completed_at=func.now(),
                lease_owner=None,
                lease_until=None,
                updated_at=func.now(),
            )
            .returning(AssetJob.id, AssetJob.asset_id, AssetJob.kind)
            .cte("finished")
        )
        notified = _enrichment_ended(finished)
        asset = aliased(Asset, locked)
        row = (
            await self._session.execute(
                select(
                    asset,
                    select(func.count()).select_from(finished).scalar_subquery(),
                    select(func.count()).select_from(notified).scalar_subquery(),
                ).execution_options(populate_existing=True)
            )
        ).one_or_none()
        if row is None:
            return None, False
        return asset_record(row[0]), bool(row[1])

    async def heartbeat(
        self, lease_owner: str, job_ids: Sequence[str], *, lease_seconds: float
    ) -> set[str]:
        """Extend the lease of jobs this worker still holds; returns those ids."""
        renewed = {"lease_until": func.now() + timedelta(seconds=lease_seconds)}
        return await self._update_held(lease_owner, job_ids, renewed)

    async def release(self, lease_owner: str, job_ids: Sequence[str]) -> set[str]:
        """Hand back leased jobs whose work was cut short (the database went away mid-batch).

        The attempt did not fail on the job's account, so it is not counted; the jobs are due
        at once instead of when their lease would have expired. Returns the released ids (a job
        already finished, or leased by another worker since, is left alone).
        """
        return await self._finish(
            lease_owner,
            job_ids,
            status="retry",
            attempts=func.greatest(AssetJob.attempts - 1, 0),
            run_after=func.now(),
        )

    async def complete_many(
        self, lease_owner: str, usages: Mapping[str, dict[str, int]]
    ) -> set[str]:
        """Mark these jobs done in one statement, each with its usage.

        Returns the ids that were still leased to ``lease_owner``; a job whose lease was lost
        (another worker owns it now) is left as it is.
        """
        if not usages:
            return set()
        usage = case(
            {job_id: literal(value, AssetJob.usage.type) for job_id, value in usages.items()},
            value=AssetJob.id,
        )
        return await self._finish(
            lease_owner,
            sorted(usages),
            status="done",
            usage=usage,
            last_error_code=None,
            last_error=None,
            completed_at=func.now(),
        )

    async def retry_later(
        self,
        job: JobRecord,
        lease_owner: str,
        *,
        code: str,
        message: str,
        delay: float,
        spend_attempt: bool = True,
    ) -> bool:
        """Schedule another attempt after ``delay`` seconds, or fail after the last one.

        ``spend_attempt=False`` (a provider outage, not this job's fault) keeps the job's
        remaining budget: ``max_attempts`` grows with the attempt just made, so the job is never
        failed for it, while ``attempts`` still counts every claim (and drives the backoff).
        """
        if spend_attempt and job.attempts >= job.max_attempts:
            return await self.fail(job.id, lease_owner, code=code, message=message)
        extra: dict[str, Any] = {}
        if not spend_attempt:
            extra["max_attempts"] = AssetJob.max_attempts + 1
        finished = await self._finish(
            lease_owner,
            [job.id],
            status="retry",
            last_error_code=code[:64],
            last_error=message[:1000],
            run_after=func.now() + timedelta(seconds=delay),
            **extra,
        )
        return bool(finished)

    async def fail(self, job_id: str, lease_owner: str, *, code: str, message: str) -> bool:
        """Fail permanently."""
        finished = await self._finish(
            lease_owner,
            [job_id],
            status="failed",
            last_error_code=code[:64],
            last_error=message[:1000],
            completed_at=func.now(),
        )
        return bool(finished)

    async def cancel(self, job_id: str, lease_owner: str, *, reason: str) -> bool:
        """Cancel a leased job (its asset is being deleted)."""
        finished = await self._finish(
            lease_owner,
            [job_id],
            status="cancelled",
            last_error=reason[:1000],
            completed_at=func.now(),
        )
        return bool(finished)

    async def cancel_for_asset(self, owner: str, asset_id: str) -> int:
        """Cancel every active job of an asset (deletion); running ones lose their lease."""
        result = await self._session.execute(
            update(AssetJob)
            .where(
                AssetJob.owner_identity == owner,
                AssetJob.asset_id == asset_id,
                AssetJob.status.in_(ACTIVE_JOB_STATUSES),
            )
            .values(
                status="cancelled",
                lease_owner=None,
                lease_until=None,
                completed_at=func.now(),
                updated_at=func.now(),
            )
            .execution_options(synchronize_session=False)
        )
        return int(result.rowcount or 0)  # pyright: ignore[reportAttributeAccessIssue]

    async def supersede(self, owner: str, asset_id: str, representation: str) -> int:
        """Cancel every job of one representation of an asset that is not cancelled yet.

        The asset's words changed: queued and retrying jobs would embed the old text, a running
        one loses its lease (its worker then writes nothing, :meth:`complete_many`), and done or
        failed ones describe a vector of the old text that the caller deletes with them.
        Returns how many jobs changed.
        """
        result = await self._session.execute(
            update(AssetJob)
            .where(
                AssetJob.owner_identity == owner,
                AssetJob.asset_id == asset_id,
                AssetJob.representation == representation,
                AssetJob.status != "cancelled",
            )
            .values(
                status="cancelled",
                lease_owner=None,
                lease_until=None,
                last_error="superseded: the asset's text changed",
                completed_at=func.coalesce(AssetJob.completed_at, func.now()),
                updated_at=func.now(),
            )
            .execution_options(synchronize_session=False)
        )
        return int(result.rowcount or 0)  # pyright: ignore[reportAttributeAccessIssue]

    async def get(self, job_id: str) -> JobRecord | None:
        """One job of any owner (operators; the workflow checks the ``admin`` scope)."""
        row = await self._session.scalar(
            select(AssetJob).where(AssetJob.id == job_id).execution_options(populate_existing=True)
        )
        return None if row is None else _job(row)

    async def latest(
        self, owner: str, asset_id: str, representation: str | None, *, kind: str = "embed"
    ) -> JobRecord | None:
        """The newest job of one representation (or, for other kinds, of one kind) of an asset.

        Whatever its status. ``representation`` is ``None`` exactly for kinds but ``embed``.
        """
        same = (
            AssetJob.representation.is_(None)
            if representation is None
            else AssetJob.representation == representation
        )
        row = await self._session.scalar(
            select(AssetJob)
            .where(
                AssetJob.owner_identity == owner,
                AssetJob.asset_id == asset_id,
                AssetJob.kind == kind,
                same,
            )
            .order_by(AssetJob.created_at.desc(), AssetJob.id.desc())
            .limit(1)
            .execution_options(populate_existing=True)
        )
        return None if row is None else _job(row)

    async def requeue(self, job_id: str, *, attempts: int) -> JobRecord | None:
        """Queue a failed or cancelled job again, due now, with ``attempts`` more allowed.

        Its attempt count is kept (the history of how often it ran) and its error cleared.
        Returns ``None`` when the job is not failed or cancelled (any more): the row is updated
        only under that condition, so a concurrent change wins cleanly.
        """
        return await self._move(
            job_id,
            ("failed", "cancelled"),
            status="queued",
            max_attempts=AssetJob.attempts + attempts,
            run_after=func.now(),
            lease_owner=None,
            lease_until=None,
            last_error_code=None,
            last_error=None,
            completed_at=None,
        )

    async def cancel_waiting(self, job_id: str, *, reason: str) -> JobRecord | None:
        """Cancel a job that waits (``queued`` or ``retry``); ``None`` if it does not wait.

        A running job is left alone: its worker holds the lease, and the claim (``FOR UPDATE
        SKIP LOCKED``) and this update exclude each other, so either the job is cancelled before
        a worker takes it or this finds it running and changes nothing.
        """
        return await self._move(
            job_id,
            ("queued", "retry"),
            status="cancelled",
            last_error_code="cancelled",
            last_error=reason[:1000],
            completed_at=func.now(),
        )

    async def _move(self, job_id: str, allowed: tuple[str, ...], **values: Any) -> JobRecord | None:
        """Set a job's columns if its status is one of ``allowed``; ``None`` if it is not.

        The status is the update's own condition, so a concurrent change wins cleanly.
        """
        row = await self._session.scalar(
            update(AssetJob)
            .where(AssetJob.id == job_id, AssetJob.status.in_(allowed))
            .values(**values, updated_at=func.now())
            .returning(AssetJob)
            .execution_options(synchronize_session=False, populate_existing=True)
        )
        return None if row is None else _job(row)

    async def queue_health(self) -> QueueHealth:
        """The queue at a glance, in one aggregate over the active jobs (metrics, at scrape time).

        Reads only rows of the partial index on active statuses, so its cost follows the queue's
        length, not the table's.
        """
        job = AssetJob
        waiting = job.status.in_(("queued", "retry"))
        row = (
            await self._session.execute(
                select(
                    func.count().filter(waiting),
                    func.count().filter(job.status == "running"),
                    func.extract("epoch", func.now() - func.min(job.created_at).filter(waiting)),
                    func.count().filter(_lapsed()),
                ).where(job.status.in_(ACTIVE_JOB_STATUSES))
            )
        ).one()
        return QueueHealth(
            waiting=int(row[0]),
            running=int(row[1]),
            oldest_waiting_seconds=max(0.0, float(row[2] or 0.0)),
            stale_leases=int(row[3]),
        )

    async def counts(self) -> dict[str, int]:
        """Jobs per status (operators, benchmarks)."""
        rows = await self._session.execute(
            select(AssetJob.status, func.count()).group_by(AssetJob.status)
        )
        return {status: int(count) for status, count in rows.all()}


async def listen_for_jobs(database: Database, wake: Callable[[], None]) -> None:
    """Call ``wake`` on every notification of new jobs, until the listening connection is lost.

    Listens on a connection of its own, outside any unit of work, and calls ``wake`` once as
    soon as it listens: jobs queued while nobody listened are due too. Returns when the server
    drops the connection; raises when it cannot connect. Cancelling it stops listening.
    """
    async with database.engine.connect() as conn:
        raw = await conn.get_raw_connection()
        driver: Any = raw.driver_connection
        lost = anyio.Event()

        def notified(*_args: object) -> None:
            wake()

        def terminated(*_args: object) -> None:
            lost.set()

        driver.add_termination_listener(terminated)
        await driver.add_listener(JOB_CHANNEL, notified)
        wake()
        try:
            await lost.wait()
        finally:
            if not lost.is_set():
                with anyio.CancelScope(shield=True):
                    await driver.remove_listener(JOB_CHANNEL, notified)


__all__ = ["JOB_CHANNEL", "JobRepository", "listen_for_jobs"]
