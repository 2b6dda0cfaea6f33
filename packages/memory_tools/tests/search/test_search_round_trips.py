"""Round trips to the database of one search (issue 31): at most four, in one checkout.

Text, image and fused queries, and searches that name a vault (own or shared), a project or a
folder (with its subfolders), or filter on tags, ``untagged`` or the source host: those are
checked, and the matching assets listed, in the search's first statement, not in a unit of work
of their own.

Counted where they happen, at the driver: every request the asyncpg protocol sends and waits
for (a prepare, an execute, a simple query such as BEGIN or COMMIT) is one round trip. The
pool's checkout ping is counted apart: it belongs to the connection pool, not to the search.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from contextlib import contextmanager
from typing import Any

import pytest
from fastmcp import Client
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from memory_db.repositories import AssetFilter
from memory_db.testing.round_trips import RoundTrips
from memory_tools import MemoryServices
from memory_tools.access import Caller
from memory_tools.errors import NotFoundFailure
from memory_tools.operations import admin
from memory_tools.serving.job_worker import job_worker
from memory_tools.workflows.search import AssetSearcher, SearchRequest

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
    await job_worker(saving).drain()
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


async def test_a_search_naming_its_vault_project_or_folder_makes_at_most_four_round_trips(
    client_as: Callable[[str], Client[Any]], alice: Any, bob: Any, saving: MemoryServices
) -> None:
    async with client_as(alice.key) as client:
        pid = (await _call(client, "image_project_create", {"name": "Trips"}))["projectId"]
        outer = await _call(client, "image_folder_create", {"projectId": pid, "name": "2026"})
        inner = await _call(
            client,
            "image_folder_create",
            {"projectId": pid, "name": "May", "parentId": outer["folderId"]},
        )
        for seed, folder in ((4, outer["folderId"]), (5, inner["folderId"])):
            await _call(
                client,
                "image_asset_save",
                {
                    "imageBase64": b64(picture(seed)),
                    "title": f"Harbour trip {seed}",
                    "projectId": pid,
                    "folderId": folder,
                    "tags": ["trip", f"s{seed}"],
                },
            )
    await job_worker(saving).drain()
    await admin.grant(saving.database, alice.email, "Library", bob.email, "read")
    alices = Caller(alice.email, alice.key_id, frozenset({"read"}))
    bobs = Caller(bob.email, bob.key_id, frozenset({"read"}))
    counter = RoundTrips(saving.database.engine)
    await counter.start()
    searcher = AssetSearcher(saving)
    await searcher.search(alices, SearchRequest(query="harbour"))  # prepares, as above
    folder = outer["folderId"]
    for caller, request, found in (
        (alices, SearchRequest(query="harbour", vault="Library"), 2),
        (alices, SearchRequest(query="harbour", vault="Library", project_id=pid), 2),
        (
            alices,
            SearchRequest(query="harbour", vault="Library", project_id=pid, folder_id=folder),
            1,
        ),
        (
            alices,
            SearchRequest(
                query="harbour",
                vault="library",
                project_id=pid,
                folder_id=folder,
                include_subfolders=True,
            ),
            2,
        ),
        (bobs, SearchRequest(query="harbour", vault=f"{alice.email}/Library"), 2),
        (
            bobs,
            SearchRequest(query="harbour", vault=f"{alice.email}/Library", project_id=pid),
            2,
        ),
        (bobs, SearchRequest(image_base64=b64(picture(4)), vault=f"{alice.email}/library"), 2),
        # Filters without a vector column: the candidates are listed by the same statement.
        (alices, SearchRequest(query="harbour", filters=AssetFilter(tags=("s5",))), 1),
        (
            alices,
            SearchRequest(query="harbour", vault="Library", filters=AssetFilter(tags=("trip",))),
            2,
        ),
        (
            alices,
            SearchRequest(
                query="harbour",
                vault="Library",
                project_id=pid,
                folder_id=folder,
                filters=AssetFilter(tags=("s5",)),
            ),
            0,
        ),
        (alices, SearchRequest(query="harbour", filters=AssetFilter(untagged=True)), 0),
        (
            bobs,
            SearchRequest(
                image_base64=b64(picture(5)),
                filters=AssetFilter(source_host="example.org", tags=("trip",)),
            ),
            0,
        ),
    ):
        await searcher.search(caller, request)  # this query's statements prepared
        with checkouts(saving.database.engine) as made, counter.counting() as sent:
            view = await searcher.search(caller, request)
        titles = [hit.title for hit in view.results]
        assert len([t for t in titles if t.startswith("Harbour trip")]) == found, (request, titles)
        trips = [trip for trip in sent if not trip.is_ping]
        listing = "\n".join(f"{trip.call}: {trip.sql[:120]}" for trip in trips)
        # Before: the vault, project and folder were checked in a unit of work of their own
        # (a second checkout and 3 to 6 round trips more).
        assert 2 <= len(trips) <= BOUND, listing
        assert len(made) == 1, listing
    # Refused as before, in the same statement: nothing found is nothing searched.
    for caller, request, message in (
        (alices, SearchRequest(query="harbour", vault="Nowhere"), "vault 'Nowhere' not found"),
        (bobs, SearchRequest(query="harbour", vault="Library/x"), "vault 'Library/x' not found"),
        (
            alices,
            SearchRequest(query="harbour", vault="Library", project_id="apr_nope"),
            "project not found",
        ),
        (
            alices,
            SearchRequest(query="harbour", vault="Library", project_id=pid, folder_id="afl_x"),
            "folder not found",
        ),
        # Another owner's project in the caller's own vault is no project there.
        (bobs, SearchRequest(query="harbour", vault="Library", project_id=pid), "project not"),
        (
            bobs,
            SearchRequest(
                query="harbour", vault="Library", project_id=pid, folder_id=outer["folderId"]
            ),
            "folder not found",
        ),
    ):
        with (
            checkouts(saving.database.engine) as made,
            counter.counting() as sent,
            pytest.raises(NotFoundFailure, match=message),
        ):
            await searcher.search(caller, request)
        assert len(made) == 1 and len([t for t in sent if not t.is_ping]) <= BOUND
    counter.stop()
