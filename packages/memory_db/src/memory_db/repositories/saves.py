"""A save's commit in one statement, for its common case (issue 31).

The commit of a save that stores new bytes (no stored copy to share, no earlier scraper save
to repeat, no project or folder to check) is one statement sent outside an explicit
transaction: one statement is one implicit transaction, so all of it commits or none of it
does, in one round trip instead of nine (BEGIN, the locks, the object, the asset, its jobs,
the counters, the provenance, the workers' wake-up, COMMIT).

What the transaction guaranteed, the statement keeps:

- the namespace and the reservation are locked first (the same locking read as
  ``QuotaRepository.lock_reservation``), and every write reads from that lock, so none
  happens before it;
- dedupe under that lock: the object's insert skips a row the dedupe index already holds, and
  an index sees rows whatever the statement's snapshot; then nothing else is written either,
  and the caller commits the slow way, which shares the other save's object;
- the reservation is finalised with the asset, and the provenance and the workers' wake-up
  are sent only if the asset was written.

The statement reads no row without locking it, so its snapshot (taken before it waited for
the locks) cannot mislead it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Column,
    Integer,
    Text,
    exists,
    insert,
    literal,
    select,
    text,
    union_all,
    update,
)
from sqlalchemy import func as sql_func
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.expression import CTE, Select

from memory_db.ids import new_id
from memory_db.repositories._base import execute_alone
from memory_db.repositories.jobs import JOB_CHANNEL
from memory_db.repositories.quota import LOCK_WITH_RESERVATION
from memory_db.schema import (
    PROVENANCE_OPERATIONS,
    Asset,
    AssetJob,
    AssetNamespace,
    AssetObject,
    AssetUploadReservation,
    ProvenanceEvent,
)


@dataclass(frozen=True, slots=True)
class NewImage:
    """What a save's commit writes when it stores new bytes.

    ``object_values`` and ``asset_values`` are the rows' columns by name (as the tables name
    them); ``jobs`` the asset's jobs as ``(kind, representation, model, dimensions)``.
    """

    owner: str
    reservation_id: str
    object_values: Mapping[str, Any]
    asset_values: Mapping[str, Any]
    jobs: Sequence[tuple[str, str | None, str, int | None]]
    used_bytes: int
    provenance_operation: str
    provenance_actor: str
    provenance_detail: Mapping[str, Any]
    max_attempts: int = 5


def _row(model: Any, values: Mapping[str, Any], after: CTE) -> Select[Any]:
    """``values`` as a row of ``model``'s table, once per row of ``after`` (one, or none)."""
    columns = model.__table__.c
    return select(
        *(literal(value, columns[name].type).label(name) for name, value in values.items())
    ).select_from(after)


class SaveRepository:
    """The one-statement save on a unit's session (``Database.single_statements``)."""

    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    async def commit_new_image(self, image: NewImage) -> list[str] | None:
        """Commit ``image`` in one statement (:func:`commit_new_image`): job ids, or ``None``."""
        return await commit_new_image(self._session, image)


async def commit_new_image(session: AsyncSession, image: NewImage) -> list[str] | None:
    """Commit ``image`` in one statement; the ids of its jobs, or ``None`` if nothing was written.

    ``None``: the reservation is not active, or the owner already stores these bytes (a
    concurrent save committed them first); nothing changed, and the caller commits the slow
    way, which says which.
    """
    locked = (
        text(LOCK_WITH_RESERVATION)
        .bindparams(owner=image.owner, reservation=image.reservation_id)
        .columns(Column("namespace_id", Text), Column("held", Integer))
        .cte("locked")
    )
    stored = (
        pg_insert(AssetObject)
        .from_select(list(image.object_values), _row(AssetObject, image.object_values, locked))
        .on_conflict_do_nothing(
            index_elements=["owner_identity", "sha256"],
            index_where=text("status IN ('pending', 'available', 'quarantined')"),
        )
        .returning(AssetObject.id)
        .cte("stored")
    )
    asset = (
        insert(Asset)
        .from_select(list(image.asset_values), _row(Asset, image.asset_values, stored))
        .returning(Asset.id)
        .cte("asset")
    )
    job_ids = [new_id("aej") for _ in image.jobs]
    job_rows = [
        {
            "id": job_id,
            "asset_id": image.asset_values["id"],
            "owner_identity": image.owner,
            "kind": kind,
            "representation": representation,
            "model": model,
            "dimensions": dimensions,
            "status": "queued",
            "max_attempts": image.max_attempts,
        }
        for job_id, (kind, representation, model, dimensions) in zip(
            job_ids, image.jobs, strict=True
        )
    ]
    ctes: list[CTE] = [locked, stored, asset]
    if job_rows:
        jobs = (
            insert(AssetJob)
            .from_select(
                list(job_rows[0]),
                union_all(*(_row(AssetJob, row, asset) for row in job_rows)),
            )
            .returning(AssetJob.id)
            .cte("jobs")
        )
        ctes.append(jobs)
    written = exists(select(asset.c.id))
    counters = (
        update(AssetNamespace)
        .where(AssetNamespace.owner_identity == image.owner, written)
        .values(
            used_bytes=AssetNamespace.used_bytes + image.used_bytes,
            reserved_bytes=AssetNamespace.reserved_bytes - select(locked.c.held).scalar_subquery(),
            updated_at=sql_func.now(),
        )
        .returning(AssetNamespace.owner_identity)
        .cte("counters")
    )
    finalized = (
        update(AssetUploadReservation)
        .where(
            AssetUploadReservation.id == image.reservation_id,
            exists(select(counters.c.owner_identity)),
        )
        .values(
            reserved_bytes=0,
            status="finalized",
            asset_id=image.asset_values["id"],
            updated_at=sql_func.now(),
        )
        .returning(AssetUploadReservation.id)
        .cte("finalized")
    )
    if image.provenance_operation not in PROVENANCE_OPERATIONS:
        raise ValueError(f"unknown provenance operation {image.provenance_operation!r}")
    event = {
        "id": new_id("apv"),
        "operation": image.provenance_operation,
        "actor_identity": image.provenance_actor,
        "owner_identity": image.owner,
        "vault": image.asset_values["vault"],
        "target_kind": "asset",
        "target_id": image.asset_values["id"],
        "outcome": "succeeded",
        "detail": dict(image.provenance_detail),
    }
    provenance = (
        insert(ProvenanceEvent)
        .from_select(list(event), _row(ProvenanceEvent, event, asset))
        .returning(ProvenanceEvent.id)
        .cte("provenance")
    )
    # Wakes listening workers when the statement commits, if the asset was written.
    woken = (
        select(sql_func.pg_notify(JOB_CHANNEL, "").label("sent")).select_from(asset).cte("woken")
    )
    ctes += [counters, finalized, provenance, woken]
    counts = [
        select(sql_func.count()).select_from(cte).scalar_subquery()
        for cte in (asset, finalized, provenance, woken)
    ]
    row = (await execute_alone(session, select(*counts).add_cte(*ctes))).one()
    if not row[0]:
        return None
    return job_ids
