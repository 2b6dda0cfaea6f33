"""Generated image context (docs/generated-context.md): one gated, bound context per asset.

Only gated contexts are written here (:mod:`memory_db.describing.gating`); storing one also
sets the asset's ``generated_text`` (the whitelisted words the full-text document and the
fused text read), and clearing one removes both. A context is *current* while the asset's
object still has the rendition SHA-256 it was generated from; a stale one is never used.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import and_, delete, func, select, update
from sqlalchemy.dialects.postgresql import insert

from memory_db.repositories._base import SessionRepository, asset_object_join, record_from_row
from memory_db.repositories.records import ContextRecord
from memory_db.schema import MAX_GENERATED_TEXT, Asset, AssetContext, AssetObject


def _record(row: AssetContext, current: bool) -> ContextRecord:
    return record_from_row(ContextRecord, row, context=dict(row.context), current=current)


class ContextRepository(SessionRepository):
    """Owner-scoped generated contexts; callers lock the asset row first (like a completion)."""

    async def put(
        self,
        owner: str,
        asset_id: str,
        *,
        object_id: str,
        source_sha256: str,
        model: str,
        context: dict[str, Any],
        generated_at: datetime,
        generated_text: str | None,
        job_id: str | None,
    ) -> None:
        """Store (or replace) the asset's context, unreviewed, and its whitelisted words."""
        values = {
            "object_id": object_id,
            "source_sha256": source_sha256,
            "model": model,
            "context": context,
            "generated_at": generated_at,
            "job_id": job_id,
            "review": "unreviewed",
            "reviewed_by": None,
            "reviewed_at": None,
        }
        await self._session.execute(
            insert(AssetContext)
            .values(asset_id=asset_id, owner_identity=owner, **values)
            .on_conflict_do_update(index_elements=[AssetContext.asset_id], set_=values)
        )
        await self._set_text(owner, asset_id, generated_text)

    async def get(self, owner: str, asset_id: str) -> ContextRecord | None:
        """The asset's context, ``current`` telling whether it describes its bytes now."""
        row = await self._session.execute(
            select(
                AssetContext,
                and_(
                    AssetObject.id == AssetContext.object_id,
                    AssetObject.preview_sha256 == AssetContext.source_sha256,
                ).label("current"),
            )
            .join(
                Asset,
                and_(
                    Asset.id == AssetContext.asset_id,
                    Asset.owner_identity == AssetContext.owner_identity,
                ),
            )
            .join(AssetObject, asset_object_join())
            .where(AssetContext.owner_identity == owner, AssetContext.asset_id == asset_id)
            .execution_options(populate_existing=True)
        )
        found = row.first()
        if found is None:
            return None
        return _record(found[0], bool(found[1]))

    async def accept(self, owner: str, asset_id: str, *, actor: str) -> bool:
        """Mark the asset's context accepted by ``actor``; False when it has none."""
        result = await self._session.execute(
            update(AssetContext)
            .where(AssetContext.owner_identity == owner, AssetContext.asset_id == asset_id)
            .values(review="accepted", reviewed_by=actor, reviewed_at=func.now())
            .returning(AssetContext.asset_id)
        )
        return result.first() is not None

    async def clear(self, owner: str, asset_id: str) -> bool:
        """Delete the asset's context and its words from the index; False when it had none."""
        result = await self._session.execute(
            delete(AssetContext)
            .where(AssetContext.owner_identity == owner, AssetContext.asset_id == asset_id)
            .returning(AssetContext.asset_id)
        )
        await self._set_text(owner, asset_id, None)
        return result.first() is not None

    async def set_fused_note(self, owner: str, asset_id: str, note: str) -> None:
        """Record what became of the asset's fused vector (``metadata.embedding.fused``)."""
        embedding = func.coalesce(Asset.metadata_["embedding"], func.jsonb_build_object())
        await self._session.execute(
            update(Asset)
            .where(Asset.owner_identity == owner, Asset.id == asset_id)
            .values(
                metadata_=Asset.metadata_.op("||")(
                    func.jsonb_build_object(
                        "embedding",
                        embedding.op("||")(func.jsonb_build_object("fused", note)),
                    )
                )
            )
            .execution_options(synchronize_session=False)
        )

    async def _set_text(self, owner: str, asset_id: str, text: str | None) -> None:
        await self._session.execute(
            update(Asset)
            .where(Asset.owner_identity == owner, Asset.id == asset_id)
            .values(generated_text=None if text is None else text[:MAX_GENERATED_TEXT])
            .execution_options(synchronize_session=False)
        )


__all__ = ["ContextRepository"]
