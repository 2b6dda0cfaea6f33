"""Waiting for an asset's embedding state to change, without polling (LISTEN/NOTIFY).

Every change of an asset's embedding state is made by
:meth:`memory_db.repositories.AssetRepository.reconcile_many`, whose statement also runs
``pg_notify(ASSET_STATE_CHANNEL, asset_id)``: the notification is sent when, and only if, that
transaction commits, by whichever process made the change (a worker in another process too).

One :class:`AssetStateWatch` per process (``Database.asset_states``) listens on ONE connection
for every waiter of the process, and fans each notification out to the waiters of that asset.
The connection is checked out of the pool when the first waiter arrives and given back when the
last one leaves, so an idle process listens on nothing. A waiter holds no connection of its own
while it waits.

The order that never misses a change: subscribe (:meth:`AssetStateWatch.watching`), then read
the state, then wait (:meth:`StateSubscription.changed`). A notification sent after the
subscription started is kept for the next wait even if it arrives while the state is read.

When the listening connection is lost (PostgreSQL restarted), every waiter is woken; the next
wait listens on a new connection and returns at once, because notifications may have been
missed while nobody listened: the caller reads the state again. While the database cannot be
reached, a wait retries every :data:`RELISTEN_SECONDS`; the caller's own deadline still bounds it.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from memory_db.database import is_connection_failure
from memory_db.logs import get_logger

log = get_logger(__name__)

# The channel reconcile_many notifies with an asset id; the docs spell it for operators.
ASSET_STATE_CHANNEL = "memory_asset_states"
# How often a waiter tries to listen again while the database cannot be reached.
RELISTEN_SECONDS = 1.0
# Giving the listening connection back (UNLISTEN) never delays a finishing call longer.
RELEASE_TIMEOUT_SECONDS = 5.0


class StateSubscription:
    """One waiter's interest in one asset; made by :meth:`AssetStateWatch.watching`."""

    def __init__(self, watch: AssetStateWatch, asset_id: str, generation: int) -> None:
        self.asset_id = asset_id
        self._watch = watch
        # The listening connection this subscription last relied on (0: none yet).
        self.generation = generation
        self.event = anyio.Event()

    async def changed(self) -> None:
        """Return when the asset's state may have changed since the last return (or start).

        Returns on a notification for this asset, or as soon as a new listening connection
        replaced a lost one (a change may have been missed meanwhile). Never returns only
        because time passed: bound it with the caller's deadline (``anyio.move_on_after``).
        """
        await self._watch.next_change(self)


class AssetStateWatch:
    """One process's listening connection and the waiters it wakes."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._lock = anyio.Lock()
        self._waiters: dict[str, set[StateSubscription]] = {}
        self._connection: AsyncConnection | None = None
        self._driver: Any = None
        self._lost = False
        self._reachable = True  # whether the last attempt to listen reached the database
        self.generation = 0  # how many listening connections were opened so far

    @property
    def listening(self) -> bool:
        """Whether a listening connection is held now (tests and operators read this)."""
        return self._connection is not None and not self._lost

    @property
    def waiters(self) -> int:
        """Subscriptions open now."""
        return sum(len(subscriptions) for subscriptions in self._waiters.values())

    @asynccontextmanager
    async def watching(self, asset_id: str) -> AsyncGenerator[StateSubscription, None]:
        """Subscribe to ``asset_id``'s changes for the block; read the state inside it.

        Listening starts (or is shared) before the block runs; leaving the block, by any
        exit including cancellation, unsubscribes, and the last waiter gives the connection
        back to the pool.
        """
        generation = await self._listen()
        subscription = StateSubscription(self, asset_id, generation or 0)
        self._waiters.setdefault(asset_id, set()).add(subscription)
        try:
            yield subscription
        finally:
            waiting = self._waiters.get(asset_id, set())
            waiting.discard(subscription)
            if not waiting:
                self._waiters.pop(asset_id, None)
            if not self._waiters:
                with anyio.CancelScope(shield=True):
                    await self._release()

    async def next_change(self, subscription: StateSubscription) -> None:
        """See :meth:`StateSubscription.changed`."""
        while True:
            generation = await self._listen()
            if generation is None:
                await anyio.sleep(RELISTEN_SECONDS)
                continue
            if generation != subscription.generation:
                subscription.generation = generation
                return  # listening anew: what changed meanwhile was not heard
            await subscription.event.wait()
            subscription.event = anyio.Event()
            if not self._lost:
                return

    async def _listen(self) -> int | None:
        """The generation of a live listening connection, opening one if needed.

        ``None`` when the database cannot be reached now.
        """
        async with self._lock:
            if self._connection is not None and not self._lost:
                return self.generation
            await self._discard()
            connection = self._engine.connect()
            try:
                await connection.start()
                raw = await connection.get_raw_connection()
                driver: Any = raw.driver_connection
                driver.add_termination_listener(self._terminated)
                await driver.add_listener(ASSET_STATE_CHANNEL, self._notified)
            except Exception as exc:
                with anyio.CancelScope(shield=True):
                    await _drop(connection)
                if is_connection_failure(exc):
                    if self._reachable:  # once per outage, not once per retry and waiter
                        log.warning("asset_state_listen_unavailable", exc_info=True)
                    self._reachable = False
                    return None
                raise
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await _drop(connection)
                raise
            self._connection, self._driver, self._lost = connection, driver, False
            self._reachable = True
            self.generation += 1
            return self.generation

    def _notified(self, _connection: object, _pid: int, _channel: str, payload: str) -> None:
        for subscription in self._waiters.get(payload, ()):
            subscription.event.set()

    def _terminated(self, _connection: object) -> None:
        log.warning("asset_state_listen_lost")
        self._lost = True
        for subscriptions in self._waiters.values():
            for subscription in subscriptions:
                subscription.event.set()

    async def _release(self) -> None:
        """Give the listening connection back once nobody waits (shielded by the caller)."""
        async with self._lock:
            if self._waiters or self._connection is None:
                return
            if not self._lost:
                try:
                    with anyio.fail_after(RELEASE_TIMEOUT_SECONDS):
                        await self._driver.remove_listener(ASSET_STATE_CHANNEL, self._notified)
                        self._driver.remove_termination_listener(self._terminated)
                        await self._connection.close()
                    self._connection = self._driver = None
                    return
                except Exception:
                    log.warning("asset_state_unlisten_failed", exc_info=True)
            await self._discard()

    async def _discard(self) -> None:
        """Drop a lost (or unusable) listening connection: invalidated, never pooled again."""
        connection, self._connection, self._driver = self._connection, None, None
        self._lost = False
        if connection is not None:
            await _drop(connection)


async def _drop(connection: AsyncConnection) -> None:
    """Close a listening connection for good, whatever state it is in (even never opened)."""
    if connection.sync_connection is None:
        return  # the connect failed: nothing was opened
    try:
        await connection.invalidate()
        await connection.close()
    except Exception as exc:
        # Already gone (the server went away): nothing is held either way.
        log.debug("asset_state_connection_dropped", error=type(exc).__name__)


__all__ = ["ASSET_STATE_CHANNEL", "RELISTEN_SECONDS", "AssetStateWatch", "StateSubscription"]
