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

from memory_db.testing.round_trips import RoundTrips
from memory_tools import MemoryServices
from memory_tools.access import Caller
from memory_tools.search import AssetSearcher, SearchRequest
from memory_tools.worker import EmbeddingWorker

from ..pictures import b64, picture
from ..tool_calls import call as _call

# At most this many round trips per search (the target, without the pool's ping).
BOUND = 4


@contextmanager
def checkouts(engine: AsyncEngine) -> Generator[list[object]]:
    """The pool checkouts made inside the block."""
    made: list[object] = []

    def checkout(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        made.append(dbapi_connection)

    pool = engine.sync_engine.pool
    event.listen(pool, "checkout", checkout)
    try:
        yield made
    finally:
        event.remove(pool, "checkout", checkout)


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
    # Wrapping closes the pooled connections: before the warm-up, so it prepares on them.
    counter = RoundTrips(saving.database.engine)
    await counter.start()
    searcher = AssetSearcher(saving)
    # The first search of a process prepares the index and its statements; then steady state.
    await searcher.search(caller, SearchRequest(query="harbour"))
    await searcher.search(caller, SearchRequest(image_base64=b64(picture(3))))
    for request in (
        SearchRequest(query="harbour at dawn"),
        SearchRequest(image_base64=b64(picture(1))),
        SearchRequest(query="bicycle", image_base64=b64(picture(2))),
    ):
        with checkouts(saving.database.engine) as made, counter.counting() as sent:
            view = await searcher.search(caller, request)
        assert view.results, request
        # The pool's ping is the pool's, counted by its own tests.
        trips = [trip for trip in sent if not trip.is_ping]
        listing = "\n".join(f"{trip.call}: {trip.sql[:120]}" for trip in sent)
        # Counted at all (the two statements at least), and within the bound.
        assert 2 <= len(trips) <= BOUND, listing
        # One pooled connection for the whole search.
        assert len(made) == 1, listing
    counter.stop()
