"""The embedding provider goes away (the Jina-protocol server answering 503, then unreachable).

Images saved meanwhile stay retryable however many times the worker tries during the outage (an
outage does not spend their attempts), show why they wait, and become ready when the provider
returns: from the stored preview, without their bytes being uploaded again.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import pytest
from sqlalchemy import text

from memory_db.embedding import JinaEmbedder
from memory_db.testing.jina_server import MODEL, Fault, JinaTestServer
from memory_db.testing.outage import OutageProxy
from memory_tools import MemoryServices
from memory_tools.access import Caller
from memory_tools.ingest.save import AssetSaver, SaveRequest
from memory_tools.jobs.worker import JobWorker, WorkerConfig
from memory_tools.operations import admin
from memory_tools.serving.job_worker import job_worker

from ..pictures import picture

OWNER = "alice@example.com"
FAST = WorkerConfig(batch_size=8, poll_seconds=0.1, retry_base_seconds=0.01, retry_max_seconds=0.02)


@pytest.fixture
def jina() -> Iterator[tuple[JinaTestServer, OutageProxy]]:
    server = JinaTestServer({"test-key"}).start()
    upstream = urlsplit(server.base_url)
    assert upstream.hostname is not None and upstream.port is not None
    proxy = OutageProxy(upstream.hostname, upstream.port).start()
    try:
        yield server, proxy
    finally:
        proxy.cut()
        server.stop()


async def _rows(services: MemoryServices, sql: str) -> list[tuple[Any, ...]]:
    async with services.database.engine.connect() as conn:
        return [tuple(row) for row in await conn.execute(text(sql))]


def _files(root: Path) -> dict[str, float]:
    return {str(path): path.stat().st_mtime for path in root.rglob("*") if path.is_file()}


async def _tries(worker: JobWorker, rounds: int) -> None:
    """Let the worker try every due job ``rounds`` times (the backoff here is milliseconds)."""
    for _ in range(rounds):
        await worker.run_once()
        await anyio.sleep(0.03)


async def test_assets_wait_out_a_provider_outage_and_become_ready(
    saving: MemoryServices, jina: tuple[JinaTestServer, OutageProxy], tmp_path: Path
) -> None:
    server, proxy = jina
    embedder = JinaEmbedder(
        api_keys=["test-key"],
        base_url=proxy.url + "/v1",
        model=MODEL,
        dimensions=1024,
        max_attempts=1,  # the worker's retries are under test, not the client's
        timeout=5.0,
    )
    services = replace(saving, embedder=embedder)
    await admin.create_identity(services.database, OWNER, 10**9)
    caller = Caller(OWNER, "akey_a", frozenset({"read", "write"}))
    try:
        saver = AssetSaver(services)
        assets = [
            (
                await saver.save(
                    caller,
                    SaveRequest(
                        image_base64=base64.b64encode(picture(seed)).decode(), title=f"t {seed}"
                    ),
                )
            ).asset_id
            for seed in range(3)
        ]
        objects = await _rows(services, "SELECT id, storage_key, etag FROM mem_asset_objects")
        stored = _files(tmp_path / "objects")
        worker = job_worker(services, FAST)

        # The provider answers 503 to everything, then nothing listens at its address: far more
        # tries than a job's attempt budget (5).
        server.state.faults.extend(Fault(status=503, code="OVERLOADED") for _ in range(6))
        await _tries(worker, 6)
        assert len(server.state.seen) == 6
        proxy.cut()
        await _tries(worker, 1)  # one: each logs the connection failure with its traceback

        jobs = await _rows(
            services,
            "SELECT DISTINCT status, last_error_code, attempts > 5 FROM mem_asset_embedding_jobs",
        )
        assert jobs == [("retry", "unavailable", True)]  # still retryable, the reason shown
        statuses = await _rows(
            services, "SELECT DISTINCT status, embedding_status, failure_code FROM mem_assets"
        )
        assert len(statuses) == 1 and statuses[0][0] == "processing", statuses
        assert statuses[0][1] != "failed" and statuses[0][2] is None

        # Back: everything becomes ready from the stored previews; nothing was uploaded again.
        proxy.restore()
        await anyio.sleep(0.05)
        await worker.drain()
        ready = await _rows(services, "SELECT DISTINCT status, embedding_status FROM mem_assets")
        assert ready == [("ready", "ready")]
        assert len(await _rows(services, "SELECT id FROM mem_assets")) == len(assets)
        after = await _rows(services, "SELECT id, storage_key, etag FROM mem_asset_objects")
        assert after == objects
        assert _files(tmp_path / "objects") == stored
    finally:
        await embedder.close()
