"""Make a person and an API key for a test's running server, without starting a CLI process.

`memory-server admin create-identity` and `create-key` each start Python and import the command
line before they touch the database: one to four seconds a call on a busy two-core machine, and
the browser and end-to-end tests make over a hundred people. :func:`new_key` calls the same
operations (:func:`memory_tools.operations.admin.create_identity` and ``create_key``) in this
process, on the database the server of ``env`` uses. The commands themselves stay tested where
they are the subject (``tests/e2e/test_processes.py``, ``apps/memory_server/tests``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote

from memory_db import MemorySettings
from memory_db.database import DEFAULT_DATABASE, create_engine
from memory_db.unit_of_work import Database
from memory_tools.operations import admin


class NoDatabaseForKeys(RuntimeError):
    """``env`` names no database URL and its data directory has no running PostgreSQL."""


def database_url_of(env: Mapping[str, str]) -> str:
    """The database a server started with ``env`` uses: its URL, or the running embedded one.

    The embedded server's socket directory is read from ``postmaster.pid`` (PostgreSQL's own
    file: line 5), so the server must be running; a test makes its people after it started.
    """
    if env.get("MEMORY_DATABASE_URL"):
        return env["MEMORY_DATABASE_URL"]
    pid_file = Path(env["MEMORY_DATA_DIR"]) / "postgres" / "postmaster.pid"
    try:
        lines = pid_file.read_text().splitlines()
    except FileNotFoundError:
        raise NoDatabaseForKeys(f"no PostgreSQL is running in {pid_file.parent}") from None
    if len(lines) < 5 or not lines[4].strip():
        raise NoDatabaseForKeys(f"{pid_file} names no socket directory")
    return f"postgresql+asyncpg://postgres@/{DEFAULT_DATABASE}?host={quote(lines[4].strip())}"


async def _make(url: str, owner: str, scopes: list[str], quota_bytes: int) -> str:
    database = Database(create_engine(url, pool_size=1))
    try:
        await admin.create_identity(database, owner, quota_bytes)
        return (await admin.create_key(database, owner, scopes)).secret
    finally:
        await database.close()


def _default_quota(env: Mapping[str, str]) -> int:
    """The quota the CLI would give: ``env``'s MEMORY_DEFAULT_QUOTA_BYTES, else the default."""
    if env.get("MEMORY_DEFAULT_QUOTA_BYTES"):
        return int(env["MEMORY_DEFAULT_QUOTA_BYTES"])
    default = MemorySettings.model_fields["memory_default_quota_bytes"].default
    return int(default)


def new_key(
    env: Mapping[str, str],
    owner: str,
    scopes: str = "read,write,destructive",
    *,
    quota_bytes: int | None = None,
) -> str:
    """Create identity ``owner`` and a key with ``scopes`` (comma-separated); return the key.

    What ``admin create-identity --owner OWNER`` then ``admin create-key --owner OWNER
    --scopes SCOPES`` do, with the quota the CLI would give unless ``quota_bytes`` is given.
    Blocking; it runs on an event loop of its own thread, so it works from sync tests, from
    async ones and while Playwright's sync driver holds this thread's loop.
    """
    url = database_url_of(env)
    quota = _default_quota(env) if quota_bytes is None else quota_bytes
    wanted = [scope for scope in scopes.split(",") if scope.strip()]
    with ThreadPoolExecutor(max_workers=1) as apart:
        return apart.submit(asyncio.run, _make(url, owner, wanted, quota)).result()
