"""How many calls one process runs at once, and a fair, bounded wait for the rest.

Every tool call and every HTTP route that works on the database is admitted here first. At most
``MEMORY_MAX_CONCURRENT_CALLS`` run at once; the others wait their turn, first come first
served. A call that has waited ``MEMORY_ADMISSION_WAIT_SECONDS`` gives up with the retryable
``busy`` failure instead of stalling. The connection pool is sized above the admission limit
(see ``MemorySettings.db_pool_size``), and a task never holds two units of work at once
(``memory_db.NestedUnitOfWork``), so an admitted call never waits for a pooled connection.

Measured before admission existed: 16 concurrent searches on a pool of 10 connections stalled
for the 30 s pool timeout, then answered bare HTTP 500s.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager

import anyio
from anyio import TaskInfo

from memory_db import get_logger
from memory_tools.errors import Busy

log = get_logger(__name__)


class CallAdmission:
    """A first-come-first-served limit of calls running at once in this process.

    ``running`` and ``waiting`` are the state now; ``admitted``, ``queued`` (admitted after a
    wait) and ``refused`` (gave up as ``busy``) count since start, and ``high_water`` is the
    most that ever ran at once: tests and benchmarks read the bound from here.
    """

    def __init__(self, limit: int, wait_seconds: float) -> None:
        if limit < 1:
            raise ValueError("at least one call must be admitted at a time")
        if wait_seconds <= 0:
            raise ValueError("the admission wait must be positive")
        self.limit = limit
        self.wait_seconds = wait_seconds
        self._limiter = anyio.CapacityLimiter(limit)
        self._holders: set[TaskInfo] = set()
        self.admitted = 0
        self.queued = 0
        self.refused = 0
        self.high_water = 0

    @property
    def running(self) -> int:
        """Calls admitted and not finished."""
        return self._limiter.borrowed_tokens

    @property
    def waiting(self) -> int:
        """Calls waiting for their turn."""
        return self._limiter.statistics().tasks_waiting

    @asynccontextmanager
    async def admit(self) -> AsyncGenerator[None, None]:
        """Run the block as one admitted call; raise ``Busy`` after waiting too long.

        The block runs in the calling task, which must not be admitted already (anyio refuses
        a second token for one task: nesting would wait on itself under load).
        """
        borrower = anyio.get_current_task()
        await self._take(borrower)
        try:
            yield
        finally:
            if borrower in self._holders:  # not when a step aside could not take it back
                self._give_back(borrower)

    @asynccontextmanager
    async def stepped_aside(self) -> AsyncGenerator[None, None]:
        """Give this task's turn to the next caller while the block waits on the network.

        For waits that use no connection and no CPU here (downloading an image, asking the
        embedding provider): the turn is taken again afterwards, in arrival order, and waiting
        too long for it raises ``Busy`` like a first admission. A task that holds no turn (the
        worker, a command) runs the block as it is.
        """
        borrower = anyio.get_current_task()
        if borrower not in self._holders:
            yield
            return
        self._give_back(borrower)
        yield  # when the block raises, the call is ending: no turn is taken again
        await self._take(borrower)

    async def _take(self, borrower: TaskInfo) -> None:
        queued = self._limiter.available_tokens < 1 or self.waiting > 0
        try:
            with anyio.fail_after(self.wait_seconds):
                await self._limiter.acquire_on_behalf_of(borrower)
        except TimeoutError:
            self.refused += 1
            # The caller is told (busy, retryable); the server has not failed.
            log.info(
                "call_refused_busy",
                running=self.running,
                waiting=self.waiting,
                waited_seconds=self.wait_seconds,
            )
            raise Busy(
                f"the server is busy: {self.running} calls are running and {self.waiting} "
                f"more are waiting; retry in a moment"
            ) from None
        self._holders.add(borrower)
        self.admitted += 1
        self.queued += queued
        self.high_water = max(self.high_water, self.running)

    def _give_back(self, borrower: TaskInfo) -> None:
        self._holders.discard(borrower)
        self._limiter.release_on_behalf_of(borrower)
