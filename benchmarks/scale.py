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

To choose the graph's breadth and build parameters by measurement, ``--ef-search`` takes
several values (``auto``: the default, sized to the table), all measured on the same graph with
the order rotated query by query, and ``--graphs`` several ``m:ef_construction`` pairs, each a
rebuild of the same loaded table (build time and size reported per pair).

Each size is compared with the smallest one of the same run (the ratio columns), so the curve
shows how each figure grows: a graph search grows with log(n), the build with n log(n), disk and
memory with n. Nothing is asserted; the targets of the vector index (recall@10 >= 0.95 and
p95 growing far slower than the library) are printed PASS/FAIL.

Usage: python benchmarks/scale.py [--sizes 10000,100000] [--big] [--quick] [--queries 100]
       [--ef-search auto,250,1000] [--graphs 16:64,24:128]
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
from memory_db.unit_of_work import Database, session_of
from memory_db.vectors import SearchTuning, VectorIndex, create_index
from memory_db.vectors.ddl import HNSW_EF_CONSTRUCTION, HNSW_M, hnsw_index_sql

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


async def _build_graph(url: str, m: int, ef_construction: int) -> float:
    """(Re)build the HNSW graph with these parameters; the seconds the build took."""
    conn: Any = await asyncpg.connect(to_plain_url(url))
    try:
        await conn.execute(f"DROP INDEX IF EXISTS {TABLE}_hnsw")
        await conn.execute("SET maintenance_work_mem = '2GB'")
        await conn.execute("SET max_parallel_maintenance_workers = 1")
        started = time.perf_counter()
        await conn.execute(hnsw_index_sql(TABLE, "halfvec", m=m, ef_construction=ef_construction))
        return time.perf_counter() - started
    finally:
        await conn.close()


async def _search_all(
    database: Database,
    queries: np.ndarray[Any, Any],
    stored: np.ndarray[Any, Any],
    vaults: np.ndarray[Any, Any],
    scopes: list[VaultScope],
    tunings: list[SearchTuning],
) -> dict[int, dict[str, float]]:
    """Every ``ef_search`` on the same graph, alternating query by query (so the machine's noise
    falls on all of them alike): p50/p95 and recall@10 per tuning (by position), unfiltered and
    one vault.
    """
    out: dict[int, dict[str, float]] = {k: {} for k in range(len(tunings))}
    for label, n in (("all", VAULTS), ("one", 1)):
        times: dict[int, list[float]] = {k: [] for k in range(len(tunings))}
        recalls: dict[int, list[float]] = {k: [] for k in range(len(tunings))}
        for number, query in enumerate(queries):
            q = [float(x) for x in query]
            truth = _truth(stored, vaults, query.astype(np.float32), n)
            # Rotated per query: the first search of a query reads its pages into the cache
            # for the others, so no setting is always first.
            shift = number % len(tunings)
            for k in [*range(shift, len(tunings)), *range(shift)]:
                tuning = tunings[k]
                async with database.unit_of_work() as uow:
                    index = await VectorIndex.open(session_of(uow), TABLE)
                    started = time.perf_counter()
                    hits = await index.search(q, scopes[:n], model=MODEL, limit=10, tuning=tuning)
                    times[k].append(time.perf_counter() - started)
                found = {int(h.vector_id, 16) for h in hits}
                recalls[k].append(len(found & truth) / 10)
        for ef, values in times.items():
            out[ef][f"{label}_p50_ms"] = statistics.median(values) * 1000
            out[ef][f"{label}_p95_ms"] = _pct(values, 0.95) * 1000
            out[ef][f"{label}_recall"] = statistics.mean(recalls[ef])
    return out


