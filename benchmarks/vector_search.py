"""Filtered ANN over the versioned vector index, measured against exact scans in the same run.

100,000 synthetic clustered 1,024-d unit vectors spread over 50 vaults (vault and cluster are
independent, so a vault filter keeps 2 % of every cluster). For unfiltered queries and for
queries filtered to one vault it prints recall@10 of the HNSW query (pgvector iterative scan)
against an exact scan, and how much faster the index query is. The filtered cases also time
the exact B-tree path (filter first, score every matching row) and the bits scan (1-bit codes
read index-only from the scope B-tree, the best candidates re-scored with their full vectors;
what 'auto' answers small scopes with), to show where scanning small scopes wins over the graph.
Both element types (halfvec, vector) are measured for recall and size.

Usage: python benchmarks/vector_search.py [--rows 100000] [--queries 50] [--element both]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import struct
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
from sqlalchemy import text

from memory_db.database import create_engine, to_plain_url
from memory_db.repositories import VaultScope
from memory_db.testing import PostgresForTests
from memory_db.unit_of_work import Database
from memory_db.vectors import (
    WRITABLE_COLUMNS,
    SearchTuning,
    VectorIndex,
    create_index,
    vector_codes,
)

DIMS = 1024
VAULTS = 50
CLUSTERS = 100
MODEL = "bench-model"


def _dataset(
    rows: int, seed: int = 7
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((CLUSTERS, DIMS))
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    cluster = rng.integers(0, CLUSTERS, rows)
    vectors = centers[cluster] + rng.standard_normal((rows, DIMS)) * (0.9 / np.sqrt(DIMS)) * 1.5
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    vaults = rng.integers(0, VAULTS, rows)
    return vectors.astype(np.float32), vaults, centers


def _queries(centers: np.ndarray[Any, Any], count: int, seed: int = 11) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(seed)
    picks = centers[rng.integers(0, CLUSTERS, count)]
    queries = picks + rng.standard_normal((count, DIMS)) * (0.9 / np.sqrt(DIMS)) * 1.5
    return queries / np.linalg.norm(queries, axis=1, keepdims=True)


def _encoder(element: str) -> Any:
    dtype = ">f2" if element == "halfvec" else ">f4"

    def encode(value: Any) -> bytes:
        array = np.asarray(value)
        return struct.pack(">HH", array.shape[0], 0) + array.astype(dtype).tobytes()

    return encode


async def _load(
    url: str, table: str, element: str, vectors: np.ndarray[Any, Any], vaults: np.ndarray[Any, Any]
) -> None:
    conn: Any = await asyncpg.connect(to_plain_url(url))
    try:
        await conn.set_type_codec(
            element, schema="public", encoder=_encoder(element), decoder=bytes, format="binary"
        )
        now = datetime.now(UTC)
        codes = vector_codes(vectors, DIMS)  # the 1-bit codes a writer stores with each vector
        records = [
            (
                f"{i:064x}",
                f"ast_{i}",
                f"aob_{i}",
                f"owner{v}@example.com",
                f"owner{v}@example.com/Library",
                None,
                None,
                "visual",
                MODEL,
                DIMS,
                "image/png",
                "upload",
                now,
                vectors[i],
                asyncpg.BitString.frombytes(int(codes[i], 2).to_bytes(DIMS // 8, "big"), DIMS),
            )
            for i, v in enumerate(vaults.tolist())
        ]
        # Bulk load first, build the HNSW graph once afterwards (much faster than per-row).
        index_sql = await conn.fetchval(
            "SELECT indexdef FROM pg_indexes WHERE indexname = $1", f"{table}_hnsw"
        )
        await conn.execute(f"DROP INDEX {table}_hnsw")
        await conn.copy_records_to_table(table, records=records, columns=WRITABLE_COLUMNS)
        await conn.execute("SET maintenance_work_mem = '2GB'")
        await conn.execute("SET max_parallel_maintenance_workers = 1")
        await conn.execute(index_sql)
        # Steady state: autovacuum would have set the visibility map (index-only counts).
        await conn.execute(f"VACUUM ANALYZE {table}")
    finally:
        await conn.close()


async def _timed_search(
    database: Database,
    table: str,
    query: list[float],
    scopes: list[VaultScope],
    tuning: SearchTuning,
    strategy: str,
    seqscan_only: bool = False,
) -> tuple[float, set[str]]:
    async with database.unit_of_work() as uow:
        index = await VectorIndex.open(uow.session, table)
        if seqscan_only:
            # The baseline: an exact scan reading the whole table (its own SQL text, so no
            # plan it leaves in the statement cache can be reused by the measured queries).
            await uow.session.execute(text("SET LOCAL enable_indexscan = off"))
            await uow.session.execute(text("SET LOCAL enable_bitmapscan = off"))
            start = time.perf_counter()
            rows = await uow.session.execute(
                text(
                    f"SELECT id FROM {table} WHERE vault = ANY(:v) AND model = :m "
                    f"ORDER BY embedding <=> CAST(:q AS halfvec({DIMS})) LIMIT 10"
                ),
                {
                    "v": [s.physical_vault for s in scopes],
                    "m": MODEL,
                    "q": "[" + ",".join(map(repr, query)) + "]",
                },
            )
            found = {r[0] for r in rows}
            return time.perf_counter() - start, found
        start = time.perf_counter()
        hits = await index.search(
            query, scopes, model=MODEL, limit=10, strategy=strategy, tuning=tuning
        )  # type: ignore[arg-type]
        return time.perf_counter() - start, {h.vector_id for h in hits}


async def _measure(
    database: Database,
    table: str,
    queries: np.ndarray[Any, Any],
    scopes: list[VaultScope],
    tuning: SearchTuning,
) -> dict[str, float]:
    times: dict[str, list[float]] = {"seq": [], "exact": [], "scan": [], "ann": [], "auto": []}
    recall: dict[str, list[float]] = {"scan": [], "ann": [], "auto": []}
    for query in queries:
        q = [float(x) for x in query]
        seconds, truth = await _timed_search(
            database, table, q, scopes, tuning, "exact", seqscan_only=True
        )
        times["seq"].append(seconds)
        for strategy in ("exact", "scan", "ann", "auto"):
            seconds, found = await _timed_search(database, table, q, scopes, tuning, strategy)
            times[strategy].append(seconds)
            if strategy in recall:
                recall[strategy].append(len(truth & found) / max(1, len(truth)))
    out = {f"{k}_ms": statistics.median(v) * 1000 for k, v in times.items()}
    out.update({f"{k}_recall": statistics.mean(v) for k, v in recall.items()})
    return out


async def run(rows: int, query_count: int, elements: list[str], ef_search: int) -> None:
    vectors, vaults, centers = _dataset(rows)
    queries = _queries(centers, query_count)
    all_scopes = [
        VaultScope(f"owner{v}@example.com", f"owner{v}@example.com/Library") for v in range(VAULTS)
    ]
    filters = [
        ("all 50 vaults", all_scopes),
        ("25 vaults (50 %)", all_scopes[:25]),
        ("5 vaults (10 %)", all_scopes[:5]),
        ("1 vault (2 %)", all_scopes[7:8]),
    ]
    tuning = SearchTuning(ef_search=ef_search)
    with tempfile.TemporaryDirectory() as tmp:
        postgres = PostgresForTests(Path(tmp) / "pg")
        await postgres.start()
        name = await postgres.clone()
        url = postgres.url(name)
        database = Database(create_engine(url, pool_size=2))
        results = []
        try:
            for element in elements:
                table = f"bench_{element}"
                async with database.unit_of_work() as uow:
                    await create_index(uow.session, table, dimensions=DIMS, element=element)  # type: ignore[arg-type]
                started = time.perf_counter()
                await _load(url, table, element, vectors, vaults)
                load_seconds = time.perf_counter() - started
                async with database.unit_of_work() as uow:
                    table_bytes = await uow.session.scalar(text(f"SELECT pg_table_size('{table}')"))
                    index_bytes = await uow.session.scalar(
                        text(f"SELECT pg_relation_size('{table}_hnsw')")
                    )
                measured = [
                    (label, await _measure(database, table, queries, scopes, tuning))
                    for label, scopes in filters
                ]
                results.append((element, load_seconds, table_bytes, index_bytes, measured))
        finally:
            await database.close()
            await postgres.drop(name)
            postgres.stop()

    print(
        f"{rows:,} vectors x {DIMS} dims, {VAULTS} vaults, {CLUSTERS} clusters, {query_count} queries, ef_search={ef_search}"
    )
    for element, load_seconds, table_bytes, index_bytes, measured in results:
        print(
            f"\n[{element}] load + HNSW build {load_seconds:.0f} s, table {table_bytes / 2**20:.0f} MiB, HNSW index {index_bytes / 2**20:.0f} MiB"
        )
        print(
            f"{'filter':<18}{'seq scan ms':>12}{'b-tree exact':>13}{'bits scan':>10}{'recall':>8}"
            f"{'hnsw ms':>9}{'recall':>8}{'auto ms':>9}{'recall':>8}{'auto speed-up':>15}"
        )
        for label, m in measured:
            print(
                f"{label:<18}{m['seq_ms']:>12.1f}{m['exact_ms']:>13.2f}{m['scan_ms']:>10.2f}"
                f"{m['scan_recall']:>8.3f}{m['ann_ms']:>9.2f}{m['ann_recall']:>8.3f}"
                f"{m['auto_ms']:>9.2f}{m['auto_recall']:>8.3f}{m['seq_ms'] / m['auto_ms']:>14.1f}x"
            )
    print(
        "\nrecall@10 against the exact result; speed-up = median sequential exact scan / median "
        "'auto' query (bits scan when the filter matches <= "
        f"{tuning.scan_max_rows:,} rows, else HNSW iterative scan), same run, same data; "
        "'b-tree exact' scores every matching row (full recall)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--element", choices=["halfvec", "vector", "both"], default="both")
    parser.add_argument("--ef-search", type=int, default=SearchTuning().ef_search)
    args = parser.parse_args()
    elements = ["halfvec", "vector"] if args.element == "both" else [args.element]
    asyncio.run(run(args.rows, args.queries, elements, args.ef_search))


if __name__ == "__main__":
    main()
