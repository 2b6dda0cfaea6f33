"""Orphan candidates (docs/design.md#orphans): stored keys whose database commit failed.

A save writes bytes before it commits. When the commit fails, the keys are recorded here; the
worker's sweep deletes them once no save can still claim them, and never deletes a key that an
object row references after all.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert

from memory_db.ids import new_id
from memory_db.repositories._base import SessionRepository
from memory_db.schema import AssetObject, OrphanCandidate, ScrapeArtifact


class OrphanRepository(SessionRepository):
    """Keys written to the store whose database commit failed."""

    async def record(self, owner: str, keys: Sequence[str], *, reason: str) -> None:
        """Remember ``keys`` for reconciliation (idempotent per key)."""
        for key in keys:
            await self._session.execute(
                insert(OrphanCandidate)
                .values(
                    id=new_id("aoc"), owner_identity=owner, storage_key=key, reason=reason[:200]
                )
                .on_conflict_do_nothing(index_elements=["storage_key"])
            )

    async def resolve(self, keys: Sequence[str]) -> None:
        """Mark keys as handled (deleted, or claimed by an object)."""
        if keys:
            await self._session.execute(
                update(OrphanCandidate)
                .where(OrphanCandidate.storage_key.in_(list(keys)))
                .values(resolved_at=func.now())
            )

    async def open_older_than(self, age: timedelta, *, limit: int = 500) -> list[str]:
        """Unresolved candidate keys older than ``age``."""
        rows = await self._session.scalars(
            select(OrphanCandidate.storage_key)
            .where(
                OrphanCandidate.resolved_at.is_(None),
                OrphanCandidate.created_at < func.now() - age,
            )
            .order_by(OrphanCandidate.created_at)
            .limit(limit)
        )
        return list(rows)

    async def claimed(self, keys: Sequence[str]) -> set[str]:
        """Those of ``keys`` that an object or artifact row references (never delete these)."""
        if not keys:
            return set()
        originals = await self._session.scalars(
            select(AssetObject.storage_key).where(AssetObject.storage_key.in_(list(keys)))
        )
        previews = await self._session.scalars(
            select(AssetObject.preview_storage_key).where(
                AssetObject.preview_storage_key.in_(list(keys))
            )
        )
        artifacts = await self._session.scalars(
            select(ScrapeArtifact.storage_key).where(ScrapeArtifact.storage_key.in_(list(keys)))
        )
        return {key for key in [*originals, *previews, *artifacts] if key is not None}


__all__ = ["OrphanRepository"]
