"""PostgreSQL killed and started again under a running `memory-server worker` process.

The worker has a batch in flight (the Jina-protocol test server answers slowly) when the
database's postmaster is killed with `kill -9`. The worker keeps running through the outage;
once the database is back, the interrupted jobs and the ones saved afterwards all complete,
exactly once each, no lease is left held, and the worker still stops cleanly on SIGTERM.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, cast

import anyio
import pytest

from memory_db import Database, MemorySettings
from memory_db.database import (
    DEFAULT_DATABASE,
    EmbeddedPostgres,
    create_engine,
    start_embedded,
)
from memory_db.embedding import JinaEmbedder
from memory_db.storage import LocalAssetObjectStore, UrlSigner
from memory_db.testing import copy_data_directory
from memory_db.testing.jina_server import MODEL, JinaTestServer
from memory_tools import MemoryServices
from memory_tools.access import Caller
from memory_tools.ingest.save import AssetSaver, SaveRequest

from .test_database_outage import _postmaster_pid, _restart, _wait_dead
from .test_worker_processes import OWNER, _png, _query, _save_assets, _start, _wait_until

pytestmark = pytest.mark.slow


async def _save_more(
    database: Database, env: dict[str, str], jina: JinaTestServer, seeds: range
) -> None:
    """Save more images for the owner ``_save_assets`` created (as base64, like a client)."""
    settings = MemorySettings(memory_data_dir=Path(env["MEMORY_DATA_DIR"]), asset_ocr="off")
    store = LocalAssetObjectStore(settings.objects_dir, UrlSigner(b"k" * 32), "http://127.0.0.1:9")
    embedder = JinaEmbedder(
        api_keys=["test-key"], base_url=jina.base_url, model=MODEL, dimensions=1024
    )
    services = MemoryServices(database=database, store=store, settings=settings, embedder=embedder)
    saver = AssetSaver(services)
    caller = Caller(OWNER, "akey_x", frozenset({"read", "write"}))
    try:
        for seed in seeds:
            encoded = base64.b64encode(_png(seed)).decode()
            await saver.save(caller, SaveRequest(image_base64=encoded, title=f"image {seed}"))
    finally:
        await embedder.close()


@pytest.fixture
def jina() -> Iterator[JinaTestServer]:
    server = JinaTestServer({"test-key"}, latency=1.5).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def own_postgres(tmp_path: Path, migrated_pgdata: Path) -> AsyncIterator[EmbeddedPostgres]:
    """A PostgreSQL of this test's own (the session's shared one must not be killed).

    Started on a copy of the session's migrated data directory: no initdb, no migrations.
    """
    copy_data_directory(migrated_pgdata, tmp_path / "own-pg")
    server = await start_embedded(tmp_path / "own-pg")
    try:
        yield server
    finally:
        server.stop()


def _completion_failed(line: dict[str, Any]) -> bool:
    # A slot's batch (not the sweep) failed because the database was gone.
    return line.get("event") == "worker_database_unavailable" and "slot" in line


async def _until_logged(
    data_dir: Path, wanted: Callable[[dict[str, Any]], bool], within: float
) -> None:
    """Until a worker's JSON log (``_start`` writes it in the data directory) has a line
    ``wanted`` accepts."""

    def logged() -> bool:
        for log in data_dir.glob("worker-*.log"):
            for text in log.read_text(errors="replace").splitlines():
                try:
                    line = json.loads(text)
                except ValueError:
                    continue  # a line still being written, or not JSON
                if isinstance(line, dict) and wanted(cast(dict[str, Any], line)):
                    return True
        return False

    with anyio.fail_after(within):
        while not logged():
            await anyio.sleep(0.1)


async def test_a_database_restart_under_a_running_worker_loses_nothing(
    tmp_path: Path, own_postgres: EmbeddedPostgres, jina: JinaTestServer
) -> None:
    url = own_postgres.url(DEFAULT_DATABASE)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("ASSET_", "MEMORY_", "JINA_"))}
    env = {
        **base,
        "MEMORY_DATA_DIR": str(tmp_path / "data"),
        "MEMORY_DATABASE_URL": url,
        "MEMORY_LOG_FORMAT": "json",
        "ASSET_EMBED_PROVIDER": "jina",
        "JINA_API_KEYS": "test-key",
        "JINA_BASE_URL": jina.base_url,
    }
    database = Database(create_engine(url, pool_size=2))
    worker = None
    try:
        await _save_assets(database, env, jina, 4)  # 8 jobs
        worker = _start(env, "--batch-size", "32", "--lease-seconds", "4", "--concurrency", "1")
        await _wait_until(
            database,
            "SELECT count(*) FROM mem_asset_embedding_jobs WHERE status = 'running'",
            8,
            60,
        )
        deadline = time.monotonic() + 30
        while not jina.state.seen and time.monotonic() < deadline:
            await anyio.sleep(0.05)
        assert jina.state.seen, "the worker never called the embedder"

        victim = _postmaster_pid(own_postgres.pgdata)
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        _wait_dead(victim)
        # The batch's completion meets the dead database: seen in the worker's log, not assumed
        # after a sleep (the 60 s bound is a hang guard).
        await _until_logged(Path(env["MEMORY_DATA_DIR"]), _completion_failed, 60)
        assert worker.poll() is None, "the worker exited when the database went away"

        await _restart(own_postgres)
        await _save_more(database, env, jina, range(10, 12))  # 4 more jobs, after the restart
        await _wait_until(
            database,
            "SELECT count(*) FROM mem_asset_embedding_jobs WHERE status = 'done'",
            12,
            90,
        )
        assert worker.poll() is None
        held = await _query(
            database, "SELECT count(*) FROM mem_asset_embedding_jobs WHERE lease_owner IS NOT NULL"
        )
        assert held == [(0,)]
        assert (await _query(database, "SELECT count(*) FROM mem_usage_ledger"))[0][0] == 12
        per_asset = await _query(
            database, "SELECT asset_id, count(*) FROM memory_assets_v1 GROUP BY asset_id"
        )
        assert len(per_asset) == 6 and {count for _a, count in per_asset} == {2}
        statuses = await _query(
            database, "SELECT DISTINCT status, embedding_status FROM mem_assets"
        )
        assert statuses == [("ready", "ready")]
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
            worker.wait(timeout=30)
        await database.close()
