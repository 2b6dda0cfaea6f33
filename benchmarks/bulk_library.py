"""A library of ready assets written straight into PostgreSQL, for benchmarks that need volume.

Saving 10,000 images through the tools takes many minutes; a benchmark about searching or
serving them does not need the ingest path. ``load_library`` writes asset and object rows and
two vectors per asset with COPY, then builds the HNSW index once:

- the fused vector is the local embedder's embedding of the asset's title and description,
- the visual one a clustered synthetic vector (``CLUSTERS`` centres),
- titles and descriptions are drawn from ``WORDS`` so the full-text list has work too.

Asset ``i`` is ``library_asset_id(i)``, created ``i`` seconds before the load, ``ready``, in the
owner's ``Library`` vault. The object rows name storage keys under ``bench/`` that hold no
bytes: nothing here reads them (no previews are asked for).

Used by ``search.py`` (in-process) and ``load.py`` (against a running server that shares the
database).
"""

from __future__ import annotations

import struct
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import numpy as np
from sqlalchemy import text

from memory_db.database import to_plain_url
from memory_db.embedding import Embedder, TextInput
from memory_db.unit_of_work import Database, session_of
from memory_db.vectors import WRITABLE_COLUMNS, resolve_alias, vector_codes, vector_id

WORDS = [
    "harbour",
    "bicycle",
    "revenue",
    "chart",
    "sunset",
    "mountain",
    "invoice",
    "diagram",
    "portrait",
    "kitchen",
    "garden",
    "lighthouse",
    "receipt",
    "screenshot",
    "dashboard",
    "pricing",
    "table",
    "forest",
    "river",
    "bridge",
    "market",
    "poster",
    "festival",
    "concert",
    "stadium",
    "museum",
    "library",
    "bakery",
    "coffee",
    "train",
    "station",
    "airport",
    "beach",
    "desert",
    "glacier",
    "volcano",
    "canyon",
    "meadow",
    "orchard",
    "vineyard",
    "castle",
    "cathedral",
    "skyline",
]
CLUSTERS = 100


_BASE32 = "abcdefghijklmnopqrstuvwxyz234567"  # the alphabet of memory_db.ids


def _id_body(i: int) -> str:
    """``i`` in the ids' base32 alphabet, 26 characters (a valid id, unlike decimal digits)."""
    digits = []
    for _ in range(26):
        i, digit = divmod(i, 32)
        digits.append(_BASE32[digit])
    return "".join(reversed(digits))


def library_asset_id(i: int) -> str:
    """The id of the ``i``-th loaded asset."""
    return f"ast_{_id_body(i)}"


def _object_id(i: int) -> str:
    return f"aob_{_id_body(i)}"


def _halfvec(value: Any) -> bytes:
    array = np.asarray(value, dtype=np.float32)
    return struct.pack(">HH", array.shape[0], 0) + array.astype(">f2").tobytes()


async def library_target(database: Database, alias: str, owner: str) -> tuple[str, str]:
    """The physical vector index behind ``alias`` and the owner's storage namespace."""
    async with database.unit_of_work() as uow:
        index = await resolve_alias(session_of(uow), alias)
        namespace = await session_of(uow).scalar(
            text("SELECT namespace_id FROM mem_asset_namespaces WHERE owner_identity = :o"),
            {"o": owner},
        )
    return index, str(namespace)


async def load_library(
    url: str, index: str, namespace: str, size: int, embedder: Embedder, *, owner: str
) -> None:
    """Write ``size`` ready assets of ``owner`` with their vectors, then rebuild the HNSW index."""
    rng = np.random.default_rng(size)
    titles = [" ".join(rng.choice(WORDS, 3)) for _ in range(size)]
    descriptions = [" ".join(rng.choice(WORDS, 6)) for _ in range(size)]
    fused: list[list[float]] = []
    for start in range(0, size, 2000):
        batch = [
            TextInput(f"{titles[i]}\n{descriptions[i]}")
            for i in range(start, min(size, start + 2000))
        ]
        fused.extend((await embedder.embed(batch, "retrieval.passage")).embeddings)
    centers = rng.standard_normal((CLUSTERS, 1024))
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    visual = centers[rng.integers(0, CLUSTERS, size)] + rng.standard_normal((size, 1024)) * 0.05
    visual /= np.linalg.norm(visual, axis=1, keepdims=True)
    now = datetime.now(UTC)
    vault = f"{owner}/Library"
    conn: Any = await asyncpg.connect(to_plain_url(url))
    try:
        await conn.set_type_codec(
            "halfvec", schema="public", encoder=_halfvec, decoder=bytes, format="binary"
        )
        await conn.copy_records_to_table(
            "mem_asset_objects",
            columns=[
                "id",
                "owner_identity",
                "namespace_id",
                "sha256",
                "storage_key",
                "preview_storage_key",
                "mime_type",
                "extension",
                "bytes",
                "preview_bytes",
                "width",
                "height",
                "status",
            ],
            records=[
                (
                    _object_id(i),
                    owner,
                    namespace,
                    f"{i:064x}",
                    f"bench/{namespace}/{_object_id(i)}/original.png",
                    f"bench/{namespace}/{_object_id(i)}/preview.webp",
                    "image/png",
                    "png",
                    50_000,
                    8_000,
                    800,
                    600,
                    "available",
                )
                for i in range(size)
            ],
        )
        await conn.copy_records_to_table(
            "mem_assets",
            columns=[
                "id",
                "owner_identity",
                "vault",
                "object_id",
                "title",
                "description",
                "source_kind",
                "status",
                "embedding_status",
                "created_by",
                "updated_by",
                "created_at",
            ],
            records=[
                (
                    library_asset_id(i),
                    owner,
                    vault,
                    _object_id(i),
                    titles[i],
                    descriptions[i],
                    "upload",
                    "ready",
                    "ready",
                    owner,
                    owner,
                    now - timedelta(seconds=i),
                )
                for i in range(size)
            ],
        )
        index_sql = await conn.fetchval(
            "SELECT indexdef FROM pg_indexes WHERE tablename = $1 AND indexdef LIKE '%hnsw%'",
            index,
        )
        index_name = index_sql.split(" ON ")[0].split()[-1]
        await conn.execute(f"DROP INDEX {index_name}")
        records = []
        visual_codes = vector_codes(visual, 1024)
        fused_codes = vector_codes(fused, 1024)
        for i in range(size):
            for representation, vector, code in (
                ("visual", visual[i], visual_codes[i]),
                ("fused", fused[i], fused_codes[i]),
            ):
                records.append(
                    (
                        vector_id(library_asset_id(i), representation, embedder.model, 1024),
                        library_asset_id(i),
                        _object_id(i),
                        owner,
                        vault,
                        None,
                        None,
                        representation,
                        embedder.model,
                        1024,
                        "image/png",
                        "upload",
                        now - timedelta(seconds=i),
                        vector,
                        asyncpg.BitString.frombytes(int(code, 2).to_bytes(128, "big"), 1024),
                    )
                )
        await conn.copy_records_to_table(index, columns=WRITABLE_COLUMNS, records=records)
        await conn.execute("SET maintenance_work_mem = '2GB'")
        await conn.execute("SET max_parallel_maintenance_workers = 1")
        await conn.execute(index_sql)
        await conn.execute(f"VACUUM ANALYZE {index}")
        await conn.execute("VACUUM ANALYZE mem_assets")
        await conn.execute("VACUUM ANALYZE mem_asset_objects")
    finally:
        await conn.close()
