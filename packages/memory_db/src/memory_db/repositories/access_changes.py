"""Keys checked without a round trip: a per-process cache that a change of access clears.

Every change of an API key's standing (revoked, scopes, hash, owner, deleted) and of a grant
or vault is counted by a trigger (migration 0021): it bumps the one row of
``mem_access_epoch`` and sends ``pg_notify(ACCESS_CHANNEL, <epoch>)``. The row lock makes the
epochs follow commit order, and PostgreSQL delivers notifications in commit order, so a
listener that has handled epoch *n* has handled every change up to *n*.

One :class:`AccessChangeWatch` per process (``Database.access_changes``) listens on one
connection. Every notification, every new listening connection and every loss of one bumps its
``generation``; :class:`ApiKeyCache` keeps an entry only for the generation it was read in,
and trusts nothing while no connection listens (fail closed: a process that cannot hear of a
revocation asks the database on every call, as before the cache).

The listener then acknowledges the epoch it handled by naming its connection
``memory-access:<epoch>`` (``application_name``, visible in ``pg_stat_activity``, no write) and
announcing that name on :data:`ACK_CHANNEL`. A change made through the repositories
(:meth:`ApiKeyRepository.revoke`, grants, a web session ended) returns only once every
listening process of the database has acknowledged it (:func:`settle_access_change`, woken by
the announcements): so the next call, whichever process serves it, no longer finds the old key
or session in a cache.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

import anyio
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from memory_db.database import is_connection_failure
from memory_db.logs import get_logger
from memory_db.repositories.records import ApiKeyRecord

log = get_logger(__name__)

V = TypeVar("V")

# The channel the access triggers notify with an epoch; the docs spell it for operators.
ACCESS_CHANNEL = "memory_access_changes"
# How a listening connection names itself: this prefix and the last epoch it handled.
LISTENER_NAME_PREFIX = "memory-access:"
# How often the watch tries to listen again after losing its connection.
RELISTEN_SECONDS = 1.0
# Where each listener also announces an acknowledgement: a change waiting for the listeners
# wakes on it instead of polling pg_stat_activity (the name stays the record to check).
ACK_CHANNEL = "memory_access_acks"
# How long a change waits for every listener's acknowledgement before it cuts the laggards off.
SETTLE_TIMEOUT_SECONDS = 5.0
# While it waits, how often it looks again without an acknowledgement heard: for a listener
# that went away (its process died; nothing announces that) or one that acknowledged by its
# name alone. Every acknowledgement announced wakes it at once.
SETTLE_RECHECK_SECONDS = 0.1
# A cached key is asked again after this long: that read also records "last used" (at most once
# a minute per key, as the repository does anyway), and bounds what any miss could cost.
KEY_CACHE_TTL_SECONDS = 60.0
KEY_CACHE_MAX_ENTRIES = 10_000

# session.info flag: this transaction changed access; settle once it commits.
ACCESS_CHANGED = "memory_access_changed"

_ACKNOWLEDGE = text(
    "SELECT set_config('application_name', :name, false), pg_notify(:channel, :name)"
)
_START = text(
    "SELECT set_config('application_name', :prefix || epoch::text, false) FROM mem_access_epoch"
)
_LAGGARDS = text(
    "SELECT pid, application_name FROM pg_stat_activity "
    "WHERE datname = current_database() AND application_name LIKE :pattern"
)


def mark_access_changed(session: AsyncSession) -> None:
    """Record that the session's transaction changes access (see :func:`settle_access_change`)."""
    session.info[ACCESS_CHANGED] = True


