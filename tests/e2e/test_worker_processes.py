"""Worker processes for real: kill -9 in the middle of a batch, and two workers at once.

The jobs are saved through the library into a real database and a local object store; the
workers are `memory-server worker` subprocesses embedding through the Jina-protocol test server
(which answers slowly, so a batch is in flight when the worker is killed).
"""

from __future__ import annotations

import base64
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
import pyvips
from sqlalchemy import event, text

from memory_db import Database, MemorySettings
from memory_db.embedding import JinaEmbedder
from memory_db.repositories.asset_states import StateSubscription
from memory_db.storage import LocalAssetObjectStore, UrlSigner
from memory_db.testing.jina_server import MODEL, JinaTestServer
from memory_tools import MemoryServices
from memory_tools.access import Caller
from memory_tools.ingest.save import AssetSaver, SaveRequest
from memory_tools.operations import admin
from memory_tools.workflows.assets import AssetView, get_asset_waiting

pytestmark = pytest.mark.slow

WORKER = [sys.executable, "-m", "memory_server", "worker"]
OWNER = "crash@example.com"
# An embedder answer held this long never comes within a test: the request stays in flight.
HELD_SECONDS = 600.0


def _png(seed: int) -> bytes:
    xyz = pyvips.Image.xyz(40, 40)
    red = ((xyz[0] * (seed + 2) + xyz[1]) % 256).cast("uchar")
    green = ((xyz[1] * (seed + 7)) % 256).cast("uchar")
    return red.bandjoin([green, red]).copy(interpretation="srgb").pngsave_buffer()


@pytest.fixture
def jina() -> Iterator[JinaTestServer]:
    server = JinaTestServer({"test-key"}, latency=1.5).start()
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
        ASSET_EMBED_PROVIDER="jina",
        JINA_API_KEYS="test-key",
        JINA_BASE_URL=jina.base_url,
    )
    return base


async def _save_assets(
    database: Database, env: dict[str, str], jina: JinaTestServer, n: int
) -> None:
    settings = MemorySettings(memory_data_dir=Path(env["MEMORY_DATA_DIR"]), asset_ocr="off")
    store = LocalAssetObjectStore(settings.objects_dir, UrlSigner(b"k" * 32), "http://127.0.0.1:9")
    embedder = JinaEmbedder(
        api_keys=["test-key"], base_url=jina.base_url, model=MODEL, dimensions=1024
    )
    services = MemoryServices(database=database, store=store, settings=settings, embedder=embedder)
    await admin.create_identity(database, OWNER, 10**9)
    caller = Caller(OWNER, "akey_x", frozenset({"read", "write"}))
    saver = AssetSaver(services)
    for seed in range(n):
        request = SaveRequest(
            image_base64=base64.b64encode(_png(seed)).decode(), title=f"image {seed}"
        )
        await saver.save(caller, request)
    await embedder.close()


def _start(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    """A worker process; its log goes to a file in the data directory (kept on failure)."""
    log_path = Path(env["MEMORY_DATA_DIR"]) / f"worker-{time.monotonic_ns()}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("w") as log:
        return subprocess.Popen(
            [*WORKER, *args], env=env, stdout=subprocess.DEVNULL, stderr=log, text=True
        )


async def _query(database: Database, sql: str) -> Any:
    async with database.engine.connect() as conn:
        return (await conn.execute(text(sql))).all()


async def _wait_until(database: Database, sql: str, expected: Any, within: float) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if (await _query(database, sql))[0][0] == expected:
            return
        await anyio.sleep(0.2)
    raise AssertionError(f"{sql} did not reach {expected!r} within {within} s")


async def test_a_killed_worker_loses_nothing_and_finishes_exactly_once(
    database: Database, env: dict[str, str], jina: JinaTestServer
) -> None:
    await _save_assets(database, env, jina, 6)  # 12 jobs: visual + fused each
    # The embedder holds its answer far longer than the test lasts, so the batch is certainly
    # in flight when the worker is killed, however slowly this machine runs the test.
    jina.state.latency = HELD_SECONDS
    first = _start(env, "--batch-size", "32", "--lease-seconds", "4", "--concurrency", "1")
    try:
        # Wait until its batch is leased and the embedder call is in flight, then kill -9.
        await _wait_until(
            database,
            "SELECT count(*) FROM mem_asset_embedding_jobs WHERE status = 'running'",
            12,
            60,
        )
        deadline = time.monotonic() + 30
        while not jina.state.seen and time.monotonic() < deadline:
            await anyio.sleep(0.05)
        assert jina.state.seen, "the worker never called the embedder"
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
    finally:
        if first.poll() is None:
            first.kill()
    # Nothing finished: the batch was in flight.
    assert (await _query(database, "SELECT count(*) FROM mem_usage_ledger"))[0][0] == 0
    jina.state.latency = 0.0  # the held answer stays held; the next requests are answered
    second = _start(env, "--batch-size", "32", "--lease-seconds", "4", "--concurrency", "1")
    try:
        await _wait_until(
            database, "SELECT count(*) FROM mem_asset_embedding_jobs WHERE status = 'done'", 12, 90
        )
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=30)
    jobs = await _query(database, "SELECT status, attempts FROM mem_asset_embedding_jobs")
    assert sorted(set(jobs)) == [("done", 2)]  # reclaimed once after the lease expired
    assert (await _query(database, "SELECT count(*) FROM mem_usage_ledger"))[0][0] == 12
    per_asset = await _query(
        database,
        "SELECT asset_id, count(*) FROM memory_assets_v1 GROUP BY asset_id",
    )
    assert len(per_asset) == 6 and {count for _a, count in per_asset} == {2}
    statuses = await _query(database, "SELECT DISTINCT status, embedding_status FROM mem_assets")
    assert statuses == [("ready", "ready")]


