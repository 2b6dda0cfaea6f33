"""The server's work queue as one list: queued jobs, purges and reconciliation passes.

Operators read it (the web app's Jobs page, docs/design.md#jobs). Nothing here is scoped to an
owner: the caller's ``admin`` key scope is checked by the workflow above this repository.

The list is one ``UNION ALL`` ordered by ``(sort_at DESC, id DESC)``; ids are unique across the
three sources (each has its own prefix), so the pair is a total order and a keyset cursor on it
never repeats or skips a row that did not change between pages.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    DateTime,
    Integer,
    Select,
    Text,
    case,
    cast,
    func,
    literal,
    null,
    select,
    tuple_,
    union_all,
)

from memory_db.ids import new_id
from memory_db.repositories._base import SessionRepository, record_from_row
from memory_db.repositories.records import ReconcileRunRecord, WorkItem
from memory_db.schema import AssetEmbeddingJob, AssetObject, ReconcileRun

# A queued job's row kind is its job kind, but ``embedding`` for ``embed`` (the name the Jobs
# page always used); purges and reconciliation passes are the sweep's.
JOB_WORK_KINDS = {"embedding": "embed", "ocr": "ocr", "describe": "describe"}
WORK_KINDS = (*JOB_WORK_KINDS, "purge", "reconcile")


def _run(row: ReconcileRun) -> ReconcileRunRecord:
    return record_from_row(ReconcileRunRecord, row)


def _text(value: Any = None) -> Any:
    return cast(null() if value is None else value, Text)


def _jobs(kinds: Sequence[str]) -> Select[*tuple[Any, ...]]:
    job = AssetEmbeddingJob
    return select(
        case((job.kind == "embed", literal("embedding", Text)), else_=job.kind).label("kind"),
        job.id.label("id"),
        job.status.label("status"),
        job.created_at.label("sort_at"),
        job.owner_identity.label("owner_identity"),
        job.asset_id.label("subject_id"),
        job.representation.label("representation"),
        job.attempts.label("attempts"),
        job.max_attempts.label("max_attempts"),
        case((job.status.in_(("queued", "retry")), job.run_after)).label("due_at"),
        job.lease_owner.label("lease_owner"),
        job.lease_until.label("lease_until"),
        job.last_error_code.label("error_code"),
        job.last_error.label("error"),
        job.completed_at.label("finished_at"),
        cast(null(), BigInteger).label("bytes"),
    ).where(job.kind.in_([JOB_WORK_KINDS[kind] for kind in kinds]))


def _purge(delay: timedelta) -> Select[*tuple[Any, ...]]:
    # An object is "deleting" from its asset's deletion until the sweep purged its bytes (it
    # then becomes "deleted"); the sweep takes it once ``delay`` (the grace window) has passed.
    obj = AssetObject
    waiting = obj.status == "deleting"
    return select(
        literal("purge", Text).label("kind"),
        obj.id.label("id"),
        case((waiting, literal("queued", Text)), else_=literal("done", Text)).label("status"),
        obj.updated_at.label("sort_at"),
        obj.owner_identity.label("owner_identity"),
        obj.id.label("subject_id"),
        _text().label("representation"),
        cast(literal(0), Integer).label("attempts"),
        cast(literal(1), Integer).label("max_attempts"),
        case((waiting, obj.updated_at + delay)).label("due_at"),
        _text().label("lease_owner"),
        cast(null(), DateTime(timezone=True)).label("lease_until"),
        _text().label("error_code"),
        _text().label("error"),
        case((~waiting, obj.updated_at)).label("finished_at"),
        (obj.bytes + func.coalesce(obj.preview_bytes, 0)).label("bytes"),
    ).where(obj.status.in_(("deleting", "deleted")))


def _reconcile() -> Select[*tuple[Any, ...]]:
    run = ReconcileRun
    return select(
        literal("reconcile", Text).label("kind"),
        run.id.label("id"),
        run.status.label("status"),
        run.started_at.label("sort_at"),
        _text().label("owner_identity"),
        _text().label("subject_id"),
        _text().label("representation"),
        cast(literal(1), Integer).label("attempts"),
        cast(literal(1), Integer).label("max_attempts"),
        cast(null(), DateTime(timezone=True)).label("due_at"),
        _text().label("lease_owner"),
        cast(null(), DateTime(timezone=True)).label("lease_until"),
        run.error_code.label("error_code"),
        run.error.label("error"),
        run.finished_at.label("finished_at"),
        run.removed_bytes.label("bytes"),
    )


class WorkRepository(SessionRepository):
    """Every owner's work, for operators; and the record of reconciliation passes."""

    async def list(
        self,
        *,
        kinds: Sequence[str] = WORK_KINDS,
        statuses: Sequence[str] = (),
        before: tuple[datetime, str] | None = None,
        limit: int = 50,
        purge_delay: timedelta = timedelta(0),
    ) -> list[WorkItem]:
        """Newest first by ``(sort_at, id)``; ``before`` is the last row of the previous page.

        ``statuses`` empty means every status; ``purge_delay`` is how long a deleted object
        waits before the sweep purges it (its due time).
        """
        parts: list[Select[*tuple[Any, ...]]] = []
        jobs = [kind for kind in kinds if kind in JOB_WORK_KINDS]
        if jobs:
            parts.append(_jobs(jobs))
        if "purge" in kinds:
            parts.append(_purge(purge_delay))
        if "reconcile" in kinds:
            parts.append(_reconcile())
        if not parts:
            return []
        work = union_all(*parts).subquery("work")
        query = select(work)
        if statuses:
            query = query.where(work.c.status.in_(list(statuses)))
        if before is not None:
            query = query.where(tuple_(work.c.sort_at, work.c.id) < tuple_(*before))
        query = query.order_by(work.c.sort_at.desc(), work.c.id.desc()).limit(limit)
        rows = (await self._session.execute(query)).mappings().all()
        return [WorkItem(**dict(row)) for row in rows]

    async def purge(self, object_id: str, *, purge_delay: timedelta) -> WorkItem | None:
        """One object's purge work; ``None`` unless it is deleting or deleted."""
        part = _purge(purge_delay).where(AssetObject.id == object_id)
        row = (await self._session.execute(part)).mappings().first()
        return None if row is None else WorkItem(**dict(row))

    async def reconcile(self, run_id: str) -> WorkItem | None:
        """One recorded reconciliation pass as the work list shows it."""
        part = _reconcile().where(ReconcileRun.id == run_id)
        row = (await self._session.execute(part)).mappings().first()
        return None if row is None else WorkItem(**dict(row))

    async def record_reconcile_run(
        self,
        *,
        actor_identity: str,
        status: str,
        started_at: datetime,
        namespaces: int = 0,
        listed: int = 0,
        removed: int = 0,
        removed_bytes: int = 0,
        waiting: int = 0,
        foreign_keys: int = 0,
        error_code: str | None = None,
        error: str | None = None,
    ) -> ReconcileRunRecord:
        """Record a finished pass (``done``, or ``failed`` with what stopped it)."""
        row = ReconcileRun(
            id=new_id("arr"),
            actor_identity=actor_identity,
            status=status,
            namespaces=namespaces,
            listed=listed,
            removed=removed,
            removed_bytes=removed_bytes,
            waiting=waiting,
            foreign_keys=foreign_keys,
            error_code=None if error_code is None else error_code[:64],
            error=None if error is None else error[:1000],
            started_at=started_at,
            # The pass's start came from this process's clock, its end from the database's.
            finished_at=func.greatest(func.now(), started_at),
        )
        self._session.add(row)
        await self._session.flush()
        await self._session.refresh(row)
        return _run(row)

    async def reconcile_run(self, run_id: str) -> ReconcileRunRecord | None:
        """One recorded pass."""
        row = await self._session.get(ReconcileRun, run_id)
        return None if row is None else _run(row)


__all__ = ["JOB_WORK_KINDS", "WORK_KINDS", "WorkRepository"]
