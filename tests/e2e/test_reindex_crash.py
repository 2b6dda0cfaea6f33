"""``memory-server reindex`` for real: kill -9 half-way, run again, it resumes.

Images are saved and embedded through the library (local embedder) into a real database and a
local object store; the rebuild to the Jina client (128-d, against the Jina-protocol test
server, which answers slowly so batches are in flight) runs as a subprocess and is killed once
it has committed some batches. The second run continues from the committed cursor: it embeds
only what the first did not commit, and no vector is duplicated.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from sqlalchemy import text

from memory_db import Database, MemorySettings
from memory_db.embedding import LocalEmbedder
from memory_db.storage import LocalAssetObjectStore, UrlSigner
from memory_db.testing.jina_server import JinaTestServer
from memory_tools import MemoryServices
from memory_tools.access import Caller
from memory_tools.ingest.save import AssetSaver, SaveRequest
from memory_tools.operations import admin
from memory_tools.serving.job_worker import job_worker

from .test_worker_processes import _png  # pyright: ignore[reportPrivateUsage]

pytestmark = pytest.mark.slow

REINDEX = [sys.executable, "-m", "memory_server", "reindex"]
OWNER = "rebuild@example.com"
ASSETS = 10


@pytest.fixture
def jina() -> Iterator[JinaTestServer]:
    server = JinaTestServer({"test-key"}, latency=0.6).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def env(tmp_path: Path, database_url: str, jina: JinaTestServer) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("ASSET_", "MEMORY_", "JINA_"))}
    base.update(
        MEMORY_DATA_DIR=str(tmp_path / "data"),
        MEMORY_DATABASE_URL=database_url,
        MEMORY_LOG_FORMAT="json",
        JINA_API_KEYS="test-key",
        JINA_BASE_URL=jina.base_url,
    )
    return base


async def _library(database: Database, env: dict[str, str]) -> None:
    """Ten images saved and embedded with the local embedder (the active index)."""
    settings = MemorySettings(memory_data_dir=Path(env["MEMORY_DATA_DIR"]))
    store = LocalAssetObjectStore(settings.objects_dir, UrlSigner(b"k" * 32), "http://127.0.0.1:9")
    services = MemoryServices(
        database=database, store=store, settings=settings, embedder=LocalEmbedder()
    )
    await admin.create_identity(database, OWNER, 10**9)
    caller = Caller(OWNER, "akey_x", frozenset({"read", "write"}))
    for seed in range(ASSETS):
        request = SaveRequest(
            image_base64=base64.b64encode(_png(seed)).decode(), title=f"image {seed}"
        )
        await AssetSaver(services).save(caller, request)
    await job_worker(services).drain()


async def _one(database: Database, sql: str) -> Any:
    async with database.engine.connect() as conn:
        return (await conn.execute(text(sql))).one_or_none()


def _start(env: dict[str, str], args: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    with log_path.open("w") as log:
        return subprocess.Popen([*REINDEX, *args], env=env, stdout=log, stderr=log)


def _passages(jina: JinaTestServer) -> int:
    with jina.state.lock:
        return sum(s.inputs for s in jina.state.seen if s.task == "retrieval.passage")


async def test_a_killed_reindex_resumes_where_it_stopped(
    database: Database, env: dict[str, str], jina: JinaTestServer, tmp_path: Path
) -> None:
    await _library(database, env)
    args = ["--to", "assets_v2", "--provider", "jina", "--dim", "128", "--batch-size", "2"]
    log_path = tmp_path / "reindex.log"
    first = _start(env, args, log_path)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            row = await _one(database, "SELECT embedded FROM mem_vector_rebuilds")
            if row is not None and row[0] >= 4:  # two batches committed
                break
            await anyio.sleep(0.05)
        else:
            raise AssertionError(f"no batch committed: {log_path.read_text()[-2000:]}")
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
    finally:
        if first.poll() is None:
            first.kill()
    state = await _one(database, "SELECT state, cursor, embedded FROM mem_vector_rebuilds")
    assert state is not None
    assert state[0] == "filling" and state[1] not in (None, "~") and state[2] < ASSETS
    committed = int(state[2])
    sent = _passages(jina)
    second = subprocess.run(
        [*REINDEX, *args, "--json"], env=env, capture_output=True, text=True, timeout=120
    )
    assert second.returncode == 0, second.stderr[-2000:]
    report = json.loads(second.stdout)
    assert report["resumed"] is True and report["switched"] is True
    assert report["index"] == "assets_v2" and report["assets"] == ASSETS
    # Only what the first run had not committed was embedded again (two inputs per image: the
    # image once, its fused vector combined from it and its text), and no vector exists twice.
    assert _passages(jina) - sent == 2 * (ASSETS - committed)
    counts = await _one(
        database,
        "SELECT count(*), count(DISTINCT (asset_id, representation)) FROM assets_v2",
    )
    assert counts is not None and tuple(counts) == (2 * ASSETS, 2 * ASSETS)
    alias = await _one(database, "SELECT index_name FROM mem_vector_index_aliases")
    assert alias is not None and alias[0] == "assets_v2"
