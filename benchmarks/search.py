"""``image_asset_search`` end to end against the bare vector query, in one run, at two sizes.

For each size (10,000 and 100,000 assets by default) it writes asset and object rows and two
vectors per asset straight into PostgreSQL (COPY, then one HNSW build): the fused vector is the
local embedder's embedding of the asset's title and description, the visual one a clustered
synthetic vector. Titles are drawn from a small vocabulary so the full-text list has work too.

Then, for the same text queries, it times
- the whole search call in-process (``AssetSearcher.search``: authorisation, filter checks,
  query embedding with the local embedder, ANN, full-text list, fusion, reload under the
  authorisation predicates, metering, provenance), and
- the bare vector query (``VectorIndex.search`` with the same query vector, limit 50),
and checks the ANN result against an exact scan of the same rows (recall@10).

Target (issue 5): at 100,000 assets, p95 of the whole call <= 5x the p95 of the bare vector
query, and recall@10 >= 0.95.

Usage: python benchmarks/search.py [--sizes 10000,100000] [--queries 60]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import struct
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
from sqlalchemy import text

from memory_db import MemorySettings
from memory_db.database import create_engine, to_plain_url
from memory_db.embedding import LocalEmbedder, TextInput
from memory_db.logs import configure_logging
from memory_db.runtime import prepare_vector_index
from memory_db.storage import LocalAssetObjectStore, UrlSigner
from memory_db.testing import PostgresForTests
from memory_db.unit_of_work import Database
from memory_db.vectors import (
    WRITABLE_COLUMNS,
    VectorIndex,
    resolve_alias,
    vector_codes,
    vector_id,
)
from memory_tools import MemoryServices, admin
from memory_tools.access import authenticate
from memory_tools.search import AssetSearcher, SearchRequest

OWNER = "bench@example.com"
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


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _halfvec(value: Any) -> bytes:
    array = np.asarray(value, dtype=np.float32)
    return struct.pack(">HH", array.shape[0], 0) + array.astype(">f2").tobytes()


async def _load(url: str, index: str, namespace: str, size: int, embedder: LocalEmbedder) -> None:
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
    vault = f"{OWNER}/Library"
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
                    f"aob_{i:026d}",
                    OWNER,
                    namespace,
                    f"{i:064x}",
                    f"bench/{namespace}/aob_{i:026d}/original.png",
                    f"bench/{namespace}/aob_{i:026d}/preview.webp",
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
                    f"ast_{i:026d}",
                    OWNER,
                    vault,
                    f"aob_{i:026d}",
                    titles[i],
                    descriptions[i],
                    "upload",
                    "ready",
                    "ready",
                    OWNER,
                    OWNER,
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
                        vector_id(f"ast_{i:026d}", representation, embedder.model, 1024),
                        f"ast_{i:026d}",
                        f"aob_{i:026d}",
                        OWNER,
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


async def _measure(size: int, query_count: int, tmp: Path) -> dict[str, float]:
    postgres = PostgresForTests(tmp / f"pg{size}")
    await postgres.start()
    name = await postgres.clone()
    url = postgres.url(name)
    database = Database(create_engine(url, pool_size=4))
    embedder = LocalEmbedder()
    settings = MemorySettings(memory_data_dir=tmp / f"data{size}")
    store = LocalAssetObjectStore(settings.objects_dir, UrlSigner(b"b" * 32), "http://127.0.0.1:9")
    services = MemoryServices(database=database, store=store, settings=settings, embedder=embedder)
    try:
        await admin.create_identity(database, OWNER, 10**12)
        key = await admin.create_key(database, OWNER, ("read",))
        await prepare_vector_index(database, settings, embedder)
        async with database.unit_of_work() as uow:
            index_name = await resolve_alias(uow.session, services.vector_alias)
            namespace = await uow.session.scalar(
                text("SELECT namespace_id FROM mem_asset_namespaces WHERE owner_identity = :o"),
                {"o": OWNER},
            )
        started = time.perf_counter()
        await _load(url, index_name, str(namespace), size, embedder)
        load_seconds = time.perf_counter() - started
        async with database.unit_of_work() as uow:
            caller = await authenticate(uow, key.secret)
        searcher = AssetSearcher(services)
        rng = np.random.default_rng(3)
        queries = [" ".join(rng.choice(WORDS, 2)) for _ in range(query_count)]
        for query in queries[:5]:  # warm caches and the prepared index check
            await searcher.search(caller, SearchRequest(query=query))
        whole: list[float] = []
        bare: list[float] = []
        exact: list[float] = []
        recall: list[float] = []
        scope = [record.scope for record in await _vaults(database)]
        for query in queries:
            start = time.perf_counter()
            await searcher.search(caller, SearchRequest(query=query))
            whole.append(time.perf_counter() - start)
            vector = (await embedder.embed([TextInput(query)], "retrieval.query")).embeddings[0]
            async with database.unit_of_work() as uow:
                index = await VectorIndex.open(uow.session, index_name)
                start = time.perf_counter()
                ann = await index.search(vector, scope, model=embedder.model, limit=50)
                bare.append(time.perf_counter() - start)
            async with database.unit_of_work() as uow:
                index = await VectorIndex.open(uow.session, index_name)
                start = time.perf_counter()
                truth = await index.search(
                    vector, scope, model=embedder.model, limit=10, strategy="exact"
                )
                exact.append(time.perf_counter() - start)
            top = {hit.vector_id for hit in truth}
            recall.append(len(top & {hit.vector_id for hit in ann[:10]}) / max(1, len(top)))
    finally:
        await database.close()
        postgres.stop()
    return {
        "load_s": load_seconds,
        "whole_p50": statistics.median(whole) * 1000,
        "whole_p95": _pct(whole, 0.95) * 1000,
        "bare_p50": statistics.median(bare) * 1000,
        "bare_p95": _pct(bare, 0.95) * 1000,
        "exact_p50": statistics.median(exact) * 1000,
        "recall": statistics.mean(recall),
    }


async def _vaults(database: Database) -> list[Any]:
    async with database.unit_of_work() as uow:
        return await uow.vaults.accessible(OWNER)


async def run(sizes: list[int], query_count: int) -> dict[int, dict[str, float]]:
    results: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            results[size] = await _measure(size, query_count, Path(tmp))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    configure_logging(level="warning")
    sizes = [int(s) for s in args.sizes.split(",")]
    results = asyncio.run(run(sizes, args.queries))
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"text queries: {args.queries}; two vectors per asset; local embedder")
    print(
        f"{'assets':>8}{'load s':>8}{'call p50':>10}{'call p95':>10}{'ANN p50':>9}{'ANN p95':>9}"
        f"{'exact p50':>11}{'recall@10':>11}{'p95 ratio':>11}"
    )
    for size, m in results.items():
        print(
            f"{size:>8,}{m['load_s']:>8.0f}{m['whole_p50']:>10.1f}{m['whole_p95']:>10.1f}"
            f"{m['bare_p50']:>9.1f}{m['bare_p95']:>9.1f}{m['exact_p50']:>11.1f}"
            f"{m['recall']:>11.3f}{m['whole_p95'] / m['bare_p95']:>10.1f}x"
        )
    print(
        "times in ms; call = the whole image_asset_search path in-process; ANN = the bare "
        "vector query (limit 50) with the same query vector; exact = exact scan of the same "
        "rows; p95 ratio = call p95 / ANN p95 (target <= 5x at 100,000, recall@10 >= 0.95)"
    )


if __name__ == "__main__":
    main()