async def measure(
    rows: int,
    query_count: int,
    tmp: Path,
    tunings: list[SearchTuning],
    graphs: list[tuple[int, int]],
) -> list[dict[str, float]]:
    """Every figure for one size, in a fresh database of a fresh server: one row per graph
    parameters (m, ef_construction) and ``ef_search``, all on the same loaded table."""
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
    results: list[dict[str, float]] = []
    try:
        async with database.unit_of_work() as uow:
            await create_index(session_of(uow), TABLE, dimensions=DIMS, element="halfvec")
        started = time.perf_counter()
        await load_vectors(url, TABLE, "halfvec", vectors, vaults, build_graph=False)
        copy_s = time.perf_counter() - started
        for m, ef_construction in graphs:
            print(f"  graph m={m}, ef_construction={ef_construction} ...", flush=True)
            build_s = await _build_graph(url, m, ef_construction)
            sizes: dict[str, float] = {}
            async with database.unit_of_work() as uow:
                for key, sql in (
                    ("table_bytes", f"SELECT pg_table_size('{TABLE}')"),
                    ("hnsw_bytes", f"SELECT pg_relation_size('{TABLE}_hnsw')"),
                    ("indexes_bytes", f"SELECT pg_indexes_size('{TABLE}')"),
                ):
                    sizes[key] = float(await database_scalar(session_of(uow), sql))
            searched = await _search_all(database, queries, stored, vaults, scopes, tunings)
            pss = float(_postgres_pss(pgdata))
            async with database.unit_of_work() as uow:
                estimate = float(
                    await database_scalar(
                        session_of(uow),
                        f"SELECT reltuples FROM pg_class WHERE oid = '{TABLE}'::regclass",
                    )
                )
            for k, tuning in enumerate(tunings):
                row = {
                    "rows": rows,
                    "m": m,
                    "ef_construction": ef_construction,
                    # Sized to the table (the default): what the search set for this table.
                    "ef_search": tuning.ef_search_for(estimate, m),
                    "ef_auto": float(tuning.ef_search is None),
                    "load_s": copy_s + build_s,
                    "build_s": build_s,
                    "pss_bytes": pss,
                    **sizes,
                    **searched[k],
                }
                results.append(row)
                print("   ", _line(row), flush=True)
    finally:
        await database.close()
        await postgres.drop(name)
        postgres.stop()
    return results


async def database_scalar(session: Any, sql: str) -> Any:
    """One value of a read-only statement."""
    return await session.scalar(text(sql))


HEADER = (
    f"{'vectors':>9}{'m':>4}{'efc':>5}{'ef':>6}{'load s':>8}{'build s':>9}{'table MiB':>10}"
    f"{'hnsw MiB':>9}{'idx MiB':>8}{'pg PSS MiB':>11}{'all p50':>9}{'all p95':>9}{'recall':>8}"
    f"{'1% p50':>8}{'1% p95':>8}{'recall':>8}"
)


def _ef(r: dict[str, float]) -> str:
    """The ef_search of a row; ``a`` marks one sized to the table (the default)."""
    return f"{int(r['ef_search'])}{'a' if r['ef_auto'] else ''}"


def _line(r: dict[str, float]) -> str:
    mib = 2**20
    return (
        f"{int(r['rows']):>9,}{int(r['m']):>4}{int(r['ef_construction']):>5}"
        f"{_ef(r):>6}{r['load_s']:>8.1f}{r['build_s']:>9.1f}"
        f"{r['table_bytes'] / mib:>10.0f}{r['hnsw_bytes'] / mib:>9.0f}"
        f"{r['indexes_bytes'] / mib:>8.0f}{r['pss_bytes'] / mib:>11.0f}"
        f"{r['all_p50_ms']:>9.2f}{r['all_p95_ms']:>9.2f}{r['all_recall']:>8.3f}"
        f"{r['one_p50_ms']:>8.2f}{r['one_p95_ms']:>8.2f}{r['one_recall']:>8.3f}"
    )


