"""Databases cloned from the migrated template one step ahead of the tests that use them.

The ``database_url`` fixture hands a fresh clone to some 900 tests of a run. Made on demand, each
cost a test two new admin connections (a backend forked for each: the larger share of the cost
on a loaded machine), a ``CREATE DATABASE ... TEMPLATE`` and a ``DROP DATABASE``, all in the
test's own set-up and teardown. ``CloneSupply`` keeps one admin connection open on a thread of
its own, makes the next clone while a test runs and drops a used one after the test has moved
on, so a test waits only when its clone is not ready yet.

Nothing is shared between tests: each clone is handed out once and dropped after use; a clone
made ahead is what a clone made on demand would be (the template does not change after
``PostgresForTests.start``). Measured and kept out: ``STRATEGY FILE_COPY`` (a checkpoint per
clone) was slower than the default ``WAL_LOG`` on this suite's small template when the machine
was loaded (450 ms against 180 ms median per clone, load average 17 on 2 cores).
"""

from __future__ import annotations

import asyncio
import secrets
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any

import asyncpg

from memory_db.database import to_plain_url
from memory_db.testing import TEMPLATE_DATABASE, PostgresForTests


class CloneSupply:
    """Clones of ``postgres``'s template, made one ahead and dropped after use, on one thread."""

    def __init__(self, postgres: PostgresForTests) -> None:
        self._admin_url = to_plain_url(postgres.admin_url)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="clone-supply", daemon=True
        )
        self._conn: Any = None
        # Serialises the statements on the one admin connection (asyncpg runs one at a time).
        self._lock: asyncio.Lock | None = None
        self._next: asyncio.Task[str] | None = None
        self._drops: set[asyncio.Task[None]] = set()
        self._failures: list[BaseException] = []
        self.made: list[str] = []
        """Every database this supply created, in order (for checks that all were dropped)."""

    def start(self) -> None:
        """Open the admin connection and start making the first clone."""
        self._thread.start()
        self._call(self._open()).result()

    async def take(self) -> str:
        """The name of a fresh database cloned from the template, handed out once."""
        return await asyncio.wrap_future(self._call(self._take()))

    def give_back(self, name: str) -> None:
        """Drop database ``name`` on the supply's thread; the caller does not wait for it."""
        self._call(self._schedule_drop(name)).result()

    def stop(self) -> None:
        """Wait for pending drops, drop the clone made ahead, close; raise a drop's failure."""
        try:
            self._call(self._close()).result()
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()
        if self._failures:
            raise RuntimeError("a test database could not be dropped") from self._failures[0]

    def _call(self, work: Coroutine[Any, Any, Any]) -> Future[Any]:
        return asyncio.run_coroutine_threadsafe(work, self._loop)

    async def _open(self) -> None:
        self._lock = asyncio.Lock()
        self._conn = await asyncpg.connect(self._admin_url)
        self._next = asyncio.ensure_future(self._create())

    async def _execute(self, statement: str) -> None:
        if self._lock is None:
            raise RuntimeError("the clone supply is not started: call start() first")
        async with self._lock:
            await self._conn.execute(statement)

    async def _create(self) -> str:
        # Names are made here from hex digits; the template's is this package's constant.
        name = "t_" + secrets.token_hex(6)
        await self._execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE_DATABASE}")
        self.made.append(name)
        return name

    async def _take(self) -> str:
        ready = self._next if self._next is not None else asyncio.ensure_future(self._create())
        self._next = None
        name = await ready  # a failed clone raises here, in the test that asked for it
        self._next = asyncio.ensure_future(self._create())
        return name

    async def _drop(self, name: str) -> None:
        try:
            await self._execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        except Exception as exc:  # kept for stop(): no test is waiting for this drop
            self._failures.append(exc)

    async def _schedule_drop(self, name: str) -> None:
        task = asyncio.ensure_future(self._drop(name))
        self._drops.add(task)
        task.add_done_callback(self._drops.discard)

    async def _close(self) -> None:
        if self._drops:
            await asyncio.gather(*self._drops)
        if self._next is not None:
            try:
                await self._drop(await self._next)
            except Exception as exc:  # the clone made ahead failed; no test used it
                self._failures.append(exc)
        if self._conn is not None:
            await self._conn.close()
