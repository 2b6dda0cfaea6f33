"""Provider cost: what reaches the embedding provider for saves and searches, before and after reuse.

200 saves (half with titles, 20 % re-saves of identical bytes) and 100 text searches (30 %
repeats of an earlier query) against the Jina-protocol test server on 127.0.0.1, twice in the
same run on fresh databases: "before" with reuse switched off (the worker's benchmark-only
``reuse_vectors=False``: every job sends its own inputs, images included; the query cache at
size 0), "after" with the defaults. Counted at the server: requests, image inputs and text
inputs (a native fused group counts as both); tokens are the provider's reported usage as
recorded in the usage ledger.

Targets (after): image inputs per unique image <= 1.0; 0 image tokens charged to a
deduplicated save; repeated queries within the TTL make no provider request.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import random
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pyvips
from sqlalchemy import text

from memory_db import Database, MemorySettings
from memory_db.database import create_engine
from memory_db.embedding import JinaEmbedder
from memory_db.storage import LocalAssetObjectStore, UrlSigner
from memory_db.testing import PostgresForTests
from memory_db.testing.jina_server import MODEL, JinaTestServer
from memory_tools import MemoryServices
from memory_tools.access import Caller
from memory_tools.ingest.save import AssetSaver, SaveRequest
from memory_tools.jobs.worker import WorkerConfig
from memory_tools.operations import admin
from memory_tools.serving.job_worker import job_worker
from memory_tools.workflows.search import AssetSearcher, SearchRequest

OWNER = "bench@example.com"
CALLER = Caller(OWNER, "akey_b", frozenset({"read", "write"}))
WORDS = [
    "red",
    "blue",
    "green",
    "harbour",
    "boat",
    "hill",
    "lake",
    "bridge",
    "stone",
    "field",
    "dawn",
    "dusk",
    "city",
    "road",
    "tree",
]


def _picture(seed: int) -> bytes:
    """A distinct small PNG per seed."""
    xyz = pyvips.Image.xyz(64, 48)
    red = ((xyz[0] * (seed + 3) + xyz[1]) % 256).cast("uchar")
    green = ((xyz[1] * (seed + 5)) % 256).cast("uchar")
    blue = ((xyz[0] + seed * 17) % 256).cast("uchar")
    return red.bandjoin([green, blue]).copy(interpretation="srgb").pngsave_buffer()


@dataclass(frozen=True)
class Workload:
    """The same saves and searches for both runs."""

    saves: list[tuple[int, str | None, bool]]  # (image seed, title, re-save of earlier bytes)
    queries: list[tuple[str, bool]]  # (text, repeat of an earlier query)

    @classmethod
    def make(cls, saves: int, searches: int, rng: random.Random) -> Workload:
        plan: list[tuple[int, str | None, bool]] = []
        seen: list[int] = []
        for index in range(saves):
            title = " ".join(rng.sample(WORDS, 3)) if index % 2 == 0 else None
            if seen and index % 5 == 4:  # every fifth save: identical bytes again
                plan.append((rng.choice(seen), title, True))
            else:
                plan.append((index, title, False))
                seen.append(index)
        queries: list[tuple[str, bool]] = []
        asked: list[str] = []
        for index in range(searches):
            if asked and index % 10 in (3, 6, 9):  # 30 %: an earlier query again
                queries.append((rng.choice(asked), True))
            else:
                query = f"{' '.join(rng.sample(WORDS, 2))} {index}"
                queries.append((query, False))
                asked.append(query)
        return cls(plan, queries)


@dataclass
class Cost:
    """What one run sent."""

    requests: int = 0
    images: int = 0
    texts: int = 0
    tokens: int = 0
    image_tokens: int = 0
    dedup_image_tokens: int = 0
    repeated_requests: int = 0


def _count(server: JinaTestServer, since: int, cost: Cost) -> None:
    for seen in server.state.seen[since:]:
        cost.requests += 1
        cost.images += sum(kind in ("image", "content") for kind in seen.kinds)
        cost.texts += sum(kind in ("text", "content") for kind in seen.kinds)


async def _run(
    postgres: PostgresForTests, server: JinaTestServer, work: Workload, tmp: Path, *, reuse: bool
) -> tuple[Cost, Cost]:
    database = Database(create_engine(postgres.url(await postgres.clone()), pool_size=4))
    embedder = JinaEmbedder(
        api_keys=["bench-key"], base_url=server.base_url, model=MODEL, dimensions=1024
    )
    data = tmp / ("after" if reuse else "before")
    settings = MemorySettings(memory_data_dir=data, asset_query_cache_size=512 if reuse else 0)
    store = LocalAssetObjectStore(settings.objects_dir, UrlSigner(b"b" * 32), "http://127.0.0.1:9")
    services = MemoryServices(database=database, store=store, settings=settings, embedder=embedder)
    saving, searching = Cost(), Cost()
    try:
        await admin.create_identity(database, OWNER, 10**12)
        saver = AssetSaver(services)
        worker = job_worker(services, WorkerConfig(batch_size=16), reuse_vectors=reuse)
        dedup_assets: list[str] = []
        mark = len(server.state.seen)
        for index, (seed, title, again) in enumerate(work.saves):
            request = SaveRequest(
                image_base64=base64.b64encode(_picture(seed)).decode(), title=title
            )
            saved = await saver.save(CALLER, request)
            if again:
                assert saved.deduplicated
                dedup_assets.append(saved.asset_id)
            if index % 20 == 19:  # the worker keeps up in batches, as in production
                await worker.drain()
        await worker.drain()
        _count(server, mark, saving)
        async with database.engine.connect() as conn:
            row = (
                await conn.execute(
                    text(
                        "SELECT coalesce(sum(total_tokens), 0), coalesce(sum(image_tokens), 0), "
                        "coalesce(sum(image_tokens) FILTER (WHERE asset_id = ANY(:dedup)), 0) "
                        "FROM mem_usage_ledger WHERE source = 'embed_image_document'"
                    ),
                    {"dedup": dedup_assets},
                )
            ).one()
            saving.tokens, saving.image_tokens, saving.dedup_image_tokens = map(int, row)
            ready = (
                await conn.execute(text("SELECT count(*) FROM mem_assets WHERE status = 'ready'"))
            ).scalar_one()
        assert ready == len(work.saves), f"{ready} of {len(work.saves)} assets ready"

        searcher = AssetSearcher(services)
        mark = len(server.state.seen)
        for query, repeated in work.queries:
            before = len(server.state.seen)
            await searcher.search(CALLER, SearchRequest(query=query))
            if repeated:
                searching.repeated_requests += len(server.state.seen) - before
        _count(server, mark, searching)
        async with database.engine.connect() as conn:
            searching.tokens = int(
                (
                    await conn.execute(
                        text(
                            "SELECT coalesce(sum(total_tokens), 0) FROM mem_usage_ledger "
                            "WHERE source = 'embed_image_query'"
                        )
                    )
                ).scalar_one()
            )
    finally:
        await services.embedders.close()
        await embedder.close()
        await database.close()
    return saving, searching


def _table(rows: list[tuple[str, Cost, Cost]]) -> None:
    print(f"{'':<34}{'before':>10}{'after':>10}{'after/before':>14}")
    for label, before, after in rows:
        for name in ("requests", "images", "texts", "tokens"):
            was, now = getattr(before, name), getattr(after, name)
            ratio = f"{now / was:.2f}" if was else "-"
            print(f"{label + ' ' + name:<34}{was:>10}{now:>10}{ratio:>14}")


async def run(saves: int, searches: int, seed: int) -> bool:
    work = Workload.make(saves, searches, random.Random(seed))
    unique = len({image for image, _title, _again in work.saves})
    resaves = sum(again for _image, _title, again in work.saves)
    titled = sum(title is not None for _image, title, _again in work.saves)
    repeats = sum(repeated for _query, repeated in work.queries)
    server = JinaTestServer({"bench-key"}).start()
    with tempfile.TemporaryDirectory() as tmp:
        postgres = PostgresForTests(Path(tmp) / "pg")
        await postgres.start()
        try:
            saved_before, searched_before = await _run(
                postgres, server, work, Path(tmp), reuse=False
            )
            saved_after, searched_after = await _run(postgres, server, work, Path(tmp), reuse=True)
        finally:
            postgres.stop()
            server.stop()
    print(
        f"{len(work.saves)} saves ({titled} with titles, {resaves} re-saves of identical bytes, "
        f"{unique} unique images), {len(work.queries)} text searches ({repeats} repeated)"
    )
    _table([("saves:", saved_before, saved_after), ("searches:", searched_before, searched_after)])
    per_image = saved_after.images / unique
    checks = [
        (
            f"image inputs per unique image {per_image:.2f} (before "
            f"{saved_before.images / unique:.2f}) <= 1.0",
            per_image <= 1.0,
        ),
        (
            f"image tokens charged to deduplicated saves {saved_after.dedup_image_tokens} "
            f"(before {saved_before.dedup_image_tokens}) == 0",
            saved_after.dedup_image_tokens == 0,
        ),
        (
            f"provider requests for {repeats} repeated queries within the TTL "
            f"{searched_after.repeated_requests} (before {searched_before.repeated_requests}) == 0",
            searched_after.repeated_requests == 0,
        ),
    ]
    for label, ok in checks:
        print(f"{'PASS' if ok else 'FAIL'}: {label}")
    return all(ok for _label, ok in checks)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--saves", type=int, default=200)
    parser.add_argument("--searches", type=int, default=100)
    parser.add_argument("--seed", type=int, default=22, help="seed of the workload's choices")
    args = parser.parse_args()
    return 0 if asyncio.run(run(args.saves, args.searches, args.seed)) else 1


if __name__ == "__main__":
    raise SystemExit(main())