def report(results: list[dict[str, float]]) -> bool:
    """The curve, each size against the smallest of the same settings; PASS/FAIL per target."""
    print(HEADER)
    for r in results:
        print(_line(r))

    def settings(r: dict[str, float]) -> tuple[int, int, str]:
        return int(r["m"]), int(r["ef_construction"]), "auto" if r["ef_auto"] else _ef(r)

    smallest = min(r["rows"] for r in results)
    bases = {settings(r): r for r in results if r["rows"] == smallest}
    print(f"\ngrowth against {int(smallest):,} vectors (same run, same settings):")
    print(
        f"{'vectors':>9}{'m':>4}{'efc':>5}{'ef':>6}{'size x':>8}{'build x':>9}{'disk x':>8}"
        f"{'all p95 x':>10}{'1% p95 x':>10}"
    )
    passed = True
    for r in results:
        base = bases[settings(r)]
        size = r["rows"] / base["rows"]
        disk = (r["table_bytes"] + r["indexes_bytes"]) / (
            base["table_bytes"] + base["indexes_bytes"]
        )
        print(
            f"{int(r['rows']):>9,}{int(r['m']):>4}{int(r['ef_construction']):>5}"
            f"{_ef(r):>6}{size:>8.1f}{r['build_s'] / base['build_s']:>9.1f}"
            f"{disk:>8.1f}{r['all_p95_ms'] / base['all_p95_ms']:>10.2f}"
            f"{r['one_p95_ms'] / base['one_p95_ms']:>10.2f}"
        )
    for r in results:
        ok = r["all_recall"] >= TARGET_RECALL and r["one_recall"] >= TARGET_RECALL
        passed = passed and ok
        print(
            f"{'PASS' if ok else 'FAIL'}  recall@10 >= {TARGET_RECALL} at {int(r['rows']):,} "
            f"(m={int(r['m'])}, ef_construction={int(r['ef_construction'])}, "
            f"ef_search={_ef(r)}: unfiltered {r['all_recall']:.3f}, "
            f"one vault {r['one_recall']:.3f})"
        )
    largest = max(r["rows"] for r in results)
    if largest > smallest:
        for r in results:
            if r["rows"] != largest:
                continue
            base = bases[settings(r)]
            size = r["rows"] / base["rows"]
            growth = r["all_p95_ms"] / base["all_p95_ms"]
            ok = growth <= size**0.5
            passed = passed and ok
            print(
                f"{'PASS' if ok else 'FAIL'}  unfiltered p95 grows {growth:.2f}x for {size:.0f}x "
                f"the vectors (m={int(r['m'])}, ef_construction={int(r['ef_construction'])}, "
                f"ef_search={_ef(r)}; target: at most sqrt({size:.0f}) = "
                f"{size**0.5:.1f}x, far below linear)"
            )
    print(
        "load = COPY + graph build; build = the HNSW graph alone (one parallel maintenance "
        "worker); pg PSS = the PostgreSQL processes' memory after the queries; search = "
        "VectorIndex.search, strategy auto, limit 10; recall@10 against numpy's exact top 10; "
        "the ef_search values of one graph alternate query by query; 'a': sized to the table, "
        "the default"
    )
    return passed


async def run(
    sizes: list[int],
    query_count: int,
    tunings: list[SearchTuning],
    graphs: list[tuple[int, int]],
) -> bool:
    print(
        f"ef_search={','.join(str(t.ef_search or 'auto') for t in tunings)}, "
        f"graphs (m:ef_construction)={','.join(f'{m}:{e}' for m, e in graphs)}, "
        f"scan_max_rows={tunings[0].scan_max_rows:,}",
        flush=True,
    )
    print(HEADER, flush=True)
    results: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for rows in sizes:
            print(f"measuring {rows:,} vectors ...", flush=True)
            results.extend(await measure(rows, query_count, Path(tmp), tunings, graphs))
    print()
    return report(results)


def _graph(value: str) -> tuple[int, int]:
    m, _, ef_construction = value.partition(":")
    return int(m), int(ef_construction)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10000,100000", help="vector counts, comma-separated")
    parser.add_argument("--big", action="store_true", help="add 300,000 vectors to the sizes")
    parser.add_argument("--quick", action="store_true", help="2,000 and 10,000 vectors only")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument(
        "--ef-search",
        default="auto",
        help="hnsw.ef_search values, comma-separated, 'auto' for the default (sized to the "
        "table): all measured on the same graph",
    )
    parser.add_argument(
        "--graphs",
        default=f"{HNSW_M}:{HNSW_EF_CONSTRUCTION}",
        help="HNSW build parameters m:ef_construction, comma-separated: each a rebuild of the "
        "same table (default: the production DDL's)",
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    if args.quick:
        sizes = [2_000, 10_000]
    elif args.big and 300_000 not in sizes:
        sizes.append(300_000)
    tunings = [
        SearchTuning() if x == "auto" else SearchTuning(ef_search=int(x))
        for x in args.ef_search.split(",")
    ]
    graphs = [_graph(x) for x in args.graphs.split(",")]
    passed = asyncio.run(run(sorted(sizes), args.queries, tunings, graphs))
    if args.strict and not passed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
