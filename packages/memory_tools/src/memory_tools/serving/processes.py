"""``serve --transport http --processes N``: several server processes on one port.

The parent binds the port and starts N ``serve`` children that inherit a listening socket each,
plus one ``worker`` process for embedding. On Linux each child slot has its own
``SO_REUSEPORT`` socket, and the kernel spreads new connections evenly over them. A single
socket shared by all children (what gunicorn and ``uvicorn --workers`` do) was measured to hand
8 clients connecting at once all to one child, round after round: the first child to wake
accepts every waiting connection. The parent holds every slot's socket for its whole life, so
connections waiting in the queue of a child that died are not reset: the child started in its
place accepts them. Elsewhere (macOS does not spread ``SO_REUSEPORT`` connections) the children
share one socket. Either way the port is checked once, before anything starts.

The parent runs no HTTP and holds no pool. Before starting children it does what must happen
once: the signing key is created, the database is started (embedded default) or checked
(``MEMORY_DATABASE_URL``) and migrated, and the connection budget is checked. It keeps its use
of the embedded PostgreSQL until the last child is gone, so the database stops with the parent.

Supervision, as gunicorn's arbiter does it: a child that exits with status 2 (invalid
configuration: a restart cannot help) stops everything with status 2; any other death is logged
and the child restarted, unless children died more than ``RESTART_LIMIT`` times within
``RESTART_WINDOW_SECONDS``, which stops everything with status 1. SIGTERM or SIGINT sends SIGTERM
to every child once, waits ``STOP_TIMEOUT_SECONDS`` for them to finish their requests, kills what
is left, then releases the database. Children run in their own process group, so Ctrl+C in a
terminal reaches only the parent (uvicorn would take a second signal as "exit now"), and each
child exits by itself when its parent disappears (``kill -9`` of the parent).

The children are the app's own CLI (``command``, e.g. ``python -m memory_server``), which must
accept ``serve --transport http --host H --port P --no-worker --listen-fd FD`` (serve on the
inherited socket: ``serve.serve_http(listen_fd=...)``) and ``worker --supervised``
(``serve.run_worker(supervised=True)``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import FrameType

import anyio

from memory_db import ConfigurationError, MemorySettings, get_logger, open_database
from memory_db.database import EmbeddedPostgres, connection_limits, pool_capacity
from memory_db.runtime import load_signing_secret
from memory_tools import metrics
from memory_tools.serving.bootstrap import bind_listening_socket

log = get_logger(__name__)

RESTART_LIMIT = 5
RESTART_WINDOW_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 30.0
POLL_SECONDS = 0.2
PARENT_CHECK_SECONDS = 1.0
CONFIGURATION_EXIT = 2
# One embedding worker process beside the servers (unless --no-worker).
WORKER_PROCESSES = 1


@dataclass(frozen=True)
class ConnectionBudget:
    """What N processes may open against what the database accepts."""

    server_processes: int
    worker_processes: int
    per_process: int
    max_connections: int
    reserved: int

    @property
    def needed(self) -> int:
        """Connections all processes may hold at once."""
        return (self.server_processes + self.worker_processes) * self.per_process

    @property
    def available(self) -> int:
        """Connections the database gives to ordinary users."""
        return self.max_connections - self.reserved

    def check(self) -> None:
        """``ConfigurationError`` naming the numbers when the processes cannot fit."""
        if self.needed <= self.available:
            return
        workers = f" and {self.worker_processes} worker process" if self.worker_processes else ""
        raise ConfigurationError(
            f"--processes {self.server_processes}: {self.server_processes} server processes"
            f"{workers} may open up to {self.needed} database connections "
            f"({self.per_process} each, from the pool settings), but the database accepts "
            f"{self.available} (max_connections {self.max_connections} minus {self.reserved} "
            "reserved): lower --processes or the pool size, or raise max_connections"
        )


async def _prepare_database(
    settings: MemorySettings, server_processes: int, worker_processes: int
) -> tuple[ConnectionBudget, EmbeddedPostgres | None]:
    # The embedded default starts (or attaches to) PostgreSQL and migrates it here, once;
    # an external database must already be at this build's revision.
    database, embedded = await open_database(settings, migrate=False)
    try:
        max_connections, reserved = await connection_limits(database.engine)
        budget = ConnectionBudget(
            server_processes=server_processes,
            worker_processes=worker_processes,
            per_process=pool_capacity(database.engine),
            max_connections=max_connections,
            reserved=reserved,
        )
        budget.check()
    except BaseException:
        await database.close()
        if embedded is not None:
            embedded.stop()
        raise
    await database.close()
    return budget, embedded


@dataclass
class Child:
    """One supervised process: a server sharing the socket, or the embedding worker."""

    role: str  # "server" or "worker"
    command: list[str]
    pass_fds: tuple[int, ...]
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0

    def start(self) -> None:
        """Start (or start again) this child in its own process group."""
        # Our own interpreter and arguments, no shell.
        self.process = subprocess.Popen(  # noqa: S603
            self.command, pass_fds=self.pass_fds, process_group=0, stdin=subprocess.DEVNULL
        )
        self.started_at = time.monotonic()
        log.info("child_process_started", role=self.role, pid=self.process.pid)

    @property
    def pid(self) -> int | None:
        """The running process's id."""
        return self.process.pid if self.process is not None else None


