"""Finding an asset's near-duplicates and reading them (docs/design.md#near-duplicates).

The one place ``ASSET_NEAR_DUPLICATE_DISTANCE`` is read (:func:`near_duplicate_distance`):
the embedding job's completion and the ``duplicates`` job find pairs with it
(:func:`find_pairs`); ``image_asset_get`` and ``image_asset_save`` read an asset's stored pairs
(:func:`near_duplicates_of`), never searching vectors at read time. Listing and deciding
clusters is :mod:`memory_tools.workflows.duplicates`.
"""

from __future__ import annotations

from collections.abc import Sequence

from memory_db import MemorySettings, UnitOfWork
from memory_db.vectors.index import VectorIndex
from memory_tools.services import MemoryServices
from memory_tools.wire import NearDuplicate

# How many near-duplicates an asset's answer names (the nearest open ones).
NEAR_DUPLICATES_SHOWN = 3
# How many nearest assets a pair search keeps per asset (within the distance).
PAIRS_PER_ASSET = 5


def near_duplicate_distance(settings: MemorySettings) -> float:
    """The largest cosine distance of two near-duplicates (``ASSET_NEAR_DUPLICATE_DISTANCE``)."""
    return settings.asset_near_duplicate_distance


async def find_pairs(
    uow: UnitOfWork, services: MemoryServices, index: VectorIndex, asset_ids: Sequence[str]
) -> int:
    """Store the near-duplicate pairs of these assets' visual vectors in ``index``; how many."""
    return await uow.vector_indexes.find_near_duplicates(
        index,
        asset_ids,
        max_distance=near_duplicate_distance(services.settings),
        limit=PAIRS_PER_ASSET,
    )


async def near_duplicates_of(
    uow: UnitOfWork, services: MemoryServices, owner: str, asset_id: str
) -> list[NearDuplicate]:
    """The asset's open near-duplicates in its vault, nearest first (no vector search).

    Only assets live in the same vault as this one (so readable by whoever reads it), found
    in the active index, and never a dismissed pair.
    """
    found = await uow.near_duplicates.of_asset(
        owner, asset_id, alias=services.vector_alias, limit=NEAR_DUPLICATES_SHOWN
    )
    return [NearDuplicate(asset_id=n.asset_id, title=n.title, distance=n.distance) for n in found]


__all__ = [
    "NEAR_DUPLICATES_SHOWN",
    "PAIRS_PER_ASSET",
    "find_pairs",
    "near_duplicate_distance",
    "near_duplicates_of",
]
