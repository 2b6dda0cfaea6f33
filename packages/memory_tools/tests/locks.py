"""Seeing that a statement waits on a lock the test holds, instead of sleeping and hoping."""

from __future__ import annotations

import anyio
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from memory_tools import MemoryServices


async def backend_pid(session: AsyncSession) -> int:
    """The PostgreSQL backend serving ``session`` (the holder of its locks)."""
    return int((await session.execute(text("SELECT pg_backend_pid()"))).scalar_one())


async def until_blocked_by(services: MemoryServices, holder: int) -> None:
    """Return once another session waits for a lock that backend ``holder`` holds.

    The 30 s bound only guards against a hang (a statement that never reaches the lock).
    """
    waiting = text(
        "SELECT count(*) FROM pg_stat_activity WHERE :holder = ANY(pg_blocking_pids(pid))"
    )
    with anyio.fail_after(30):
        while True:
            async with services.database.engine.connect() as conn:
                if (await conn.execute(waiting, {"holder": holder})).scalar_one():
                    return
            await anyio.sleep(0.02)