@dataclass
class Supervisor:
    """Start the children, restart or stop them as the module docstring says, stop on signal."""

    children: list[Child]
    deaths: deque[float] = field(default_factory=lambda: deque[float]())
    stopping: bool = False
    stop_signal: int | None = None

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.stopping = True
        self.stop_signal = signum

    def run(self) -> int:
        """Supervise until a signal or a fatal child exit; return the exit status."""
        previous = {
            signum: signal.signal(signum, self._on_signal)
            for signum in (signal.SIGTERM, signal.SIGINT)
        }
        try:
            for child in self.children:
                child.start()
            status = self._watch()
        finally:
            self._stop_all()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        if self.stop_signal == signal.SIGINT:
            return 130
        return status

    def _watch(self) -> int:
        while not self.stopping:
            for child in self.children:
                code = child.process.poll() if child.process is not None else None
                if code is None or child.process is None or self.stopping:
                    continue
                log.error(
                    "child_process_died",
                    role=child.role,
                    pid=child.process.pid,
                    exit_status=code,
                    seconds_alive=round(time.monotonic() - child.started_at, 1),
                )
                if code == CONFIGURATION_EXIT:
                    return CONFIGURATION_EXIT
                now = time.monotonic()
                self.deaths.append(now)
                while self.deaths and now - self.deaths[0] > RESTART_WINDOW_SECONDS:
                    self.deaths.popleft()
                if len(self.deaths) > RESTART_LIMIT:
                    log.error(
                        "child_processes_keep_dying",
                        deaths=len(self.deaths),
                        window_seconds=RESTART_WINDOW_SECONDS,
                    )
                    return 1
                child.start()
            time.sleep(POLL_SECONDS)
        return 0

    def _stop_all(self) -> None:
        running = [c.process for c in self.children if c.process and c.process.poll() is None]
        for process in running:
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
        for process in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(deadline - time.monotonic(), 0.1))
            if process.poll() is None:  # it did not stop in time
                log.warning("child_process_killed", pid=process.pid)
                process.kill()
                process.wait()


def bind_slots(host: str, port: int, processes: int) -> list[socket.socket]:
    """A listening socket for each server slot (see the module docstring); the caller closes."""
    first = bind_listening_socket(host, port)  # a taken port fails here, with one clear line
    if not sys.platform.startswith("linux"):
        return [first] * processes
    port = int(first.getsockname()[1])  # the port the system chose for --port 0
    first.close()
    slots: list[socket.socket] = []
    try:
        for _ in range(processes):
            slots.append(bind_listening_socket(host, port, reuse_port=True))
    except BaseException:
        for sock in slots:
            sock.close()
        raise
    return slots


def child_commands(
    slots: list[socket.socket],
    host: str,
    port: int,
    *,
    command: Sequence[str],
    with_worker: bool,
    serve_options: Sequence[str] = (),
) -> list[Child]:
    """A server on each slot's socket (none embeds) and, unless told not to, one worker.

    ``command`` runs the app's CLI (see the module docstring for what it must accept);
    ``serve_options`` are added to each server's arguments (its ``--toolsets``, ``--read-only``).
    """
    children: list[Child] = []
    for sock in slots:
        fd = sock.fileno()
        serve = [
            *command,
            "serve",
            "--transport",
            "http",
            "--host",
            host,
            "--port",
            str(port),
            "--no-worker",
            "--listen-fd",
            str(fd),
            *serve_options,
        ]
        children.append(Child("server", serve, (fd,)))
    if with_worker:
        children.append(Child("worker", [*command, "worker", "--supervised"], ()))
    return children


def serve_processes(
    settings: MemorySettings,
    host: str,
    port: int,
    processes: int,
    *,
    command: Sequence[str],
    with_worker: bool,
    announce: Callable[[str], None],
    serve_options: Sequence[str] = (),
) -> int:
    """Bind and prepare once, then run and supervise the children; return the exit status.

    ``command`` runs the app's CLI with ``serve_options``, as :func:`child_commands` says.
    ``announce`` gets the start-up notice's details once everything is checked, just before
    the children start.
    """
    slots = bind_slots(host, port, processes)
    try:
        load_signing_secret(settings)  # created once here, not raced by N children
        workers = WORKER_PROCESSES if with_worker else 0
        budget, embedded = anyio.run(_prepare_database, settings, processes, workers)
        try:
            spread = "a socket each" if len(set(slots)) > 1 else "one socket"
            announce(
                f"  {processes} server processes on this port ({spread}); "
                + (
                    "1 embedding worker process"
                    if with_worker
                    else "no embedding worker (run `memory-server worker` processes)"
                )
                + f"; up to {budget.needed} of the database's {budget.available} connections"
            )
            port = int(slots[0].getsockname()[1])
            # The children (servers and worker) inherit PROMETHEUS_MULTIPROC_DIR: each writes
            # its values there and any server's /metrics answers the sum (metrics module).
            metrics.prepare_multiprocess_dir(settings.memory_data_dir, f"port-{port}")
            children = child_commands(
                slots,
                host,
                port,
                command=command,
                with_worker=with_worker,
                serve_options=serve_options,
            )
            return Supervisor(children).run()
        finally:
            if embedded is not None:
                embedded.stop()
                log.info("embedded_postgres_released")
    finally:
        for sock in set(slots):
            sock.close()


def exit_when_orphaned(parent: int, *, interval: float = PARENT_CHECK_SECONDS) -> None:
    """In a child: SIGTERM this process once its parent is gone (``kill -9`` of the parent).

    gunicorn's workers do the same check (their parent id changes when they are re-parented).
    A daemon thread, so it works whatever the event loop is doing.
    """

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval)
        log.warning("parent_process_gone", parent=parent)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
