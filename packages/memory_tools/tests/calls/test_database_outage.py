"""A database outage as the tools and the worker see it.

Tools answer the retryable `unavailable` code. The worker keeps running, and a batch the outage
cut short is handed back as soon as the database answers, not when its lease would expire. The
embedded server here is this test's own: it gets killed.
"""

from __future__ import annotations

import base64
import contextlib
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import anyio
import psutil
import pytest
from fastmcp import Client
from sqlalchemy import text
from structlog.testing import capture_logs

from memory_db import Database, DatabaseUnavailable, MemorySettings, open_database
from memory_db.database import EmbeddedPostgres, create_engine
from memory_db.embedding import EmbedResult, EmbedValue, ScriptedEmbedder, Task
from memory_db.storage import InMemoryAssetObjectStore, LocalAssetObjectStore, UrlSigner
from memory_db.unit_of_work import session_of
from memory_tools import CODES, MemoryServices, build_memory_server
from memory_tools.access import Caller
from memory_tools.ingest.save import AssetSaver, SaveRequest
from memory_tools.jobs.worker import WorkerConfig
from memory_tools.mcp import INSTRUCTIONS
from memory_tools.operations import admin
from memory_tools.serving.job_worker import job_worker

from ..job_listener import until_a_worker_listens
from ..pictures import picture

DOCS = Path(__file__).resolve().parents[4] / "docs" / "tools.md"
FAST = WorkerConfig(batch_size=8, lease_seconds=60, heartbeat_seconds=20, poll_seconds=0.2)


def test_unavailable_is_a_documented_code() -> None:
    assert "unavailable" in CODES
    assert "unavailable" in INSTRUCTIONS
    assert "| `unavailable` |" in DOCS.read_text(encoding="utf-8")


async def test_tools_answer_unavailable_while_the_database_is_down(
    tmp_path: Path, settings: MemorySettings
) -> None:
    # No server listens in this socket directory: every connection is refused.
    database = Database(create_engine(f"postgresql+asyncpg://postgres@/memory?host={tmp_path}"))
    services = MemoryServices(
        database=database,
        store=InMemoryAssetObjectStore(UrlSigner(b"u" * 32)),
        settings=settings,
        default_api_key="mk_" + "a" * 43,
    )
    try:
        async with Client(build_memory_server(services)) as client:
            for tool, arguments in [
                ("image_project_list", {}),
                ("image_asset_save", {"imageBase64": base64.b64encode(picture(1)).decode()}),
                ("image_asset_search", {"query": "anything"}),
            ]:
                result = await client.call_tool(tool, arguments, raise_on_error=False)
                assert result.is_error, tool
                message = str(getattr(result.content[0], "text", ""))
                assert message.startswith("unavailable: "), (tool, message)
    finally:
        await database.close()


@dataclass
class KillingEmbedder:
    """Crashes the database during its first call, then embeds as usual."""

    kill: list[EmbeddedPostgres]
    inner: ScriptedEmbedder = field(default_factory=ScriptedEmbedder)

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def dimensions(self) -> int:
        return self.inner.dimensions

    async def embed(self, values: Sequence[EmbedValue], task: Task) -> EmbedResult:
        while self.kill:
            crash(self.kill.pop())
        return await self.inner.embed(values, task)

    async def close(self) -> None:
        await self.inner.close()


