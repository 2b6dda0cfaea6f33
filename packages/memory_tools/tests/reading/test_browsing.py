"""The web pages' views (memory_tools.workflows.browsing): a grid with preview links that pages both ways,
the library tree, an asset's page and its original link, refused exactly like the tools."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx
import pytest
from fastmcp import Client

from memory_db.repositories import AssetFilter
from memory_tools import MemoryServices
from memory_tools.access import authenticate
from memory_tools.errors import InvalidInputFailure, NotFoundFailure
from memory_tools.operations import admin
from memory_tools.workflows import browsing
from memory_tools.workflows.assets import ListRequest

from ..pictures import b64, picture
from ..tool_calls import call, error

T = TypeVar("T")


async def _as(services: MemoryServices, key: str, action: Callable[..., Awaitable[T]]) -> T:
    async with services.database.unit_of_work() as uow:
        caller = await authenticate(uow, key)
        return await action(uow, caller, services)


async def _save_many(client: Client[Any], count: int) -> list[str]:
    ids: list[str] = []
    for seed in range(count):
        saved = await call(
            client, "image_asset_save", {"imageBase64": b64(picture(seed)), "title": f"P{seed}"}
        )
        ids.append(saved["assetId"])
    return ids


async def _grid(
    services: MemoryServices, key: str, request: ListRequest, *, backward: bool = False
) -> browsing.AssetGrid:
    async def action(uow: Any, caller: Any, s: MemoryServices) -> browsing.AssetGrid:
        return await browsing.asset_grid(uow, caller, s, request, backward=backward)

    return await _as(services, key, action)


def _ids(grid: browsing.AssetGrid) -> list[str]:
    return [card.summary.asset_id for card in grid.cards]


async def test_the_grid_pages_forward_and_back_with_a_preview_link_per_asset(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices
) -> None:
    async with client_as(alice.key) as client:
        newest_first = list(reversed(await _save_many(client, 5)))
    first = await _grid(saving, alice.key, ListRequest(limit=2))
    assert _ids(first) == newest_first[:2] and first.previous_cursor is None
    for card in first.cards:
        assert card.preview is not None and card.preview.url is not None
        assert "/preview.webp" in httpx.URL(card.preview.url).path
    second = await _grid(saving, alice.key, ListRequest(limit=2, cursor=first.next_cursor))
    third = await _grid(saving, alice.key, ListRequest(limit=2, cursor=second.next_cursor))
    assert _ids(second) == newest_first[2:4] and _ids(third) == newest_first[4:]
    assert third.next_cursor is None and third.previous_cursor is not None
    # Back from the third page: the second page, in the page's order, with both ways onward.
    back = await _grid(
        saving, alice.key, ListRequest(limit=2, cursor=third.previous_cursor), backward=True
    )
    assert _ids(back) == newest_first[2:4]
    assert back.next_cursor is not None and back.previous_cursor is not None
    onward = await _grid(saving, alice.key, ListRequest(limit=2, cursor=back.next_cursor))
    assert _ids(onward) == newest_first[4:]
    # Back again reaches the beginning: the first page itself, with nothing before it.
    start = await _grid(
        saving, alice.key, ListRequest(limit=2, cursor=back.previous_cursor), backward=True
    )
    assert _ids(start) == newest_first[:2] and start.previous_cursor is None
    # Oldest first pages the same way.
    oldest = await _grid(saving, alice.key, ListRequest(limit=3, order="oldest"))
    assert _ids(oldest) == list(reversed(newest_first))[:3]


async def test_the_grid_refuses_what_the_tool_refuses(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices
) -> None:
    bad = ListRequest(filters=AssetFilter(mime_types=("text/html",)))
    with pytest.raises(InvalidInputFailure) as refused:
        await _grid(saving, alice.key, bad)
    async with client_as(alice.key) as client:
        tool = await error(client, "image_asset_list", {"mimeTypes": ["text/html"]})
    assert tool == f"invalid_input: {refused.value.message}"
    with pytest.raises(InvalidInputFailure, match="sourceKinds"):
        await _grid(saving, alice.key, ListRequest(filters=AssetFilter(source_kinds=("ftp",))))
    with pytest.raises(InvalidInputFailure, match="order"):
        await _grid(saving, alice.key, ListRequest(order="sideways"))  # type: ignore[arg-type]
    with pytest.raises(InvalidInputFailure, match="cursor"):
        await _grid(saving, alice.key, ListRequest(cursor="nonsense"))
    with pytest.raises(InvalidInputFailure, match="cursor"):
        await _grid(saving, alice.key, ListRequest(), backward=True)


async def test_the_tree_shows_vaults_projects_and_the_selected_projects_folders(
    client_as: Callable[[str], Client[Any]], alice: Any, bob: Any, saving: MemoryServices
) -> None:
    async with client_as(alice.key) as client:
        project = await call(client, "image_project_create", {"name": "Trips"})
        trip = await call(
            client,
            "image_folder_create",
            {"projectId": project["projectId"], "name": "2026"},
        )
    async with client_as(bob.key) as client:
        await call(client, "image_project_create", {"name": "Bob's secret"})

    async def tree(uow: Any, caller: Any, s: MemoryServices) -> browsing.LibraryTree:
        return await browsing.library_tree(
            uow, caller, s, vault="Library", project_id=project["projectId"]
        )

    shown = await _as(saving, alice.key, tree)
    assert [v.vault for v in shown.vaults] == ["Library"]
    assert [p.name for p in shown.projects["Library"]] == ["Trips"]
    assert [(f.folder_id, f.path) for f in shown.folders] == [(trip["folderId"], "/2026")]
    # Bob names alice's project: not found, as for the tool.
    with pytest.raises(NotFoundFailure):
        await _as(saving, bob.key, tree)


async def test_an_asset_page_for_the_owner_a_reader_and_anyone_else(
    client_as: Callable[[str], Client[Any]],
    alice: Any,
    bob: Any,
    make_person: Callable[..., Awaitable[Any]],
    saving: MemoryServices,
) -> None:
    reader = await make_person("reader@example.com")
    await admin.grant(saving.database, "alice@example.com", "Library", "reader@example.com", "read")
    async with client_as(alice.key) as client:
        project = await call(client, "image_project_create", {"name": "Trips"})
        await call(client, "image_folder_create", {"projectId": project["projectId"], "name": "A"})
        saved = await call(
            client, "image_asset_save", {"imageBase64": b64(picture(7)), "title": "Dune"}
        )

    async def detail(uow: Any, caller: Any, s: MemoryServices) -> browsing.AssetDetail:
        return await browsing.asset_detail(uow, caller, s, asset_id=saved["assetId"])

    async def original(uow: Any, caller: Any, s: MemoryServices) -> Any:
        return await browsing.original_link(uow, caller, s, asset_id=saved["assetId"])

    mine = await _as(saving, alice.key, detail)
    assert mine.asset.title == "Dune" and mine.writable and mine.permission == "owner"
    assert mine.sha256 == hashlib.sha256(picture(7)).hexdigest()
    assert mine.asset.preview is not None and mine.asset.preview.url is not None
    assert [(p.label, p.folder_id is None) for p in mine.placements] == [
        ("Trips", True),
        ("Trips/A", False),
    ]
    link = await _as(saving, alice.key, original)
    assert link.url is not None and link.filename == f"{saved['assetId']}.png"

    shared = await _as(saving, reader.key, detail)
    assert shared.permission == "read" and not shared.writable
    assert shared.asset.vault == "alice@example.com/Library"
    assert (await _as(saving, reader.key, original)).url is not None

    for refused in (detail, original):
        with pytest.raises(NotFoundFailure) as other:
            await _as(saving, bob.key, refused)
        assert other.value.message == "asset not found"
