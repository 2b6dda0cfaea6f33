"""The embedded default: processes on one data directory share one PostgreSQL server."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from memory_db.database import EmbeddedPostgres, start_embedded

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