def crash(embedded: EmbeddedPostgres) -> None:
    """SIGKILL the postmaster and every process it started, as a machine's crash would.

    Killing the postmaster alone leaves its backends running until they next look for it: a
    pooled connection could still commit the batch this outage is meant to cut short.
    """
    pid = embedded.postmaster_pid()
    assert pid is not None
    postmaster = psutil.Process(pid)
    for process in [postmaster, *postmaster.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()


async def restart(embedded: EmbeddedPostgres) -> None:
    """Start the killed server again, retrying while that fails (its old processes linger)."""
    deadline = time.monotonic() + 30
    while embedded.alive():  # the SIGKILL is delivered asynchronously: wait until it landed
        assert time.monotonic() < deadline, "the killed server is still alive"
        await anyio.sleep(0.05)
    while True:
        try:
            if await anyio.to_thread.run_sync(embedded.restart) or embedded.alive():
                return
        except Exception:
            if time.monotonic() > deadline:
                raise
        assert time.monotonic() < deadline, "the server did not restart within 30 s"
        await anyio.sleep(0.2)


@pytest.fixture(autouse=True)
def _log_events_kept() -> Iterator[None]:
    """Each call refused during an outage logs a warning with its traceback: keep it unrendered."""
    with capture_logs():
        yield


@pytest.fixture
async def own_database(
    embedded_data_dir: Path,
) -> AsyncIterator[tuple[Database, EmbeddedPostgres]]:
    # A copy of a migrated data directory: initdb and the migrations are not the subject here.
    settings = MemorySettings(asset_ocr="off", memory_data_dir=embedded_data_dir)
    database, embedded = await open_database(settings, migrate=True)
    assert embedded is not None
    try:
        yield database, embedded
    finally:
        await database.close()
        embedded.stop()


@pytest.mark.slow
async def test_a_batch_cut_short_by_an_outage_is_handed_back(
    tmp_path: Path, own_database: tuple[Database, EmbeddedPostgres]
) -> None:
    database, embedded = own_database
    embedder = KillingEmbedder(kill=[embedded])
    services = MemoryServices(
        database=database,
        store=LocalAssetObjectStore(tmp_path / "objects", UrlSigner(b"s" * 32), "http://x"),
        settings=MemorySettings(asset_ocr="off", memory_data_dir=tmp_path / "data"),
        embedder=embedder,
    )
    await admin.create_identity(database, "alice@example.com", 10**9)
    alice = Caller("alice@example.com", "akey_a", frozenset({"read", "write"}))
    request = SaveRequest(image_base64=base64.b64encode(picture(3)).decode(), title="cut short")
    asset_id = (await AssetSaver(services).save(alice, request)).asset_id
    worker = job_worker(services, FAST, name="w")

    with pytest.raises(Exception) as caught:  # the batch dies with the database
        await worker.run_once()
    assert caught.group_contains(DatabaseUnavailable) or isinstance(
        caught.value, DatabaseUnavailable
    )

    await restart(embedded)
    await database.engine.dispose()

    # The same worker carries on: the jobs are due again at once (the lease has 60 s left),
    # and the attempt the outage cut short is not counted against them.
    assert await worker.drain() == 2
    async with database.unit_of_work() as uow:
        jobs = await uow.jobs.for_asset("alice@example.com", asset_id)
        status = await session_of(uow).scalar(
            text("SELECT status FROM mem_assets WHERE id = :i"), {"i": asset_id}
        )
    assert {(job.status, job.attempts) for job in jobs} == {("done", 1)}
    assert status == "ready"


@pytest.mark.slow
async def test_a_running_worker_listens_again_after_an_outage(
    tmp_path: Path, own_database: tuple[Database, EmbeddedPostgres]
) -> None:
    database, embedded = own_database
    services = MemoryServices(
        database=database,
        store=LocalAssetObjectStore(tmp_path / "objects", UrlSigner(b"s" * 32), "http://x"),
        settings=MemorySettings(asset_ocr="off", memory_data_dir=tmp_path / "data"),
        embedder=ScriptedEmbedder(),
    )
    await admin.create_identity(database, "alice@example.com", 10**9)
    alice = Caller("alice@example.com", "akey_a", frozenset({"read", "write"}))
    # Polling is too slow to matter here: only a NOTIFY wakes this worker in time.
    worker = job_worker(services, replace(FAST, poll_seconds=120), name="listening")

    async def status(asset_id: str) -> str | None:
        async with database.unit_of_work() as uow:
            return await session_of(uow).scalar(
                text("SELECT status FROM mem_assets WHERE id = :i"), {"i": asset_id}
            )

    async def saved_and_ready(seed: int) -> None:
        request = SaveRequest(image_base64=base64.b64encode(picture(seed)).decode())
        asset_id = (await AssetSaver(services).save(alice, request)).asset_id
        with anyio.fail_after(15):
            while await status(asset_id) != "ready":
                await anyio.sleep(0.1)

    async with anyio.create_task_group() as group:
        ready = anyio.Event()
        group.start_soon(lambda: worker.run(ready=ready))
        await ready.wait()
        await saved_and_ready(1)
        crash(embedded)
        await restart(embedded)
        await database.engine.dispose()
        # The worker's listener notices and listens again on the restarted server (whose
        # activity shows no listener of before): seen, not assumed after a sleep.
        await until_a_worker_listens(services)
        await saved_and_ready(2)  # woken by the NOTIFY of this save, not by polling
        group.cancel_scope.cancel()
