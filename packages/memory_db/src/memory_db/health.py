"""Readiness probes: whether this process can reach its database and object store now.

Each probe is cheap (``SELECT 1``; a ``HEAD`` of a key that never exists, or a look at the local
store's directory), bounded by a short timeout, and answers a short, non-sensitive reason when
the part is not ready. A liveness check needs none of this: it only says the process is up.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import anyio
from sqlalchemy import text

from memory_db.errors import MemoryDbError
from memory_db.logs import get_logger
from memory_db.storage import AssetObjectStore, LocalAssetObjectStore, build_object_key
from memory_db.unit_of_work import Database, session_of

log = get_logger(__name__)

PROBE_TIMEOUT_SECONDS = 2.0
# A well-formed key the key builder never hands out (ids are random): a HEAD of it answers
# "missing" from a healthy store, and an error from one that cannot be reached.
_PROBE_NAMESPACE = "ans_" + "a" * 26
_PROBE_OBJECT = "aob_" + "a" * 26


def _writable_directory(root: Path) -> bool:
    directory = root if root.exists() else root.parent
    return directory.is_dir() and os.access(directory, os.R_OK | os.W_OK | os.X_OK)


@dataclass(frozen=True)
class Readiness:
    """The outcome of the probes: each part is ``"ok"`` or a short reason it is not."""

    parts: dict[str, str]

    @property
    def ready(self) -> bool:
        """Whether every part answered."""
        return all(state == "ok" for state in self.parts.values())

    @property
    def failing(self) -> list[str]:
        """The parts that did not answer."""
        return [part for part, state in self.parts.items() if state != "ok"]


async def probe_database(database: Database) -> str:
    """``"ok"`` when ``SELECT 1`` answers within ``PROBE_TIMEOUT_SECONDS``, else why not."""
    try:
        with anyio.fail_after(PROBE_TIMEOUT_SECONDS):
            async with database.unit_of_work() as uow:
                await session_of(uow).execute(text("SELECT 1"))
    except TimeoutError:
        return "timeout"
    except Exception as exc:
        log.warning("readiness_database_failed", error=type(exc).__name__, exc_info=True)
        return "unavailable"
    return "ok"


async def probe_store(store: AssetObjectStore, env_prefix: str) -> str:
    """``"ok"`` when the object store answers within ``PROBE_TIMEOUT_SECONDS``, else why not."""
    try:
        with anyio.fail_after(PROBE_TIMEOUT_SECONDS):
            if isinstance(store, LocalAssetObjectStore):
                # A HEAD of a missing file cannot tell "absent" from "unreachable": check that
                # the store's directory (made on the first save) can be written instead.
                if not await anyio.to_thread.run_sync(_writable_directory, store.root):
                    return "unavailable"
            else:
                key = build_object_key(env_prefix, _PROBE_NAMESPACE, _PROBE_OBJECT, "preview")
                await store.head(key)
    except TimeoutError:
        return "timeout"
    except (MemoryDbError, OSError) as exc:
        log.warning("readiness_store_failed", error=type(exc).__name__, exc_info=True)
        return "unavailable"
    return "ok"


async def check_readiness(
    database: Database, store: AssetObjectStore, env_prefix: str
) -> Readiness:
    """Probe the database and the object store side by side."""
    parts: dict[str, str] = {}

    async def run_database() -> None:
        parts["database"] = await probe_database(database)

    async def run_store() -> None:
        parts["objectStore"] = await probe_store(store, env_prefix)

    async with anyio.create_task_group() as group:
        group.start_soon(run_database)
        group.start_soon(run_store)
    return Readiness(parts={"database": parts["database"], "objectStore": parts["objectStore"]})