async def test_two_worker_processes_share_the_queue_without_overlap(
    database: Database, env: dict[str, str], jina: JinaTestServer
) -> None:
    jina.state.latency = 0.3
    await _save_assets(database, env, jina, 15)  # 30 jobs
    workers = [
        _start(env, "--batch-size", "4", "--concurrency", "2"),
        _start(env, "--batch-size", "4", "--concurrency", "2"),
    ]
    try:
        await _wait_until(
            database, "SELECT count(*) FROM mem_asset_embedding_jobs WHERE status = 'done'", 30, 90
        )
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            assert worker.wait(timeout=30) == 0
    # Every claim increments attempts: all ones means no job was ever claimed twice.
    attempts = await _query(database, "SELECT DISTINCT attempts FROM mem_asset_embedding_jobs")
    assert attempts == [(1,)]
    owners = await _query(
        database, "SELECT count(DISTINCT lease_owner) FROM mem_asset_embedding_jobs"
    )
    assert owners == [(0,)]  # leases released on completion
    assert (await _query(database, "SELECT count(*) FROM mem_usage_ledger"))[0][0] == 30
    assert sum(seen.inputs for seen in jina.state.seen) >= 30


async def test_a_get_waits_for_a_worker_process_without_polling(
    database: Database, env: dict[str, str], jina: JinaTestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker in another process settles the state; its NOTIFY ends this process's wait.

    The asset's row is locked by the test until the wait listens, so the worker (started
    first: its start-up takes seconds) cannot change the state before; each time the wait
    waits is recorded, and how it ended: by a notification, or by its deadline.
    """
    jina.state.latency = 0.2
    await _save_assets(database, env, jina, 1)
    asset_id = (await _query(database, "SELECT id FROM mem_assets"))[0][0]
    settings = MemorySettings(memory_data_dir=Path(env["MEMORY_DATA_DIR"]), asset_ocr="off")
    store = LocalAssetObjectStore(settings.objects_dir, UrlSigner(b"k" * 32), "http://127.0.0.1:9")
    services = MemoryServices(database=database, store=store, settings=settings)
    # A real key: a waiting read checks again that the caller's key is not revoked.
    key = (await admin.create_key(database, OWNER, ["read"])).record
    caller = Caller(OWNER, key.id, frozenset(key.scopes))
    answers: list[AssetView] = []
    statements: list[str] = []
    waits: list[str] = []  # how each wait of the call ended
    listening = anyio.Event()
    changed = StateSubscription.changed

    async def recorded(subscription: StateSubscription) -> None:
        listening.set()
        try:
            await changed(subscription)
        except anyio.get_cancelled_exc_class():
            waits.append("deadline")
            raise
        waits.append("notified")

    monkeypatch.setattr(StateSubscription, "changed", recorded)

    def record(*args: Any) -> None:
        statements.append(str(args[2]))

    async def wait() -> None:
        answers.append(
            await get_asset_waiting(
                caller, services, asset_id=asset_id, include_preview=False, wait_seconds=30
            )
        )

    worker: subprocess.Popen[str] | None = None
    try:
        async with anyio.create_task_group() as group, database.engine.connect() as lock:
            await lock.execute(
                text("SELECT 1 FROM mem_assets WHERE id = :id FOR UPDATE"), {"id": asset_id}
            )
            holder = (await lock.execute(text("SELECT pg_backend_pid()"))).scalar_one()
            worker = _start(env, "--concurrency", "1")
            # Up and working: it waits on the test's lock to change the asset's state.
            await _wait_until(
                database,
                f"SELECT count(*) > 0 FROM pg_stat_activity "
                f"WHERE {int(holder)} = ANY(pg_blocking_pids(pid))",
                True,
                120,
            )
            group.start_soon(wait)
            with anyio.fail_after(30):  # a hang guard: the wait reads once, then listens
                await listening.wait()
            event.listen(database.engine.sync_engine, "before_cursor_execute", record)
            await lock.rollback()  # the worker may go on now
    finally:
        if event.contains(database.engine.sync_engine, "before_cursor_execute", record):
            event.remove(database.engine.sync_engine, "before_cursor_execute", record)
        if worker is not None:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=30)
    assert answers[0].embedding_status == "ready"
    # Every wait ended by a notification, none by the 30 s deadline; this process read the
    # asset once per notification and at no other time (never on a timer).
    assert waits and set(waits) == {"notified"}, waits
    # Each read after a wait begins by checking the caller's key again: one check per read.
    # Nothing else reads the keys table: the saving key's label (savedBy) is joined into the
    # asset's own read, one statement per read.
    checks = [s for s in statements if "FROM mem_api_keys" in s and "revoked_at IS NULL" in s]
    assert len(checks) == len(waits), statements
    assert [s for s in statements if "FROM mem_api_keys" in s] == checks, statements
    asset_reads = [s for s in statements if "JOIN mem_api_keys" in s and "FROM mem_assets" in s]
    assert len(asset_reads) == len(waits), statements
    assert not database.asset_states.listening and database.asset_states.waiters == 0
