"""Make a person and an API key for a test's server (and list its keys), without a CLI process.

`memory-server admin create-identity` and `create-key` each start Python and import the command
line before they touch the database: one to four seconds a call on a busy two-core machine, and
the browser and end-to-end tests make over sixty people. :func:`new_key` calls the same
operations (:func:`memory_tools.operations.admin.create_identity` and ``create_key``) in this
process, on the database a server started with ``env`` uses, reached as the CLI reaches it. The
commands themselves stay tested where they are the subject (``tests/e2e/test_processes.py``,
``apps/memory_server/tests``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import anyio

from memory_db import ApiKeyRecord, MemorySettings
from memory_db.database import DEFAULT_DATABASE, EmbeddedPostgres, create_engine, start_embedded
from memory_db.unit_of_work import Database
from memory_tools.operations import admin

T = TypeVar("T")


async def _on_database(env: Mapping[str, str], work: Callable[[Database], Awaitable[T]]) -> T:
    """Run ``work`` on the database a server started with ``env`` uses.

    ``MEMORY_DATABASE_URL`` when set; else the embedded PostgreSQL of ``MEMORY_DATA_DIR``,
    attached to as the CLI does (a running server's; started when none runs it, and released
    afterwards, so it stops again if nobody else uses it).
    """
    embedded: EmbeddedPostgres | None = None
    url = env.get("MEMORY_DATABASE_URL")
    if not url:
        embedded = await start_embedded(Path(env["MEMORY_DATA_DIR"]) / "postgres")
        url = embedded.url(DEFAULT_DATABASE)
    database = Database(create_engine(url, pool_size=1))
    try:
        return await work(database)
    finally:
        await database.close()
        if embedded is not None:
            await anyio.to_thread.run_sync(embedded.stop)


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
    quota = _default_quota(env) if quota_bytes is None else quota_bytes
    wanted = [scope for scope in scopes.split(",") if scope.strip()]

    async def make(database: Database) -> str:
        await admin.create_identity(database, owner, quota)
        return (await admin.create_key(database, owner, wanted)).secret

    return _apart(env, make)


def new_identity(env: Mapping[str, str], owner: str, *, quota_bytes: int | None = None) -> None:
    """Create identity ``owner`` (no key): what ``admin create-identity --owner OWNER`` does.

    With the quota the CLI would give unless ``quota_bytes`` is given. Blocking, like
    :func:`new_key`.
    """
    quota = _default_quota(env) if quota_bytes is None else quota_bytes

    async def make(database: Database) -> None:
        await admin.create_identity(database, owner, quota)

    _apart(env, make)


def list_keys(env: Mapping[str, str], owner: str) -> list[ApiKeyRecord]:
    """``owner``'s keys, newest first: what ``admin list-keys --owner OWNER`` lists.

    Blocking, like :func:`new_key`.
    """
    return _apart(env, lambda database: admin.list_keys(database, owner))


def _apart(env: Mapping[str, str], work: Callable[[Database], Awaitable[T]]) -> T:
    """Run ``work`` on ``env``'s database, on an event loop of its own thread."""
    with ThreadPoolExecutor(max_workers=1) as apart:
        return apart.submit(asyncio.run, _on_database(env, work)).result()
