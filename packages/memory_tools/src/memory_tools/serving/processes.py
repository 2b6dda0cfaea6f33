"""``serve --transport http --processes N``: several server processes on one port.

The parent binds the port, accepts every connection and deals them to N ``serve`` children in
turn (:mod:`memory_tools.serving.handoff`: why, and how a connection reaches a child), plus one
``worker`` process for embedding. Two clients' connections therefore never wait on one child
while the other has fewer: ``SO_REUSEPORT`` sockets, one per child, were measured to split 16
clients 5/11 between two children, and one socket shared by all children (what gunicorn and
``uvicorn --workers`` do) handed 8 clients connecting at once all to one child. A connection
handed to a child that died waits for the child started in its place. The port is checked
once, before anything starts.

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
accept ``serve --transport http --host H --port P --no-worker --handoff-fd FD`` (serve the
connections handed over on the inherited descriptor: ``serve.serve_http(handoff_fd=...)``) and
``worker --supervised`` (``serve.run_worker(supervised=True)``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
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
from memory_tools.serving.handoff import ConnectionDealer

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
    """One supervised process: a server of a slot's connections, or the embedding worker."""

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

    @property
    def running(self) -> bool:
        """Whether the child was started and has not been seen to exit."""
        return self.process is not None and self.process.returncode is None


@dataclass
class Supervisor:
    """Start the children, restart or stop them as the module docstring says, stop on signal."""

    children: list[Child]
    # Called first when stopping, before any child is signalled (the dealer stops accepting).
    on_stop: Callable[[], None] | None = None
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
        if self.on_stop is not None:
            self.on_stop()
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


def child_commands(
    dealer: ConnectionDealer,
    slots: int,
    host: str,
    port: int,
    *,
    command: Sequence[str],
    with_worker: bool,
    serve_options: Sequence[str] = (),
) -> list[Child]:
    """A server for each of ``dealer``'s ``slots`` (none embeds) and, unless told not, a worker.

    ``command`` runs the app's CLI (see the module docstring for what it must accept);
    ``serve_options`` are added to each server's arguments (its ``--toolsets``, ``--read-only``).
    """
    children: list[Child] = []
    for slot in range(slots):
        fd = dealer.child_fd(slot)
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
            "--handoff-fd",
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
    listener = bind_listening_socket(host, port)  # a taken port fails here, with one clear line
    dealer = ConnectionDealer(listener, processes)
    try:
        load_signing_secret(settings)  # created once here, not raced by N children
        workers = WORKER_PROCESSES if with_worker else 0
        budget, embedded = anyio.run(_prepare_database, settings, processes, workers)
        try:
            announce(
                f"  {processes} server processes on this port (connections dealt in turn); "
                + (
                    "1 embedding worker process"
                    if with_worker
                    else "no embedding worker (run `memory-server worker` processes)"
                )
                + f"; up to {budget.needed} of the database's {budget.available} connections"
            )
            port = int(listener.getsockname()[1])  # the port the system chose for --port 0
            # The children (servers and worker) inherit PROMETHEUS_MULTIPROC_DIR: each writes
            # its values there and any server's /metrics answers the sum (metrics module).
            metrics.prepare_multiprocess_dir(settings.memory_data_dir, f"port-{port}")
            children = child_commands(
                dealer,
                processes,
                host,
                port,
                command=command,
                with_worker=with_worker,
                serve_options=serve_options,
            )
            servers = children[:processes]
            dealer.start(running=lambda slot: servers[slot].pid if servers[slot].running else None)
            return Supervisor(children, on_stop=dealer.stop).run()
        finally:
            if embedded is not None:
                embedded.stop()
                log.info("embedded_postgres_released")
    finally:
        dealer.stop()
        dealer.close()


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
