"""Count the database round trips of a piece of work (structural tests, benchmarks).

:class:`RoundTrips` wraps the protocol of every asyncpg connection an engine opens from now
on, and records each awaited protocol call that talks to the server: a simple query
(``BEGIN``, ``COMMIT``, the checkout ping), a prepare, a bind-and-execute, a
bind-and-execute-many, a statement close, a ``COPY``. That is what a round trip costs: one
message to PostgreSQL and a wait for its answer. Counting calls rather than time makes the
figure independent of the machine's speed, so a test can assert it.

Connections the engine already pooled are closed first (``await trips.start()``), so every
connection the work checks out is counted.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

# The protocol calls that send a message and await the server's answer.
_SENDING = {
    "query": 0,  # simple query: the SQL text is the first argument
    "prepare": 1,  # (statement name, query, ...)
    "bind_execute": None,  # a prepared statement's state carries its query
    "bind_execute_many": None,
    "bind": None,  # a cursor's portal: bound, then fetched from with "execute"
    "execute": None,
    "close_statement": None,
    "copy_in": 0,
    "copy_out": 0,
}


@dataclass(frozen=True)
class RoundTrip:
    """One message to PostgreSQL and its answer: the protocol call and the SQL it carried."""

    call: str
    sql: str

    @property
    def is_ping(self) -> bool:
        """The pool's checkout ping (``SELECT 1`` as a simple query)."""
        return self.call == "query" and self.sql.strip() == "SELECT 1"


def _sql_of(call: str, args: tuple[Any, ...]) -> str:
    position = _SENDING[call]
    if position is not None:
        value = args[position] if len(args) > position else ""
        return value if isinstance(value, str) else ""
    state = args[0] if args else None
    query = getattr(state, "query", "")
    return query if isinstance(query, str) else ""


class _CountingProtocol:
    """A stand-in for an asyncpg protocol that records the calls that reach the server."""

    def __init__(self, protocol: Any, record: Callable[[RoundTrip], None]) -> None:
        self._wrapped = protocol
        self._record = record

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._wrapped, name)
        if name not in _SENDING:
            return attribute
        record = self._record

        def counted(*args: Any, **kwargs: Any) -> Any:
            record(RoundTrip(name, _sql_of(name, args)))
            return attribute(*args, **kwargs)

        return counted


@dataclass
class RoundTrips:
    """The round trips of one engine's connections while :meth:`counting` is open."""

    engine: AsyncEngine
    trips: list[RoundTrip] = field(default_factory=list[RoundTrip])
    _on: bool = False

    def _record(self, trip: RoundTrip) -> None:
        if self._on:
            self.trips.append(trip)

    def _wrap(self, dbapi_connection: Any, _record: Any) -> None:
        driver = dbapi_connection.driver_connection
        if not isinstance(driver._protocol, _CountingProtocol):
            driver._protocol = _CountingProtocol(driver._protocol, self._record)

    async def start(self) -> None:
        """Wrap every connection the engine opens from now on (pooled ones are closed)."""
        event.listen(self.engine.sync_engine, "connect", self._wrap)
        await self.engine.dispose()

    def stop(self) -> None:
        """Wrap no more new connections (wrapped ones stay wrapped, but record nothing)."""
        self._on = False
        event.remove(self.engine.sync_engine, "connect", self._wrap)

    @contextmanager
    def counting(self) -> Generator[list[RoundTrip]]:
        """Record the round trips of the block; yields the list they are appended to."""
        self.trips = []
        self._on = True
        try:
            yield self.trips
        finally:
            self._on = False
