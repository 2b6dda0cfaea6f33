"""Round trips to the database of one search (issue 31): at most four, text or image query.

Counted where they happen, at the driver: every request the asyncpg protocol sends and waits
for (a prepare, an execute, a simple query such as BEGIN or COMMIT) is one round trip. The
pool's checkout ping is counted apart: it belongs to the connection pool, not to the search.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from contextlib import contextmanager
from typing import Any

from fastmcp import Client
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from memory_tools import MemoryServices
from memory_tools.access import Caller
from memory_tools.search import AssetSearcher, SearchRequest
from memory_tools.worker import EmbeddingWorker

from ..pictures import b64, picture
from ..tool_calls import call as _call

# asyncpg protocol calls that send a request and wait for its answer.
_ROUND_TRIPS = frozenset(
    {
        "prepare",
        "bind_execute",
        "bind_execute_many",
        "bind",
        "execute",
        "query",
        "close_statement",
        "copy_in",
        "copy_out",
    }
)
# asyncpg's connection sends every request through this attribute (its protocol).
_PROTOCOL = "_protocol"
# At most this many round trips per search (the target, without the pool's ping).
BOUND = 4


class _CountingProtocol:
    """Delegates to an asyncpg protocol and notes each round trip it makes."""

    def __init__(self, protocol: Any, sent: list[str]) -> None:
        self.inner = protocol
        self._sent = sent

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.inner, name)
        if name not in _ROUND_TRIPS:
            return found
        sent = self._sent

        async def counted(*args: Any, **kwargs: Any) -> Any:
            what = args[0] if args and isinstance(args[0], str) else ""
            sent.append(f"{name}: {what or getattr(args[0], 'query', '') if args else ''}"[:160])
            return await found(*args, **kwargs)

        return counted


def _unwrap(driver: Any) -> None:
    counting = getattr(driver, _PROTOCOL)
    if isinstance(counting, _CountingProtocol):
        setattr(driver, _PROTOCOL, counting.inner)


@contextmanager
def round_trips(engine: AsyncEngine) -> Generator[list[str]]:
    """The round trips of connections checked out of ``engine`` inside the block."""
    sent: list[str] = []
    wrapped: list[Any] = []

    def checkout(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        # After the pool's ping: the ping is the pool's, counted by its own tests.
        driver = dbapi_connection.driver_connection
        sent.append("checkout")
        setattr(driver, _PROTOCOL, _CountingProtocol(getattr(driver, _PROTOCOL), sent))
        wrapped.append(driver)

    def checkin(dbapi_connection: Any, _record: Any) -> None:
        if dbapi_connection is not None:
            _unwrap(dbapi_connection.driver_connection)

    pool = engine.sync_engine.pool
    event.listen(pool, "checkout", checkout)
    event.listen(pool, "checkin", checkin)
    try:
        yield sent
    finally:
        event.remove(pool, "checkout", checkout)
        event.remove(pool, "checkin", checkin)
        for driver in wrapped:
            _unwrap(driver)


def _trips(sent: list[str]) -> list[str]:
    return [line for line in sent if line != "checkout"]


async def test_one_search_makes_at_most_four_round_trips_text_or_image(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices
) -> None:
    async with client_as(alice.key) as client:
        for seed, title in ((1, "Harbour at dawn"), (2, "Mountain bicycle race")):
            await _call(
                client, "image_asset_save", {"imageBase64": b64(picture(seed)), "title": title}
            )
    await EmbeddingWorker(saving).drain()
    caller = Caller(alice.email, alice.key_id, frozenset({"read"}))
    searcher = AssetSearcher(saving)
    # The first search of a process prepares the index and its statements; then steady state.
    await searcher.search(caller, SearchRequest(query="harbour"))
    await searcher.search(caller, SearchRequest(image_base64=b64(picture(3))))
    for request in (
        SearchRequest(query="harbour at dawn"),
        SearchRequest(image_base64=b64(picture(1))),
        SearchRequest(query="bicycle", image_base64=b64(picture(2))),
    ):
        with round_trips(saving.database.engine) as sent:
            view = await searcher.search(caller, request)
        assert view.results, request
        trips = _trips(sent)
        assert len(trips) <= BOUND, "\n".join(sent)
        # One pooled connection for the whole search: one checkout (and at most one ping).
        assert sent.count("checkout") == 1, "\n".join(sent)
