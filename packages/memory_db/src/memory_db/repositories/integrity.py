"""The queries behind reconciliation's database checks (docs/runbooks/reconcile.md).

Every method is scoped to one owner (one namespace): a pass walks namespaces one at a time, and
``memory-server reconcile --owner`` limits it to one. Lists are pages (``limit``), never a whole
table. :func:`namespace_lock` keeps two reconcilers (two commands, or a command and a worker)
off the same namespace at once.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import anyio
from sqlalchemy import TextClause, Update, func, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from memory_db.logs import get_logger
from memory_db.repositories._base import SessionRepository
from memory_db.repositories.asset_states import ASSET_STATE_CHANNEL
from memory_db.repositories.assets import object_record, object_transition
from memory_db.repositories.records import INTEGRITY_CODES, ObjectRecord
from memory_db.schema import AssetEmbeddingJob, AssetNamespace, AssetObject, AssetUploadReservation

log = get_logger(__name__)

_UNLOCK_SECONDS = 5.0  # a reachable server answers at once; past this the connection is dropped


@asynccontextmanager
async def namespace_lock(engine: AsyncEngine, namespace_id: str) -> AsyncGenerator[bool]:
    """Try to hold the reconciliation lock of one namespace; yields whether it was taken.

    A PostgreSQL session advisory lock on a connection of its own, held while the block runs
    (a pass lists the store meanwhile, so no transaction stays open for it). Never waits: a
    second reconciler skips a namespace another one holds. A lost connection frees the lock.
    """
    async with engine.connect() as connection:
        await connection.execution_options(isolation_level="AUTOCOMMIT")
        key = {"n": namespace_id}
        taken = bool(
            await connection.scalar(
                text("SELECT pg_try_advisory_lock(hashtext('memory_reconcile'), hashtext(:n))"),
                key,
            )
        )
        try:
            yield taken
        finally:
            if taken:
                await _unlock(connection, key)


async def _unlock(connection: AsyncConnection, key: dict[str, str]) -> None:
    """Release the lock even while the holder is cancelled (a worker stopping mid-pass).

    A session lock outlives a transaction: on a pooled connection it would stay held, and every
    later pass would skip the namespace. When the unlock cannot be sent, the connection is
    discarded instead, which ends its session and the lock with it.
    """
    with anyio.CancelScope(shield=True), anyio.move_on_after(_UNLOCK_SECONDS) as scope:
        try:
            await connection.execute(
                text("SELECT pg_advisory_unlock(hashtext('memory_reconcile'), hashtext(:n))"),
                key,
            )
        except Exception:
            log.warning("reconcile_unlock_failed", exc_info=True)
            await connection.invalidate()
    if scope.cancelled_caught:
        await connection.invalidate()


class IntegrityRepository(SessionRepository):
    """Objects against their bytes, assets against their vectors, counters against rows."""

    # --- objects -------------------------------------------------------------------------------

    async def available_page(
        self, owner: str, *, after: str, limit: int, created_before: datetime
    ) -> list[ObjectRecord]:
        """A page of the owner's available objects created before ``created_before``.

        In id order, after the id ``after``.
        """
        rows = await self._session.scalars(
            select(AssetObject)
            .where(
                AssetObject.owner_identity == owner,
                AssetObject.status == "available",
                AssetObject.created_at < created_before,
                AssetObject.id > after,
            )
            .order_by(AssetObject.id)
            .limit(limit)
        )
        return [object_record(row) for row in rows]

    async def least_verified(
        self, owner: str, *, limit: int, after: str = ""
    ) -> list[ObjectRecord]:
        """Available objects, never verified first, then the longest ago (a rolling window)."""
        rows = await self._session.scalars(
            select(AssetObject)
            .where(
                AssetObject.owner_identity == owner,
                AssetObject.status == "available",
                AssetObject.id > after,
            )
            .order_by(AssetObject.verified_at.asc().nulls_first(), AssetObject.id)
            .limit(limit)
        )
        return [object_record(row) for row in rows]

    async def mark_verified(self, owner: str, object_ids: Sequence[str]) -> None:
        """Record that these objects' bytes were just read and matched their hashes."""
        if object_ids:
            await self._session.execute(
                update(AssetObject)
                .where(AssetObject.owner_identity == owner, AssetObject.id.in_(list(object_ids)))
                .values(verified_at=func.now())
                .execution_options(synchronize_session=False)
            )

    async def users(self, owner: str, object_id: str) -> list[tuple[str, str]]:
        """``(asset_id, vault)`` of every image not deleted that uses the object."""
        rows = await self._session.execute(
            text(
                "SELECT id, vault FROM mem_assets WHERE owner_identity = :o AND object_id = :b "
                "AND status NOT IN ('deleting', 'deleted') ORDER BY id"
            ),
            {"o": owner, "b": object_id},
        )
        return [(str(asset_id), str(vault)) for asset_id, vault in rows.all()]

    async def quarantine(
        self, owner: str, object_id: str, code: str, message: str
    ) -> list[str] | None:
        """Take an available object out of use and fail its images with ``code``.

        The object becomes ``quarantined`` (never reused by a save, never embedded, never
        served); every image of it not deleted becomes ``failed`` with ``code``. Rows are kept.
        Returns the ids of the images changed, or ``None`` (and changes nothing) when the object
        is not available (any more).
        """
        return await self._move_with_images(
            object_transition(
                owner, object_id, ("available",), status="quarantined", updated_at=func.now()
            ),
            text(
                "UPDATE mem_assets SET status = 'failed', failure_code = :c, "
                "failure_message = :m, updated_at = now() "
                "WHERE owner_identity = :o AND object_id = :b "
                "AND status IN ('processing', 'ready', 'failed') RETURNING id"
            ),
            {"o": owner, "b": object_id, "c": code, "m": message},
        )

    async def quarantined_by_reconcile(self, owner: str, *, limit: int) -> list[ObjectRecord]:
        """Quarantined objects whose images reconciliation failed (their bytes may be back)."""
        rows = await self._session.scalars(
            select(AssetObject)
            .where(
                AssetObject.owner_identity == owner,
                AssetObject.status == "quarantined",
                text(
                    "EXISTS (SELECT 1 FROM mem_assets a WHERE a.owner_identity = "
                    "mem_asset_objects.owner_identity AND a.object_id = mem_asset_objects.id "
                    "AND a.status = 'failed' AND a.failure_code IN ('object_missing', "
                    "'object_corrupt'))"
                ),
            )
            .order_by(AssetObject.id)
            .limit(limit)
        )
        return [object_record(row) for row in rows]

    async def lift(self, owner: str, object_id: str) -> list[str] | None:
        """Put a quarantined object back in use: its bytes are back and match.

        Its images that reconciliation failed return to ``processing`` with the failure
        cleared (the caller derives their status from their jobs again). Returns their ids, or
        ``None`` (and changes nothing) when the object is not quarantined (any more).
        """
        return await self._move_with_images(
            object_transition(
                owner,
                object_id,
                ("quarantined",),
                status="available",
                verified_at=func.now(),
                updated_at=func.now(),
            ),
            text(
                "UPDATE mem_assets SET status = 'processing', failure_code = NULL, "
                "failure_message = NULL, updated_at = now() "
                "WHERE owner_identity = :o AND object_id = :b AND status = 'failed' "
                "AND failure_code IN ('object_missing', 'object_corrupt') RETURNING id"
            ),
            {"o": owner, "b": object_id},
        )

    async def _move_with_images(
        self, object_change: Update, images_change: TextClause, params: dict[str, Any]
    ) -> list[str] | None:
        """Change an object, then its images, waking calls that wait on the images' state.

        ``images_change`` returns the ids of the images it changed, and runs only when
        ``object_change`` changed the object: ``None`` (and nothing changed) otherwise.
        """
        if await self._session.scalar(object_change.returning(AssetObject.id)) is None:
            return None
        rows = await self._session.execute(images_change, params)
        ids = [str(asset_id) for (asset_id,) in rows.all()]
        await self._notify(ids)
        return ids

    async def _notify(self, asset_ids: Sequence[str]) -> None:
        for asset_id in asset_ids:
            await self._session.execute(
                text("SELECT pg_notify(:channel, :asset_id)"),
                {"channel": ASSET_STATE_CHANNEL, "asset_id": asset_id},
            )

    # --- vectors -------------------------------------------------------------------------------

    async def ready_without_visual(
        self,
        index: str,
        owner: str,
        *,
        limit: int,
        only: Sequence[str] | None = None,
        after: str = "",
    ) -> list[tuple[str, str]]:
        """``(asset_id, vault)`` of ready images with no visual vector in ``index``.

        Images whose visual job is waiting or running are left out: their vector is coming.
        ``only`` re-checks given ids (after locking their rows).
        """
        name = _index_name(index)
        restrict = "" if only is None else "AND a.id = ANY(:ids) "
        rows = await self._session.execute(
            text(
                "SELECT a.id, a.vault FROM mem_assets a "
                "WHERE a.owner_identity = :o AND a.status = 'ready' AND a.id > :after "
                f"{restrict}AND NOT EXISTS "
                f"(SELECT 1 FROM {name} v WHERE v.asset_id = a.id "
                "AND v.owner_identity = a.owner_identity AND v.representation = 'visual') "
                "AND NOT EXISTS (SELECT 1 FROM mem_asset_embedding_jobs j "
                "WHERE j.owner_identity = a.owner_identity AND j.asset_id = a.id "
                "AND j.representation = 'visual' "
                "AND j.status IN ('queued', 'running', 'retry')) "
                "ORDER BY a.id LIMIT :n"
            ),
            {"o": owner, "n": limit, "ids": list(only or ()), "after": after},
        )
        return [(str(asset_id), str(vault)) for asset_id, vault in rows.all()]

    async def stray_vectors(
        self, index: str, owner: str, *, limit: int, after: str = ""
    ) -> list[tuple[str, str]]:
        """``(vector_id, asset_id)`` of the owner's vectors whose image is deleted or missing."""
        name = _index_name(index)
        rows = await self._session.execute(
            text(
                f"SELECT v.id, v.asset_id FROM {name} v WHERE v.owner_identity = :o "
                "AND v.id > :after "
                "AND NOT EXISTS (SELECT 1 FROM mem_assets a WHERE a.id = v.asset_id "
                "AND a.owner_identity = v.owner_identity "
                "AND a.status NOT IN ('deleting', 'deleted')) ORDER BY v.id LIMIT :n"
            ),
            {"o": owner, "n": limit, "after": after},
        )
        return [(str(vector_id), str(asset_id)) for vector_id, asset_id in rows.all()]

    async def delete_stray_vectors(self, index: str, owner: str, vector_ids: Sequence[str]) -> int:
        """Delete these vectors if their image is still deleted or missing; returns how many."""
        if not vector_ids:
            return 0
        name = _index_name(index)
        result = await self._session.execute(
            text(
                f"DELETE FROM {name} v WHERE v.owner_identity = :o AND v.id = ANY(:ids) "
                "AND NOT EXISTS (SELECT 1 FROM mem_assets a WHERE a.id = v.asset_id "
                "AND a.owner_identity = v.owner_identity "
                "AND a.status NOT IN ('deleting', 'deleted'))"
            ),
            {"o": owner, "ids": list(vector_ids)},
        )
        return int(getattr(result, "rowcount", 0) or 0)

    async def latest_visual_model(self, owner: str, asset_id: str) -> tuple[str, int] | None:
        """``(model, dimensions)`` of the image's newest visual job, if it has one."""
        row = (
            await self._session.execute(
                select(AssetEmbeddingJob.model, AssetEmbeddingJob.dimensions)
                .where(
                    AssetEmbeddingJob.owner_identity == owner,
                    AssetEmbeddingJob.asset_id == asset_id,
                    AssetEmbeddingJob.representation == "visual",
                )
                .order_by(AssetEmbeddingJob.created_at.desc(), AssetEmbeddingJob.id.desc())
                .limit(1)
            )
        ).one_or_none()
        if row is None:
            return None
        model, dimensions = row
        if dimensions is None:  # never for a visual job (the kind_fields check)
            return None
        return str(model), int(dimensions)

    # --- reservations and leases ---------------------------------------------------------------

    async def expired_reservations(self, owner: str) -> int:
        """How many of the owner's reservations are active past their deadline."""
        value = await self._session.scalar(
            select(func.count()).where(
                AssetUploadReservation.owner_identity == owner,
                AssetUploadReservation.status == "active",
                AssetUploadReservation.expires_at < func.now(),
            )
        )
        return int(value or 0)

    async def stale_leases(self, owner: str) -> tuple[int, int]:
        """``(lapsed, abandoned)``: running jobs whose lease ran out, and those on their last try.

        A lapsed job with attempts left is claimed again by the next worker; an abandoned one
        is failed by the sweep (``JobRepository.fail_abandoned``).
        """
        row = (
            await self._session.execute(
                select(
                    func.count(),
                    func.count().filter(
                        AssetEmbeddingJob.attempts >= AssetEmbeddingJob.max_attempts
                    ),
                ).where(
                    AssetEmbeddingJob.owner_identity == owner,
                    AssetEmbeddingJob.status == "running",
                    AssetEmbeddingJob.lease_until < func.now(),
                )
            )
        ).one()
        return int(row[0] or 0), int(row[1] or 0)

    # --- counters ------------------------------------------------------------------------------

    async def recomputed_counters(self, owner: str, *, vector_bytes: int) -> tuple[int, int]:
        """``(used, reserved)`` as the rows say (docs/design.md#namespace).

        Used: the original and preview bytes of every object not yet purged (``deleted``),
        once however many images share it, plus ``vector_bytes`` for each representation
        queued for an image not deleted. Reserved: what the active reservations hold.
        """
        row = (
            await self._session.execute(
                text(
                    "SELECT (SELECT coalesce(sum(bytes + coalesce(preview_bytes, 0)), 0) "
                    "FROM mem_asset_objects WHERE owner_identity = :o AND status <> 'deleted'), "
                    "(SELECT count(*) FROM (SELECT DISTINCT j.asset_id, j.representation "
                    "FROM mem_asset_embedding_jobs j JOIN mem_assets a ON a.id = j.asset_id "
                    "AND a.owner_identity = j.owner_identity WHERE j.owner_identity = :o "
                    "AND j.kind = 'embed' AND a.status NOT IN ('deleting', 'deleted')) AS r), "
                    "(SELECT coalesce(sum(reserved_bytes), 0) FROM mem_asset_upload_reservations "
                    "WHERE owner_identity = :o AND status = 'active')"
                ),
                {"o": owner},
            )
        ).one()
        return int(row[0]) + int(row[1]) * vector_bytes, int(row[2])

    async def set_counters(self, owner: str, *, used: int, reserved: int) -> None:
        """Overwrite the owner's counters (the caller holds the namespace row's quota lock)."""
        await self._session.execute(
            update(AssetNamespace)
            .where(AssetNamespace.owner_identity == owner)
            .values(used_bytes=used, reserved_bytes=reserved, updated_at=func.now())
            .execution_options(synchronize_session=False)
        )


__all__ = ["INTEGRITY_CODES", "IntegrityRepository", "namespace_lock"]


def _index_name(index: str) -> str:
    """``index`` checked as a vector table's name (``InvalidInput`` otherwise)."""
    # Imported when used: memory_db.vectors loads numpy and the embedders, which a process that
    # opens a unit of work for anything else (an `admin` command) should not pay for.
    from memory_db.vectors.ddl import check_identifier

    return check_identifier(index)
