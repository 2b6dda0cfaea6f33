"""The admission controls of one process: calls running at once, and pixels being decoded.

## Calls (:class:`CallAdmission`)

Every tool call and every HTTP route that works on the database is admitted here first. At most
``MEMORY_MAX_CONCURRENT_CALLS`` run at once; the others wait their turn, first come first
served. A call that has waited ``MEMORY_ADMISSION_WAIT_SECONDS`` gives up with the retryable
``busy`` failure instead of stalling. The connection pool is sized above the admission limit
(see ``MemorySettings.db_pool_size``), and a task never holds two units of work at once
(``memory_db.NestedUnitOfWork``), so an admitted call never waits for a pooled connection.

Measured before admission existed: 16 concurrent searches on a pool of 10 connections stalled
for the 30 s pool timeout, then answered bare HTTP 500s.

## Decodes (:class:`DecodeAdmission`)

A decode's memory grows with the image's pixels: measured on 40 MP images, about 35 MB for a
JPEG (decoded at 1/2 scale), 65 MB for a PNG and 200 MB for a GIF (whose frames are composed
at full size). Unbounded, 24 concurrent saves of 40 MP GIFs took 6 GB. Every decode of an
untrusted image therefore asks :class:`DecodeAdmission` first, with the pixel count its header
declares; decodes beyond the budget wait their turn, first come first served, instead of
failing or growing memory. An image larger than the whole budget (but within the pixel limit)
is admitted alone, when nothing else is in flight, so it can never wait forever.

The C allocator keeps what a decoder freed for later use by its thread (glibc keeps an arena
per thread, and decodes run on whichever worker thread is free): 24 saves left 400-1,900 MB
behind, and with the budget alone the arenas still held about twice the budget's pixels at the
peak. :func:`trim_allocator` hands the free memory back to the system after each large decode
(7-40 ms after a 40 MP one, within the noise of the burst's wall time).
"""

from __future__ import annotations

import ctypes
import functools
import sys
from collections import deque
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

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


# Trimming walks every arena: it is worth its cost only after a decode of this many pixels.
TRIM_AFTER_PIXELS = 4_000_000


@dataclass
class _Waiter:
    cost: int
    admitted: anyio.Event = field(default_factory=anyio.Event)


class DecodeAdmission:
    """A first-come-first-served budget of pixels being decoded at once, for one process.

    ``in_flight`` is what is admitted now, ``high_water`` the most ever admitted at once,
    ``admitted`` how many decodes were let through and ``queued`` how many of them had to wait:
    tests and benchmarks read the bound from here.
    """

    def __init__(self, budget_pixels: int) -> None:
        if budget_pixels < 1:
            raise ValueError("the decode budget must be at least one pixel")
        self.budget = budget_pixels
        self.in_flight = 0
        self.high_water = 0
        self.admitted = 0
        self.queued = 0
        self._waiting: deque[_Waiter] = deque()

    @property
    def waiting(self) -> int:
        """How many decodes wait for their turn."""
        return len(self._waiting)

    @asynccontextmanager
    async def admit(self, pixels: int) -> AsyncGenerator[None, None]:
        """Hold ``pixels`` of the budget for the block; wait first while they do not fit."""
        cost = min(max(pixels, 1), self.budget)  # larger than the budget: admitted alone
        await self._acquire(cost)
        try:
            yield
        finally:
            self._release(cost)

    async def _acquire(self, cost: int) -> None:
        if not self._waiting and self.in_flight + cost <= self.budget:
            self._grant(cost)
            return
        waiter = _Waiter(cost)
        self._waiting.append(waiter)
        self.queued += 1
        try:
            await waiter.admitted.wait()
        except BaseException:
            if waiter.admitted.is_set():  # admitted just as it was cancelled: give it back
                self._release(cost)
            else:
                self._waiting.remove(waiter)
                self._admit_waiting()  # the queue's head may have changed
            raise

    def _grant(self, cost: int) -> None:
        self.in_flight += cost
        self.high_water = max(self.high_water, self.in_flight)
        self.admitted += 1

    def _release(self, cost: int) -> None:
        self.in_flight -= cost
        self._admit_waiting()

    def _admit_waiting(self) -> None:
        # Strictly in order: a large image at the head is not overtaken by smaller ones.
        while self._waiting and self.in_flight + self._waiting[0].cost <= self.budget:
            waiter = self._waiting.popleft()
            self._grant(waiter.cost)
            waiter.admitted.set()


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """``malloc_trim`` of glibc, or ``None`` where the C library has none (musl, macOS)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def trim_allocator() -> bool:
    """Return the C heap's free memory to the system (blocking); ``False`` where unsupported."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
