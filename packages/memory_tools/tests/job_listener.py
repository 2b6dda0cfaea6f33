"""Waiting, without a guessed sleep, until a worker listens for new jobs."""

from __future__ import annotations

import anyio
from sqlalchemy import text

from memory_db.repositories.jobs import JOB_CHANNEL
from memory_tools import MemoryServices

# A connection to this database whose last statement was LISTEN on the jobs' channel is
# listening: it is a connection of its own (``listen_for_jobs``) and runs nothing else.
_LISTENERS = text(
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query = :listen"
)


async def until_a_worker_listens(services: MemoryServices) -> None:
    """Return once a worker listens for new jobs: a job queued from now on wakes it.

    ``JobWorker.run`` sets its ``ready`` event before its listener has subscribed.
    The 30 s bound only guards against a hang.
    """
    with anyio.fail_after(30):
        while True:
            async with services.database.engine.connect() as conn:
                listening = (
                    await conn.execute(_LISTENERS, {"listen": f'LISTEN "{JOB_CHANNEL}"'})
                ).scalar_one()
            if listening:
                return
            await anyio.sleep(0.02)
