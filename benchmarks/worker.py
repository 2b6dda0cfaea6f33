"""Embedding worker throughput: batched, concurrent claims against a one-job-per-request loop.

2,000 assets wait for their visual embedding. The embedder is the Jina-protocol test server on
127.0.0.1 with a fixed latency per request (like a remote API). The baseline is the same worker
code run as a naive loop: claim one job, one embedder request, complete, repeat. Ours claims
batches of 32 jobs, embeds each batch in one request, and keeps 4 batches in flight. Both run
against the same database, store and server in the same run; throughput is jobs per second.

Target: at least 10x the naive loop.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyvips
from sqlalchemy import text

from memory_db import Database, MemorySettings, new_id
from memory_db.database import create_engine
from memory_db.embedding import JinaEmbedder
from memory_db.storage import LocalAssetObjectStore, UrlSigner
from memory_db.testing import PostgresForTests
from memory_db.testing.jina_server import MODEL
from memory_tools import MemoryServices
from memory_tools.access import Caller
from memory_tools.ingest.save import AssetSaver, SaveRequest
from memory_tools.jobs.worker import JobWorker, WorkerConfig
from memory_tools.operations import admin
from memory_tools.serving.job_worker import job_worker

OWNER = "bench@example.com"
_SERVER = """
import time
from memory_db.testing.jina_server import JinaTestServer
server = JinaTestServer({{"bench-key"}}, latency={latency}).start()
print(server.base_url, flush=True)
while True:
    time.sleep(3600)
"""


async def _seed(services: MemoryServices, assets: int) -> None:
    """One real save, then ``assets - 1`` more assets of the same stored image, each with a job."""
    await admin.create_identity(services.database, OWNER, 10**12)
    picture = (
        pyvips.Image.xyz(256, 192)[0].cast("uchar").bandjoin([128, 64]).copy(interpretation="srgb")
    )
    request = SaveRequest(image_base64=base64.b64encode(picture.jpegsave_buffer()).decode())
    first = await AssetSaver(services).save(Caller(OWNER, "akey_b", frozenset({"write"})), request)
    async with services.database.engine.begin() as conn:
        template = (
            await conn.execute(
                text("SELECT vault, object_id FROM mem_assets WHERE id = :a"), {"a": first.asset_id}
            )
        ).one()
        rows = [{"id": new_id("ast"), "job": new_id("aej")} for _ in range(assets - 1)]
        await conn.execute(
            text(
                "INSERT INTO mem_assets (id, owner_identity, vault, object_id, title, source_kind,"
                " created_by, updated_by) VALUES (:id, :owner, :vault, :object, 'bench', 'upload',"
                " :owner, :owner)"
            ),
            [{**r, "owner": OWNER, "vault": template[0], "object": template[1]} for r in rows],
        )
        await conn.execute(
            text(
                "INSERT INTO mem_asset_embedding_jobs (id, asset_id, owner_identity,"
                " representation, model, dimensions) VALUES (:job, :id, :owner, 'visual', :model,"
                " 1024)"
            ),
            [{**r, "owner": OWNER, "model": MODEL} for r in rows],
        )


async def _reset(database: Database) -> None:
    async with database.engine.begin() as conn:
        await conn.execute(
            text(
                "UPDATE mem_asset_embedding_jobs SET status = 'queued', attempts = 0,"
                " run_after = now(), lease_owner = NULL, lease_until = NULL, completed_at = NULL"
            )
        )
        await conn.execute(
            text("UPDATE mem_assets SET status = 'processing', embedding_status = 'pending'")
        )
        await conn.execute(text("TRUNCATE mem_usage_ledger"))
        await conn.execute(text("TRUNCATE memory_assets_v1"))


async def _timed(worker: JobWorker, slots: int, limit: int | None) -> tuple[int, float]:
    start = time.perf_counter()
    if slots == 1:
        done = await worker.drain(limit=limit)
    else:
        counts = await asyncio.gather(*(worker.drain() for _ in range(slots)))
        done = sum(counts)
    return done, time.perf_counter() - start


async def run(assets: int, latency: float, naive_jobs: int, base_url: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        postgres = PostgresForTests(Path(tmp) / "pg")
        await postgres.start()
        database = Database(create_engine(postgres.url(await postgres.clone()), pool_size=8))
        embedder = JinaEmbedder(
            api_keys=["bench-key"], base_url=base_url, model=MODEL, dimensions=1024
        )
        settings = MemorySettings(memory_data_dir=Path(tmp) / "data", asset_ocr="off")
        store = LocalAssetObjectStore(
            settings.objects_dir, UrlSigner(b"b" * 32), "http://127.0.0.1:9"
        )
        services = MemoryServices(
            database=database, store=store, settings=settings, embedder=embedder
        )
        try:
            await _seed(services, assets)
            # Every asset here shares one stored image: with vector reuse the worker would copy
            # its vector instead of asking the provider, and this measures the provider path.
            naive = job_worker(
                services,
                WorkerConfig(batch_size=1, concurrency=1),
                name="naive",
                reuse_vectors=False,
            )
            await naive.drain(limit=0)  # create the vector index outside the timing
            await _reset(database)
            naive_done, naive_seconds = await _timed(naive, 1, naive_jobs)
            await _reset(database)
            batched = job_worker(
                services,
                WorkerConfig(batch_size=32, concurrency=4),
                name="ours",
                reuse_vectors=False,
            )
            ours_done, ours_seconds = await _timed(batched, 4, None)
            async with database.engine.connect() as conn:
                finished = (
                    await conn.execute(
                        text("SELECT count(*) FROM mem_asset_embedding_jobs WHERE status = 'done'")
                    )
                ).scalar_one()
        finally:
            await embedder.close()
            await database.close()
            postgres.stop()
    naive_rate = naive_done / naive_seconds
    ours_rate = ours_done / ours_seconds
    print(f"{assets} assets, embedder latency {latency * 1000:.0f} ms per request")
    print(
        f"{'naive loop (1 job/request)':<34}{naive_done:>6} jobs {naive_seconds:>8.1f} s {naive_rate:>8.1f} jobs/s"
    )
    print(
        f"{'ours (batches of 32, 4 in flight)':<34}{ours_done:>6} jobs {ours_seconds:>8.1f} s {ours_rate:>8.1f} jobs/s"
    )
    print(
        f"speed-up: {ours_rate / naive_rate:.1f}x (target >= 10x); all {finished} jobs done: {finished == assets}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--assets", type=int, default=2000)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per embedder request")
    parser.add_argument(
        "--naive-jobs", type=int, default=400, help="jobs the (slow) naive loop is timed on"
    )
    args = parser.parse_args()
    # The provider runs in its own process, as a remote API would: its CPU is not ours.
    provider = subprocess.Popen(
        [sys.executable, "-c", _SERVER.format(latency=args.latency)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert provider.stdout is not None
        base_url = provider.stdout.readline().strip()
        asyncio.run(run(args.assets, args.latency, args.naive_jobs, base_url))
    finally:
        provider.terminate()
        provider.wait(timeout=10)


if __name__ == "__main__":
    main()
