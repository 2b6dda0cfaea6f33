"""``image_asset_search`` end to end against the bare vector query, in one run, at two sizes.

For each size (10,000 and 100,000 assets by default) it writes asset and object rows and two
vectors per asset straight into PostgreSQL (``bulk_library.load_library``: COPY, then one HNSW
build): the fused vector is the local embedder's embedding of the asset's title and
description, the visual one a clustered synthetic vector. Titles are drawn from a small
vocabulary so the full-text list has work too.

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
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from bulk_library import WORDS, library_target, load_library

from memory_db import MemorySettings
from memory_db.database import create_engine
from memory_db.embedding import LocalEmbedder, TextInput
from memory_db.logs import configure_logging
from memory_db.runtime import prepare_vector_index
from memory_db.storage import LocalAssetObjectStore, UrlSigner
from memory_db.testing import PostgresForTests
from memory_db.unit_of_work import Database
from memory_db.vectors import VectorIndex
from memory_tools import MemoryServices, admin
from memory_tools.access import authenticate
from memory_tools.search import AssetSearcher, SearchRequest

OWNER = "bench@example.com"


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


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
        index_name, namespace = await library_target(database, services.vector_alias, OWNER)
        started = time.perf_counter()
        await load_library(url, index_name, namespace, size, embedder, owner=OWNER)
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
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
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
