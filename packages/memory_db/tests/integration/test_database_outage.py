"""A database that goes away: how it is recognised, reported, restarted and let go of.

The embedded servers here are this test's own (never the session's shared one): they get killed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import psutil
import pytest
from sqlalchemy import text
from sqlalchemy.exc import ProgrammingError
from structlog.testing import capture_logs

from memory_db import Database, DatabaseUnavailable
from memory_db.database import (
    EmbeddedPostgres,
    create_engine,
    is_connection_failure,
    start_embedded,
)
from memory_db.health import probe_database, probe_store
from memory_db.storage import LocalAssetObjectStore, S3AssetObjectStore, UrlSigner
from memory_db.unit_of_work import session_of

# A second process that attaches to the server of a data directory and holds it until killed.
HOLD = """
import sys
from pathlib import Path
from memory_db.database import EmbeddedPostgres
server = EmbeddedPostgres(Path(sys.argv[1]))
server.start()
print(server.postmaster_pid(), flush=True)
sys.stdin.read()
"""


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.fixture(autouse=True)
def _log_events_kept() -> Iterator[None]:
    """Each call refused during an outage logs a warning with its traceback: keep it unrendered."""
    with capture_logs():
        yield


@pytest.fixture
async def own_server(tmp_path: Path) -> AsyncIterator[EmbeddedPostgres]:
    server = await start_embedded(tmp_path / "pg")
    try:
        yield server
    finally:
        pid = server.postmaster_pid()
        server.stop()
        if pid is not None and _alive(pid):  # a failed test must not leak a server
            os.kill(pid, signal.SIGTERM)


async def _restart(server: EmbeddedPostgres) -> None:
    deadline = time.monotonic() + 30
    while server.alive():  # the SIGKILL is delivered asynchronously: wait until it landed
        assert time.monotonic() < deadline, "the killed server is still alive"
        await anyio.sleep(0.05)
    while time.monotonic() < deadline:
        try:
            if await anyio.to_thread.run_sync(server.restart) or server.alive():
                return
        except Exception:  # the old server's processes may still hold its shared memory
            pass
        await anyio.sleep(0.2)
    pytest.fail("the server did not restart within 30 s")


def _dead_url(tmp_path: Path) -> str:
    # A socket directory where no server listens: connecting is refused at once.
    return f"postgresql+asyncpg://postgres@/memory?host={tmp_path}"


async def test_an_unreachable_database_is_database_unavailable(tmp_path: Path) -> None:
    database = Database(create_engine(_dead_url(tmp_path)))
    try:
        with pytest.raises(DatabaseUnavailable) as caught:
            async with database.unit_of_work() as uow:
                await session_of(uow).execute(text("SELECT 1"))
        assert is_connection_failure(caught.value.__cause__)  # type: ignore[arg-type]
        assert await probe_database(database) == "unavailable"
    finally:
        await database.close()


async def test_other_errors_are_not_taken_for_an_outage(database: Database, tmp_path: Path) -> None:
    with pytest.raises(ProgrammingError):
        async with database.unit_of_work() as uow:
            await session_of(uow).execute(text("SELECT * FROM no_such_table"))
    # An OSError that did not come from the driver (a file, the object store) is no outage.
    missing = anyio.Path(tmp_path / "missing")
    with pytest.raises(FileNotFoundError) as caught:
        async with database.unit_of_work():
            await missing.read_bytes()
    assert not is_connection_failure(caught.value)
    assert await probe_database(database) == "ok"


@pytest.mark.slow
async def test_a_killed_postmaster_is_noticed_and_restarted(own_server: EmbeddedPostgres) -> None:
    database = Database(create_engine(own_server.url("postgres"), pool_size=2))
    try:
        async with database.unit_of_work() as uow:
            await session_of(uow).execute(text("CREATE TABLE kept (n int)"))
            await session_of(uow).execute(text("INSERT INTO kept VALUES (7)"))
        victim = own_server.postmaster_pid()
        assert victim is not None and own_server.alive()
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 5  # the signal is delivered asynchronously
        while own_server.alive() and time.monotonic() < deadline:
            await anyio.sleep(0.01)
        assert not own_server.alive()  # a killed, unreaped postmaster (a zombie) counts as dead
        with pytest.raises(DatabaseUnavailable):
            async with database.unit_of_work() as uow:
                await session_of(uow).execute(text("SELECT 1"))

        await _restart(own_server)
        assert own_server.alive() and own_server.postmaster_pid() != victim
        assert await anyio.to_thread.run_sync(own_server.restart) is False  # nothing to do
        await database.engine.dispose()
        async with database.unit_of_work() as uow:  # the committed row survived the crash
            assert (await session_of(uow).execute(text("SELECT n FROM kept"))).scalar_one() == 7
    finally:
        await database.close()


@pytest.mark.slow
async def test_a_user_killed_without_releasing_does_not_keep_the_server(tmp_path: Path) -> None:
    pgdata = tmp_path / "pg"
    ours = await start_embedded(pgdata)
    postmaster = ours.postmaster_pid()
    assert postmaster is not None
    holder = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        HOLD,
        str(pgdata),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None
        line = await asyncio.wait_for(holder.stdout.readline(), timeout=120)
        assert int(line) == postmaster  # attached to our server
        holder.kill()  # kill -9: its pid stays in the server's list of users
        await holder.wait()
        ours.stop()  # the last live user
        deadline = time.monotonic() + 15
        while _alive(postmaster) and time.monotonic() < deadline:
            await anyio.sleep(0.2)
        assert not _alive(postmaster), "a dead user kept the embedded server running"
        assert not (pgdata / "postmaster.pid").exists()
    finally:
        if holder.returncode is None:
            holder.kill()
        if _alive(postmaster):
            os.kill(postmaster, signal.SIGTERM)


async def test_readiness_of_object_stores(tmp_path: Path) -> None:
    signer = UrlSigner(b"k" * 32)
    fresh = LocalAssetObjectStore(tmp_path / "objects", signer, "http://127.0.0.1:9")
    assert await probe_store(fresh, "production") == "ok"  # made on the first save
    (tmp_path / "blocked").write_bytes(b"not a directory")
    broken = LocalAssetObjectStore(tmp_path / "blocked", signer, "http://127.0.0.1:9")
    assert await probe_store(broken, "production") == "unavailable"
    # An S3 endpoint where nothing listens: unavailable (or timed out), never "ok".
    unreachable = S3AssetObjectStore(
        bucket="b",
        region="us-east-1",
        endpoint_url="http://127.0.0.1:9",
        access_key_id="k",
        secret_access_key="s",
        force_path_style=True,
    )
    try:
        assert await probe_store(unreachable, "production") in {"unavailable", "timeout"}
    finally:
        await unreachable.close()
