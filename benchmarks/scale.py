"""The scale curve: search latency, recall, index build time, memory and disk by library size.

For each size (10,000, 100,000 and, with ``--big``, 300,000 vectors by default) a fresh
embedded PostgreSQL database gets a versioned vector table (``halfvec(1024)``, the production
DDL: HNSW m = 16, ef_construction = 64, the scope B-trees) filled with the same synthetic
clustered unit vectors as ``vector_search.py`` (100 vaults, vault independent of cluster):

- load: ``COPY`` of the rows without the HNSW graph, then the graph built once (timed apart);
- disk: the table (with its TOAST), the HNSW graph and the other indexes, from PostgreSQL
  (``pg_table_size``, ``pg_relation_size``, ``pg_indexes_size``);
- memory: the proportional set size (PSS, shared pages counted once) of the PostgreSQL
  processes after the queries, and the HNSW graph's size, which is what has to stay in memory
  (shared buffers or the page cache) for searches to stay fast;
- search: ``VectorIndex.search`` with the default strategy ``auto`` and tuning, unfiltered and
  filtered to one vault (1 % of the rows), p50/p95 over ``--queries`` queries, and recall@10
  against an exact top 10 computed with numpy from the same half-precision vectors.

Each size is compared with the smallest one of the same run (the ratio columns), so the curve
shows how each figure grows: a graph search grows with log(n), the build with n log(n), disk and
memory with n. Nothing is asserted; the targets of the vector index (recall@10 >= 0.95 and
p95 growing far slower than the library) are printed PASS/FAIL.

Usage: python benchmarks/scale.py [--sizes 10000,100000] [--big] [--quick] [--queries 100]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
import psutil
from sqlalchemy import text
from vector_search import DIMS, MODEL, VAULTS, load_vectors, make_dataset, make_queries

from memory_db.database import create_engine, to_plain_url
from memory_db.repositories import VaultScope
from memory_db.testing import PostgresForTests
from memory_db.unit_of_work import Database
from memory_db.vectors import SearchTuning, VectorIndex, create_index

TABLE = "scale_halfvec"
TARGET_RECALL = 0.95


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def _postgres_pss(pgdata: Path) -> int:
    """PSS of every process of the server whose data directory is ``pgdata`` (bytes)."""
    pid = int((pgdata / "postmaster.pid").read_text().split()[0])
    root = psutil.Process(pid)
    total = 0
    for process in [root, *root.children(recursive=True)]:
        with_pss = process.memory_full_info()
        total += int(getattr(with_pss, "pss", with_pss.rss))
    return total


def _truth(
    vectors: np.ndarray[Any, Any], vaults: np.ndarray[Any, Any], query: np.ndarray[Any, Any], n: int
) -> set[int]:
    """Exact top 10 by cosine over the rows of the first ``n`` vaults (row numbers)."""
    rows = np.flatnonzero(vaults < n)
    scores = vectors[rows] @ query
    best = rows[np.argsort(-scores, kind="stable")[:10]]
    return {int(i) for i in best}


async def _load_timed(
    url: str, vectors: np.ndarray[Any, Any], vaults: np.ndarray[Any, Any]
) -> tuple[float, float]:
    """``load_vectors`` (COPY, then the graph), timing the graph build apart from the whole load."""
    started = time.perf_counter()
    await load_vectors(url, TABLE, "halfvec", vectors, vaults)
    total = time.perf_counter() - started
    # Re-build the graph alone, the same statement, to time it without the COPY.
    conn: Any = await asyncpg.connect(to_plain_url(url))
    try:
        index_sql = await conn.fetchval(
            "SELECT indexdef FROM pg_indexes WHERE indexname = $1", f"{TABLE}_hnsw"
        )
        await conn.execute(f"DROP INDEX {TABLE}_hnsw")
        await conn.execute("SET maintenance_work_mem = '2GB'")
        await conn.execute("SET max_parallel_maintenance_workers = 1")
        started = time.perf_counter()
        await conn.execute(index_sql)
        build = time.perf_counter() - started
    finally:
        await conn.close()
    return total, build


async def measure(rows: int, query_count: int, tmp: Path, tuning: SearchTuning) -> dict[str, float]:
    """Every figure for one size, in a fresh database of a fresh server."""
    vectors, vaults, centers = make_dataset(rows)
    queries = make_queries(centers, query_count)
    # The truth from the values PostgreSQL holds (half precision), renormalised like cosine.
    stored = vectors.astype(np.float16).astype(np.float32)
    stored /= np.linalg.norm(stored, axis=1, keepdims=True)
    scopes = [
        VaultScope(f"owner{v}@example.com", f"owner{v}@example.com/Library") for v in range(VAULTS)
    ]
    pgdata = tmp / f"pg{rows}"
    postgres = PostgresForTests(pgdata)
    await postgres.start()
    name = await postgres.clone()
    url = postgres.url(name)
    database = Database(create_engine(url, pool_size=2))
    out: dict[str, float] = {"rows": rows}
    try:
        async with database.unit_of_work() as uow:
            await create_index(uow.session, TABLE, dimensions=DIMS, element="halfvec")
        out["load_s"], out["build_s"] = await _load_timed(url, vectors, vaults)
        async with database.unit_of_work() as uow:
            for key, sql in (
                ("table_bytes", f"SELECT pg_table_size('{TABLE}')"),
                ("hnsw_bytes", f"SELECT pg_relation_size('{TABLE}_hnsw')"),
                ("indexes_bytes", f"SELECT pg_indexes_size('{TABLE}')"),
            ):
                out[key] = float(await database_scalar(uow.session, sql))
        for label, n in (("all", VAULTS), ("one", 1)):
            times: list[float] = []
            recalls: list[float] = []
            for query in queries:
                q = [float(x) for x in query]
                async with database.unit_of_work() as uow:
                    index = await VectorIndex.open(uow.session, TABLE)
                    started = time.perf_counter()
                    hits = await index.search(q, scopes[:n], model=MODEL, limit=10, tuning=tuning)
                    times.append(time.perf_counter() - started)
                found = {int(h.vector_id, 16) for h in hits}
                truth = _truth(stored, vaults, query.astype(np.float32), n)
                recalls.append(len(found & truth) / 10)
            out[f"{label}_p50_ms"] = statistics.median(times) * 1000
            out[f"{label}_p95_ms"] = _pct(times, 0.95) * 1000
            out[f"{label}_recall"] = statistics.mean(recalls)
        out["pss_bytes"] = float(_postgres_pss(pgdata))
    finally:
        await database.close()
        await postgres.drop(name)
        postgres.stop()
    return out


async def database_scalar(session: Any, sql: str) -> Any:
    """One value of a read-only statement."""
    return await session.scalar(text(sql))


def report(results: list[dict[str, float]]) -> bool:
    """The curve, each size against the smallest; PASS/FAIL per target."""
    mib = 2**20
    print(
        f"{'vectors':>9}{'load s':>8}{'build s':>9}{'table MiB':>10}{'hnsw MiB':>9}"
        f"{'idx MiB':>8}{'pg PSS MiB':>11}{'all p50':>9}{'all p95':>9}{'recall':>8}"
        f"{'1% p50':>8}{'1% p95':>8}{'recall':>8}"
    )
    for r in results:
        print(
            f"{int(r['rows']):>9,}{r['load_s']:>8.1f}{r['build_s']:>9.1f}"
            f"{r['table_bytes'] / mib:>10.0f}{r['hnsw_bytes'] / mib:>9.0f}"
            f"{r['indexes_bytes'] / mib:>8.0f}{r['pss_bytes'] / mib:>11.0f}"
            f"{r['all_p50_ms']:>9.2f}{r['all_p95_ms']:>9.2f}{r['all_recall']:>8.3f}"
            f"{r['one_p50_ms']:>8.2f}{r['one_p95_ms']:>8.2f}{r['one_recall']:>8.3f}"
        )
    base = results[0]
    print(f"\ngrowth against {int(base['rows']):,} vectors (same run):")
    print(
        f"{'vectors':>9}{'size x':>8}{'build x':>9}{'disk x':>8}{'all p95 x':>10}{'1% p95 x':>10}"
    )
    passed = True
    for r in results:
        size = r["rows"] / base["rows"]
        disk = (r["table_bytes"] + r["indexes_bytes"]) / (
            base["table_bytes"] + base["indexes_bytes"]
        )
        print(
            f"{int(r['rows']):>9,}{size:>8.1f}{r['build_s'] / base['build_s']:>9.1f}"
            f"{disk:>8.1f}{r['all_p95_ms'] / base['all_p95_ms']:>10.2f}"
            f"{r['one_p95_ms'] / base['one_p95_ms']:>10.2f}"
        )
    for r in results:
        ok = r["all_recall"] >= TARGET_RECALL and r["one_recall"] >= TARGET_RECALL
        passed = passed and ok
        print(
            f"{'PASS' if ok else 'FAIL'}  recall@10 >= {TARGET_RECALL} at {int(r['rows']):,} "
            f"(unfiltered {r['all_recall']:.3f}, one vault {r['one_recall']:.3f})"
        )
    if len(results) > 1:
        last = results[-1]
        size = last["rows"] / base["rows"]
        growth = last["all_p95_ms"] / base["all_p95_ms"]
        ok = growth <= size**0.5
        passed = passed and ok
        print(
            f"{'PASS' if ok else 'FAIL'}  unfiltered p95 grows {growth:.2f}x for {size:.0f}x the "
            f"vectors (target: at most sqrt({size:.0f}) = {size**0.5:.1f}x, far below linear)"
        )
    print(
        "load = COPY + graph build; build = the HNSW graph alone (one parallel maintenance "
        "worker); pg PSS = the PostgreSQL processes' memory after the queries; search = "
        "VectorIndex.search, strategy auto, limit 10; recall@10 against numpy's exact top 10"
    )
    return passed


async def run(sizes: list[int], query_count: int, tuning: SearchTuning) -> bool:
    print(f"ef_search={tuning.ef_search}, scan_max_rows={tuning.scan_max_rows:,}", flush=True)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for rows in sizes:
            print(f"measuring {rows:,} vectors ...", flush=True)
            results.append(await measure(rows, query_count, Path(tmp), tuning))
    return report(results)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10000,100000", help="vector counts, comma-separated")
    parser.add_argument("--big", action="store_true", help="add 300,000 vectors to the sizes")
    parser.add_argument("--quick", action="store_true", help="2,000 and 10,000 vectors only")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--ef-search", type=int, default=SearchTuning().ef_search)
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    if args.quick:
        sizes = [2_000, 10_000]
    elif args.big and 300_000 not in sizes:
        sizes.append(300_000)
    tuning = SearchTuning(ef_search=args.ef_search)
    passed = asyncio.run(run(sorted(sizes), args.queries, tuning))
    if args.strict and not passed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
