"""Finding near-duplicate pairs from stored visual vectors (docs/design.md#near-duplicates).

:func:`find_near_duplicates` runs in the transaction that wrote the vectors (the embedding
job's completion) or in a ``duplicates`` job's: for each given asset it takes the asset's
stored visual vector, walks the index for the nearest visual vectors of the same owner and
vault whose assets are live, keeps those within ``max_distance``, and upserts the pairs. One
statement for a whole batch; no query vector leaves the database.

Why the distance bound sits outside the nearest-first subquery: inside an iterative graph scan
a bound makes the walk visit up to ``hnsw.max_scan_tuples`` rows when little is near
(``VectorIndex.search`` says the same of a search's threshold).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from memory_db.errors import InvalidInput
from memory_db.repositories.assets import VISIBLE_STATUSES
from memory_db.vectors.index import VectorIndex

# The graph walk's breadth for the pair search: a vault filter over a large table needs the
# iterative scan to fill ``limit`` rows (pgvector's default ef_search of 40 returns fewer).
# Transaction-local; the embedding completion sets them in its own statement's answer
# (``memory_db.vectors.completion``), so the pair search after it costs one round trip.
PAIR_SEARCH_SETTINGS = (
    "set_config('hnsw.iterative_scan', 'relaxed_order', true), "
    "set_config('hnsw.ef_search', '100', true)"
)


def pair_search_locks(keys: str) -> str:
    """A SQL column that takes the pair-search lock of each vault ``keys`` lists, in order.

    ``keys``: a query of ``owner`` and ``vault`` columns. A search sees only committed vectors
    and its own, so two batches completing a picture and its copy at once (two worker slots)
    each looked before the other committed, and the pair was never found. Taken in a
    statement before the search and held to the commit (a transaction-level advisory lock per
    owner and vault), it makes a second search in the same vault wait for the first
    transaction and then read with a snapshot that holds its vectors. Locked in one order, so
    batches of several vaults cannot deadlock on them.
    """
    return (
        "(SELECT count(pg_advisory_xact_lock(hashtextextended("
        "'memory_near_duplicates/' || k.owner || '/' || k.vault, 0))) "
        f"FROM (SELECT DISTINCT owner, vault FROM ({keys}) AS keys ORDER BY owner, vault) AS k)"
    )


async def find_near_duplicates(
    session: AsyncSession,
    index: VectorIndex,
    asset_ids: Sequence[str],
    *,
    max_distance: float,
    limit: int,
    settings_applied: bool = False,
) -> int:
    """Store the pairs of ``asset_ids`` with their ``limit`` nearest live assets of their vault.

    Only visual vectors are compared, of one model (the index's), within one owner's vault.
    A pair found again keeps its decision (a dismissed pair stays dismissed) and takes this
    finding's index and distance. Returns how many pairs were written.
    ``settings_applied``: this transaction set :data:`PAIR_SEARCH_SETTINGS` and took the
    :func:`pair_search_locks` of these assets' vaults already (the embedding completion does).
    """
    if not 0 <= max_distance <= 2:
        raise InvalidInput("max_distance must be 0-2 (a cosine distance)")
    if not 1 <= limit <= 50:
        raise InvalidInput("limit must be 1-50")
    if not asset_ids:
        return 0
    table = index.name
    listed = ", ".join(f"'{status}'" for status in VISIBLE_STATUSES)
    if not settings_applied:
        locks = pair_search_locks(
            "SELECT owner_identity AS owner, vault FROM mem_assets WHERE id = ANY(:ids)"
        )
        await session.execute(
            text(f"SELECT {PAIR_SEARCH_SETTINGS}, {locks}"), {"ids": list(asset_ids)}
        )
    statement = f"""
        WITH src AS (
            SELECT s.asset_id, s.owner_identity, s.vault, s.model, s.embedding
            FROM {table} s
            JOIN mem_assets a ON a.id = s.asset_id AND a.owner_identity = s.owner_identity
            WHERE s.asset_id = ANY(:ids) AND s.representation = 'visual'
              AND a.status IN ({listed}) AND a.vault = s.vault
        ), found AS (
            SELECT src.asset_id AS this, src.owner_identity AS owner, src.vault,
                   n.asset_id AS other, n.distance
            FROM src CROSS JOIN LATERAL (
                SELECT v.asset_id, v.embedding <=> src.embedding AS distance
                FROM {table} v
                JOIN mem_assets o ON o.id = v.asset_id AND o.owner_identity = v.owner_identity
                WHERE v.owner_identity = src.owner_identity AND v.vault = src.vault
                  AND v.representation = 'visual' AND v.model = src.model
                  AND v.asset_id <> src.asset_id
                  AND o.status IN ({listed}) AND o.vault = src.vault
                ORDER BY v.embedding <=> src.embedding
                LIMIT :limit
            ) n
            WHERE n.distance <= :max_distance
        ), pairs AS (
            SELECT DISTINCT ON (least(this, other), greatest(this, other))
                   least(this, other) AS asset_a, greatest(this, other) AS asset_b,
                   owner, vault, least(greatest(distance, 0), 2) AS distance
            FROM found
            ORDER BY least(this, other), greatest(this, other), distance
        )
        INSERT INTO mem_asset_near_duplicates
            (asset_a, asset_b, owner_identity, vault, index_name, distance)
        SELECT asset_a, asset_b, owner, vault, :index, distance FROM pairs
        ON CONFLICT (asset_a, asset_b) DO UPDATE SET
            index_name = EXCLUDED.index_name, distance = EXCLUDED.distance,
            vault = EXCLUDED.vault, found_at = now()
        -- The decision is a person's or an agent's: never reset by a finding.
        WHERE mem_asset_near_duplicates.owner_identity = EXCLUDED.owner_identity
    """
    result = await session.execute(
        text(statement),
        {
            "ids": list(asset_ids),
            "limit": limit,
            "max_distance": max_distance,
            "index": table,
        },
    )
    return int(getattr(result, "rowcount", 0) or 0)


__all__ = ["PAIR_SEARCH_SETTINGS", "find_near_duplicates"]
