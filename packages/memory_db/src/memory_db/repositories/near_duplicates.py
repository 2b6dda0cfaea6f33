"""Near-duplicate pairs as read and decided (docs/design.md#near-duplicates).

The pairs are found from stored vectors (:mod:`memory_db.vectors.near_duplicates`); here they
are read and decided. Every read keeps a pair only while it is open, was found in the index the
alias points at now, and both of its assets are live in the pair's vault: a pair of another
index (after a switch), a trashed asset or an asset moved elsewhere is never shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, case, func, or_, select, update
from sqlalchemy.orm import InstrumentedAttribute, aliased

from memory_db.repositories._base import SessionRepository
from memory_db.repositories.assets import VISIBLE_STATUSES
from memory_db.repositories.records import VaultScope
from memory_db.schema import Asset, AssetObject, NearDuplicatePair, VectorIndexAlias


@dataclass(frozen=True, slots=True)
class NearDuplicate:
    """An open near-duplicate of an asset: the other asset, its title, and their distance."""

    asset_id: str
    title: str
    distance: float


@dataclass(frozen=True, slots=True)
class PairedImage:
    """What an asset's stored object says about its image, for a page that shows a pair."""

    width: int
    height: int
    bytes: int
    preview_storage_key: str | None
    object_status: str


@dataclass(frozen=True, slots=True)
class PairedAsset:
    """An asset of an open pair, as a cluster shows it.

    ``image`` is read only when :meth:`NearDuplicateRepository.open_pairs` is asked for it.
    """

    asset_id: str
    title: str
    created_at: datetime
    image: PairedImage | None = None


@dataclass(frozen=True, slots=True)
class OpenPair:
    """An open pair of a vault, both assets live there, found in the active index."""

    a: PairedAsset
    b: PairedAsset
    distance: float


def _active_index(alias: str) -> ColumnElement[str]:
    return (
        select(VectorIndexAlias.index_name).where(VectorIndexAlias.alias == alias).scalar_subquery()
    )


def _image_columns(stored: type[AssetObject]) -> tuple[InstrumentedAttribute[Any], ...]:
    return (
        stored.width,
        stored.height,
        stored.bytes,
        stored.preview_storage_key,
        stored.status,
    )


def _paired_image(columns: Sequence[Any]) -> PairedImage:
    width, height, size, preview_key, status = columns
    return PairedImage(int(width), int(height), int(size), preview_key, str(status))


class NearDuplicateRepository(SessionRepository):
    """Owner-scoped near-duplicate pairs: an asset's, a vault's, and their decisions."""

    async def of_asset(
        self, owner: str, asset_id: str, *, alias: str, limit: int
    ) -> list[NearDuplicate]:
        """The open near-duplicates of ``owner``'s asset, nearest first, at most ``limit``."""
        return [
            NearDuplicate(str(r[0]), str(r[1]), float(r[2]))
            for r in await self._session.execute(self.of_asset_query(owner, asset_id, alias, limit))
        ]

    @staticmethod
    def of_asset_query(
        owner: str, asset_id: str, alias: str, limit: int
    ) -> Select[str, str, float]:
        """The query of :meth:`of_asset`, for a caller joining it into a read of its own."""
        this = aliased(Asset)
        other = aliased(Asset)
        pair = NearDuplicatePair
        other_id = case((pair.asset_a == asset_id, pair.asset_b), else_=pair.asset_a)
        return (
            select(other.id, other.title, pair.distance)
            .join(this, and_(this.id == asset_id, this.owner_identity == pair.owner_identity))
            .join(other, and_(other.id == other_id, other.owner_identity == pair.owner_identity))
            .where(
                pair.owner_identity == owner,
                or_(pair.asset_a == asset_id, pair.asset_b == asset_id),
                pair.decision == "open",
                pair.index_name == _active_index(alias),
                this.vault == pair.vault,
                other.vault == pair.vault,
                other.status.in_(VISIBLE_STATUSES),
            )
            .order_by(pair.distance, other.id)
            .limit(limit)
        )

    async def open_pairs(
        self, scope: VaultScope, *, alias: str, cap: int, with_images: bool = False
    ) -> list[OpenPair]:
        """The vault's open pairs, those with the newest asset first, at most ``cap``.

        Read from the vault's open pairs (a partial index) joined to both assets by key.
        ``with_images``: each asset's object joined in as well (its size, bytes and preview:
        what the duplicates page shows), so a page needs no second read of the same images;
        the tool's listing does without those two joins.
        """
        a = aliased(Asset)
        b = aliased(Asset)
        pair = NearDuplicatePair
        query = (
            select(a.id, a.title, a.created_at, b.id, b.title, b.created_at, pair.distance)
            .join(a, and_(a.id == pair.asset_a, a.owner_identity == pair.owner_identity))
            .join(b, and_(b.id == pair.asset_b, b.owner_identity == pair.owner_identity))
            .where(
                pair.owner_identity == scope.owner_identity,
                pair.vault == scope.physical_vault,
                pair.decision == "open",
                pair.index_name == _active_index(alias),
                a.vault == pair.vault,
                b.vault == pair.vault,
                a.status.in_(VISIBLE_STATUSES),
                b.status.in_(VISIBLE_STATUSES),
            )
            .order_by(func.greatest(a.created_at, b.created_at).desc(), pair.asset_a, pair.asset_b)
            .limit(cap)
        )
        if not with_images:
            rows = await self._session.execute(query)
            return [
                OpenPair(
                    PairedAsset(str(r[0]), str(r[1]), r[2]),
                    PairedAsset(str(r[3]), str(r[4]), r[5]),
                    float(r[6]),
                )
                for r in rows
            ]
        a_object = aliased(AssetObject)
        b_object = aliased(AssetObject)
        rows = await self._session.execute(
            query.add_columns(*_image_columns(a_object), *_image_columns(b_object))
            .join(
                a_object,
                and_(a_object.id == a.object_id, a_object.owner_identity == a.owner_identity),
            )
            .join(
                b_object,
                and_(b_object.id == b.object_id, b_object.owner_identity == b.owner_identity),
            )
        )
        return [
            OpenPair(
                PairedAsset(str(r[0]), str(r[1]), r[2], _paired_image(r[7:12])),
                PairedAsset(str(r[3]), str(r[4]), r[5], _paired_image(r[12:17])),
                float(r[6]),
            )
            for r in rows
        ]

    async def dismiss(self, scope: VaultScope, asset_ids: Sequence[str], *, actor: str) -> int:
        """Dismiss every open pair of the vault between two of ``asset_ids``; how many.

        Of every index, not only the active one: a decision is about two images, and holds
        when a later index finds the pair again.
        """
        ids = sorted(set(asset_ids))
        pair = NearDuplicatePair
        result = await self._session.execute(
            update(pair)
            .where(
                pair.owner_identity == scope.owner_identity,
                pair.vault == scope.physical_vault,
                pair.asset_a.in_(ids),
                pair.asset_b.in_(ids),
                pair.decision == "open",
            )
            .values(decision="dismissed", decided_by=actor, decided_at=func.now())
            .returning(pair.asset_a)
            .execution_options(synchronize_session=False)
        )
        return len(result.all())


__all__ = [
    "NearDuplicate",
    "NearDuplicateRepository",
    "OpenPair",
    "PairedAsset",
    "PairedImage",
]