class AccessChangeWatch:
    """One process's listening connection for access changes, and whether to trust a cache."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._trusted = False
        self._reachable = True  # whether the last attempt to listen reached the database
        # Bumped by every notification, every new listening connection and every loss of one.
        self.generation = 0
        self.epoch = 0  # the last epoch handled (tests and operators read it)
        self._switched = anyio.Event()  # set (and replaced) whenever ``trusted`` changes

    @property
    def trusted(self) -> bool:
        """Whether a listening connection is up: only then may a cache be believed."""
        return self._trusted

    async def until(self, *, trusted: bool) -> None:
        """Return once ``trusted`` is as asked (tests wait on this, never on time)."""
        while self._trusted != trusted:
            await self._switched.wait()

    def _trust(self, trusted: bool) -> None:
        self.generation += 1
        if self._trusted != trusted:
            self._trusted = trusted
            switched, self._switched = self._switched, anyio.Event()
            switched.set()

    async def run(self) -> None:
        """Until cancelled: listen; when the connection is lost, distrust and listen again."""
        while True:
            try:
                await self._listen_once()
            except Exception as exc:
                if not is_connection_failure(exc):
                    log.error("access_listen_failed", exc_info=True)
                elif self._reachable:  # once per outage, not once per retry
                    log.warning("access_listen_unavailable", exc_info=True)
                self._reachable = False
            finally:
                self._distrust()
            await anyio.sleep(RELISTEN_SECONDS)

    def _distrust(self) -> None:
        self._trust(False)

    async def _listen_once(self) -> None:
        send, receive = anyio.create_memory_object_stream[int](math.inf)
        lost = anyio.Event()

        def notified(_connection: object, _pid: int, _channel: str, payload: str) -> None:
            self.generation += 1  # whatever was cached before this change is stale now
            send.send_nowait(int(payload) if payload.isdigit() else 0)

        def terminated(_connection: object) -> None:
            log.warning("access_listen_lost")
            self._distrust()
            lost.set()

        driver: Any = None
        async with send, receive, self._engine.connect() as connection:
            try:
                raw = await connection.get_raw_connection()
                driver = raw.driver_connection
                driver.add_termination_listener(terminated)
                await driver.add_listener(ACCESS_CHANNEL, notified)
                # After LISTEN: a change committed from here on is heard; one before is read.
                started = await connection.execute(_START, {"prefix": LISTENER_NAME_PREFIX})
                self.epoch = int(str(started.scalar_one()).removeprefix(LISTENER_NAME_PREFIX))
                await connection.commit()
                self._reachable = True
                self._trust(True)
                log.info("access_listening", epoch=self.epoch)
                async with anyio.create_task_group() as group:
                    group.start_soon(self._acknowledge, connection, receive)
                    await lost.wait()
                    group.cancel_scope.cancel()
            finally:
                if driver is not None:  # ending it here is no loss to report
                    driver.remove_termination_listener(terminated)
                # Never pooled again: it listens and carries this name.
                with anyio.CancelScope(shield=True):
                    await connection.invalidate()

    async def _acknowledge(self, connection: Any, epochs: Any) -> None:
        async for epoch in epochs:
            self.epoch = max(self.epoch, epoch)
            name = f"{LISTENER_NAME_PREFIX}{self.epoch}"
            await connection.execute(_ACKNOWLEDGE, {"name": name, "channel": ACK_CHANNEL})
            await connection.commit()


async def settle_access_change(engine: AsyncEngine) -> None:
    """Return once every process listening on this database has handled the changes so far.

    Called after a transaction that changed access committed. The listeners' names say which
    epoch each handled; it reads them once, then again whenever a listener announces an
    acknowledgement on :data:`ACK_CHANNEL` (and every :data:`SETTLE_RECHECK_SECONDS` without
    one). A listener that does not acknowledge within :data:`SETTLE_TIMEOUT_SECONDS` (its
    process is stuck) has its listening connection ended: that process then distrusts its
    cache until it listens again. When the database cannot be reached the change is made all
    the same and every listener is lost, so nothing trusts a cache: there is nothing to wait
    for.
    """
    try:
        async with engine.connect() as connection:
            raw = await connection.get_raw_connection()
            driver: Any = raw.driver_connection
            woken = anyio.Event()

            def announced(*_args: object) -> None:
                woken.set()

            # Before the names are read: an acknowledgement made after the read is heard.
            await driver.add_listener(ACK_CHANNEL, announced)
            try:
                epoch = (
                    await connection.execute(text("SELECT epoch FROM mem_access_epoch"))
                ).scalar()
                target = int(epoch or 0)
                deadline = time.monotonic() + SETTLE_TIMEOUT_SECONDS
                while True:
                    woken = anyio.Event()  # before the read: an answer during it wakes us
                    behind = await _behind(connection, target)
                    if not behind:
                        return
                    left = deadline - time.monotonic()
                    if left <= 0:
                        await _cut_off(connection, behind, target)
                        return
                    with anyio.move_on_after(min(left, SETTLE_RECHECK_SECONDS)):
                        await woken.wait()
            finally:
                # The connection goes back to the pool: it must not stay listening.
                with anyio.CancelScope(shield=True):
                    try:
                        await driver.remove_listener(ACK_CHANNEL, announced)
                    except Exception:
                        await connection.invalidate()
                        raise
    except Exception as exc:
        if not is_connection_failure(exc):
            raise
        log.warning("access_settle_unavailable", exc_info=True)


async def _behind(connection: Any, target: int) -> list[int]:
    """The backends of the listeners that have not yet handled epoch ``target``."""
    rows = await connection.execute(_LAGGARDS, {"pattern": LISTENER_NAME_PREFIX + "%"})
    behind = [int(pid) for pid, name in rows.all() if _epoch_of(name) < target]
    await connection.commit()
    return behind


async def _cut_off(connection: Any, pids: list[int], target: int) -> None:
    """End the listening connections ``pids``: their processes then distrust their caches."""
    for pid in pids:
        await connection.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    await connection.commit()
    log.warning("access_listeners_cut_off", pids=pids, epoch=target)


def _epoch_of(name: str) -> int:
    tail = name.removeprefix(LISTENER_NAME_PREFIX)
    return int(tail) if tail.isdigit() else 0


class AccessState(Protocol):
    """What a cache asks of the watch: whether to believe it, and since which change."""

    @property
    def trusted(self) -> bool:
        """Whether changes are heard now."""
        ...

    @property
    def generation(self) -> int:
        """Bumped by every change heard and every start or loss of listening."""
        ...


class AccessCache(Generic[V]):
    """Values read from the database, believed only while the watch listens.

    An entry is valid for the watch's generation it was read in, for ``ttl_seconds``, and until
    the ``until`` its :meth:`put` gave (this process's monotonic clock: a web session's
    expiry). Only what grants access is put (an active key, a live session): a caller guessing
    secrets cannot fill it. ``clock`` is for tests.
    """

    def __init__(
        self,
        watch: AccessState,
        *,
        ttl_seconds: float = KEY_CACHE_TTL_SECONDS,
        max_entries: int = KEY_CACHE_MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._watch = watch
        self._ttl = ttl_seconds
        self._max = max_entries
        self.clock = clock
        self._entries: dict[str, tuple[V, float]] = {}  # value, valid until
        self._generation = -1  # the generation the entries were read in

    def get(self, key: str) -> V | None:
        """The cached value, or None when it must be read from the database."""
        if not self._watch.trusted or self._generation != self._watch.generation:
            return None
        entry = self._entries.get(key)
        if entry is None:
            return None
        value, until = entry
        if self.clock() >= until:
            del self._entries[key]
            return None
        return value

    def ticket(self) -> int | None:
        """Take before reading: :meth:`put` keeps the read only if nothing changed since."""
        return self._watch.generation if self._watch.trusted else None

    def put(self, ticket: int | None, key: str, value: V, *, until: float = math.inf) -> None:
        """Keep ``value``, read after :meth:`ticket` gave ``ticket``, if it is still current.

        ``until``: a moment of :attr:`clock` after which it is no longer valid whatever else.
        """
        current = self._watch.generation
        if ticket is None or ticket != current or not self._watch.trusted:
            return
        if self._generation != current or len(self._entries) >= self._max:
            self._entries.clear()
            self._generation = current
        self._entries[key] = (value, min(self.clock() + self._ttl, until))


class ApiKeyCache(AccessCache[ApiKeyRecord]):
    """Active keys by the hash of their secret (and by :func:`key_id_entry` of their id)."""


def key_id_entry(key_id: str) -> str:
    """The cache entry of a key by its id (a hash is hex: the two never meet)."""
    return f"id:{key_id}"


__all__ = [
    "ACCESS_CHANNEL",
    "ACK_CHANNEL",
    "AccessCache",
    "AccessChangeWatch",
    "AccessState",
    "ApiKeyCache",
    "key_id_entry",
    "mark_access_changed",
    "settle_access_change",
]
