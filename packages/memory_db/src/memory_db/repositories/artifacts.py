"""Scraper artifacts (docs/design.md#artifacts): owned, expiring, validated image bytes.

Every read is by owner: :meth:`ArtifactRepository.get_owned` answers ``None`` alike for an
unknown id, another owner's artifact and an expired one, so callers cannot tell them apart.
Expired rows stay until the worker's sweep deletes them with their bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import delete, func, select

from memory_db.repositories._base import SessionRepository, record_from_row
from memory_db.repositories.records import ArtifactRecord, ArtifactUsage
from memory_db.schema import ScrapeArtifact


def _record(row: ScrapeArtifact) -> ArtifactRecord:
    return record_from_row(ArtifactRecord, row, source_ref=dict(row.source_ref))


class ArtifactRepository(SessionRepository):
    """Artifacts of one owner: create, read while live, list and delete expired ones."""

    async def create(
        self,
        *,
        artifact_id: str,
        owner: str,
        namespace_id: str,
        storage_key: str,
        sha256: str,
        mime_type: str,
        nbytes: int,
        width: int,
        height: int,
        source_kind: str,
        source_ref: dict[str, Any],
        ttl: timedelta,
    ) -> ArtifactRecord:
        """Record an artifact that expires ``ttl`` after now, by the database's clock.

        The database checks its namespace, key, kind and bounds.
        """
        row = ScrapeArtifact(
            id=artifact_id,
            owner_identity=owner,
            namespace_id=namespace_id,
            storage_key=storage_key,
            sha256=sha256,
            mime_type=mime_type,
            bytes=nbytes,
            width=width,
            height=height,
            source_kind=source_kind,
            source_ref=source_ref,
            expires_at=func.now() + ttl,
        )
        self._session.add(row)
        await self._session.flush()
        await self._session.refresh(row)
        return _record(row)

    async def get_owned(self, owner: str, artifact_id: str) -> ArtifactRecord | None:
        """``owner``'s live artifact ``artifact_id``; ``None`` if unknown, not theirs or expired."""
        row = await self._session.scalar(
            select(ScrapeArtifact).where(
                ScrapeArtifact.id == artifact_id,
                ScrapeArtifact.owner_identity == owner,
                ScrapeArtifact.expires_at > func.now(),
            )
        )
        return None if row is None else _record(row)

    async def live_usage(self, owner: str) -> ArtifactUsage:
        """How many live (unexpired) artifacts ``owner`` holds, and their bytes."""
        count, total = (
            await self._session.execute(
                select(func.count(), func.coalesce(func.sum(ScrapeArtifact.bytes), 0)).where(
                    ScrapeArtifact.owner_identity == owner,
                    ScrapeArtifact.expires_at > func.now(),
                )
            )
        ).one()
        return ArtifactUsage(int(count), int(total))

    async def expired(self, *, limit: int = 500) -> list[ArtifactRecord]:
        """Expired artifacts of every owner, oldest expiry first."""
        rows = await self._session.scalars(
            select(ScrapeArtifact)
            .where(ScrapeArtifact.expires_at <= func.now())
            .order_by(ScrapeArtifact.expires_at)
            .limit(limit)
        )
        return [_record(row) for row in rows]

    async def delete(self, artifact_ids: Sequence[str]) -> int:
        """Delete the rows of ``artifact_ids`` (their bytes are the caller's to delete)."""
        if not artifact_ids:
            return 0
        result = await self._session.execute(
            delete(ScrapeArtifact)
            .where(ScrapeArtifact.id.in_(list(artifact_ids)))
            .returning(ScrapeArtifact.id)
        )
        return len(result.all())

    async def delete_owned(self, owner: str, artifact_id: str) -> ArtifactRecord | None:
        """Delete ``owner``'s artifact ``artifact_id`` (expired or not); the row it was."""
        row = await self._session.scalar(
            delete(ScrapeArtifact)
            .where(ScrapeArtifact.id == artifact_id, ScrapeArtifact.owner_identity == owner)
            .returning(ScrapeArtifact)
        )
        return None if row is None else _record(row)

    async def stored_keys(self, owner: str) -> set[str]:
        """Every key whose bytes ``owner``'s artifact rows account for, expired or not.

        An expired artifact's bytes are the sweep's to delete with its row, so reconciliation
        counts them as accounted for.
        """
        keys = await self._session.scalars(
            select(ScrapeArtifact.storage_key).where(ScrapeArtifact.owner_identity == owner)
        )
        return set(keys)


__all__ = ["ArtifactRepository"]
