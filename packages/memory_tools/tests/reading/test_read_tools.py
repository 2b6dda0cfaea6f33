"""``image_asset_get`` and ``image_asset_list`` over MCP: state, previews, filters, cursors,
and what other callers may (not) see."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from fastmcp import Client
from sqlalchemy import text

from memory_db.storage import LocalAssetObjectStore
from memory_tools import MemoryServices
from memory_tools.operations import admin
from memory_tools.serving.job_worker import job_worker
from memory_tools.wire import ANSWER_ITEMS_BUDGET, WireModel, fitting

from ..pictures import picture
from ..tool_calls import error as _error


async def _save(client: Client[Any], seed: int, **fields: Any) -> dict[str, Any]:
    arguments = {"imageBase64": base64.b64encode(picture(seed)).decode(), **fields}
    result = (await client.call_tool("image_asset_save", arguments)).structured_content
    assert result is not None
    return result


async def test_get_shows_embedding_state_and_a_working_preview(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices
) -> None:
    async with client_as(alice.key) as client:
        saved = await _save(client, 1, title="A gradient", tags=["Demo"])
        pending = (
            await client.call_tool("image_asset_get", {"assetId": saved["assetId"]})
        ).structured_content
        assert pending is not None
        assert pending["embeddingStatus"] == "pending" and pending["preview"] is None
        assert {r["representation"]: r["status"] for r in pending["representations"]} == {
            "fused": "queued",
            "visual": "queued",
        }
        await job_worker(saving).drain()
        ready = (
            await client.call_tool(
                "image_asset_get", {"assetId": saved["assetId"], "includePreview": True}
            )
        ).structured_content
    assert ready is not None
    assert (ready["status"], ready["embeddingStatus"]) == ("ready", "ready")
    assert ready["tags"] == ["demo"] and ready["title"] == "A gradient"
    assert {r["status"] for r in ready["representations"]} == {"done"}
    preview = ready["preview"]
    expires = datetime.fromisoformat(preview["expiresAt"])
    assert timedelta(seconds=200) < expires - datetime.now(UTC) <= timedelta(seconds=300)
    # The link is the local store's signed route; it verifies and names the preview only.
    store = saving.store
    assert isinstance(store, LocalAssetObjectStore)
    url = httpx.URL(preview["url"])
    key = url.path.removeprefix("/objects/")
    assert key.endswith("/preview.webp")
    store.verify_signed_get(key, url.params["expires"], url.params["signature"])
    # Nothing persistent holds a signed link (docs/design.md#signed-links).
    async with saving.database.engine.connect() as conn:
        for table in (
            "mem_assets",
            "mem_asset_objects",
            "mem_provenance",
            "mem_asset_upload_reservations",
        ):
            found = (
                await conn.execute(
                    text(f"SELECT count(*) FROM {table} t WHERE t::text LIKE '%signature=%'")
                )
            ).scalar_one()
            assert found == 0, table


async def test_other_owners_assets_are_not_found_like_missing_ones(
    client_as: Callable[[str], Client[Any]], alice: Any, bob: Any
) -> None:
    async with client_as(alice.key) as client:
        saved = await _save(client, 2)
    async with client_as(bob.key) as client:
        theirs = await _error(client, "image_asset_get", {"assetId": saved["assetId"]})
        missing = await _error(client, "image_asset_get", {"assetId": "ast_" + "a" * 26})
        malformed = await _error(client, "image_asset_get", {"assetId": "nope"})
        listed = (await client.call_tool("image_asset_list", {})).structured_content
    assert theirs == missing == malformed == "not_found: asset not found"
    assert listed == {"items": [], "nextCursor": None}


async def test_a_shared_reader_sees_the_owners_assets_under_the_shared_handle(
    client_as: Callable[[str], Client[Any]], alice: Any, make_person: Any, database: Any
) -> None:
    reader = await make_person("reader@example.com", scopes=("read",))
    await admin.grant(database, "alice@example.com", "Library", "reader@example.com", "read")
    async with client_as(alice.key) as client:
        saved = await _save(client, 3)
    async with client_as(reader.key) as client:
        got = (
            await client.call_tool("image_asset_get", {"assetId": saved["assetId"]})
        ).structured_content
        listed = (await client.call_tool("image_asset_list", {})).structured_content
    assert got is not None and got["vault"] == "alice@example.com/Library"
    assert listed is not None and [i["assetId"] for i in listed["items"]] == [saved["assetId"]]


async def test_list_pages_newest_or_oldest_first_with_a_stable_cursor(
    client_as: Callable[[str], Client[Any]], alice: Any
) -> None:
    async with client_as(alice.key) as client:
        ids = [(await _save(client, 10 + n))["assetId"] for n in range(7)]
        seen: list[str] = []
        cursor = None
        while True:
            arguments: dict[str, Any] = {"limit": 3}
            if cursor:
                arguments["cursor"] = cursor
            page = (await client.call_tool("image_asset_list", arguments)).structured_content
            assert page is not None
            seen += [item["assetId"] for item in page["items"]]
            if len(seen) == 3:
                await _save(client, 99)  # a newer asset must not shift later pages
            cursor = page["nextCursor"]
            if cursor is None:
                break
        oldest = (
            await client.call_tool("image_asset_list", {"order": "oldest", "limit": 100})
        ).structured_content
        wrong = await _error(
            client, "image_asset_list", {"order": "oldest", "cursor": page_cursor(ids)}
        )
    assert seen == list(reversed(ids))
    assert oldest is not None and [i["assetId"] for i in oldest["items"]][:7] == ids
    assert wrong.startswith("invalid_input: cursor:")


def page_cursor(ids: list[str]) -> str:
    from memory_tools.workflows.assets import encode_cursor

    return encode_cursor(datetime.now(UTC), ids[0], "newest")


async def test_list_filters(client_as: Callable[[str], Client[Any]], alice: Any, web: Any) -> None:
    from memory_tools.testing.web import Reply

    web.routes["/p.png"] = Reply(body=picture(30))
    async with client_as(alice.key) as client:
        project = (
            await client.call_tool("image_project_create", {"name": "Trips"})
        ).structured_content
        assert project is not None
        top = (
            await client.call_tool(
                "image_folder_create", {"projectId": project["projectId"], "name": "2026"}
            )
        ).structured_content
        assert top is not None
        sub = (
            await client.call_tool(
                "image_folder_create",
                {"projectId": project["projectId"], "name": "June", "parentId": top["folderId"]},
            )
        ).structured_content
        assert sub is not None
        in_top = await _save(
            client,
            31,
            projectId=project["projectId"],
            folderId=top["folderId"],
            tags=["beach", "sun"],
        )
        in_sub = await _save(
            client, 32, projectId=project["projectId"], folderId=sub["folderId"], tags=["beach"]
        )
        unfiled = await _save(client, 33)
        fetched = (
            await client.call_tool(
                "image_asset_save", {"sourceUrl": web.url("/p.png", host="img.test")}
            )
        ).structured_content
        assert fetched is not None

        async def ids(**arguments: Any) -> set[str]:
            page = (await client.call_tool("image_asset_list", arguments)).structured_content
            assert page is not None
            return {item["assetId"] for item in page["items"]}

        assert await ids(vault="Library", projectId=project["projectId"]) == {
            in_top["assetId"],
            in_sub["assetId"],
        }
        assert await ids(
            vault="Library", projectId=project["projectId"], folderId=top["folderId"]
        ) == {in_top["assetId"]}
        # A project id names its vault: the same answers without "vault".
        assert await ids(projectId=project["projectId"]) == {in_top["assetId"], in_sub["assetId"]}
        assert await ids(projectId=project["projectId"], folderId=top["folderId"]) == {
            in_top["assetId"]
        }
        assert await ids(
            vault="Library",
            projectId=project["projectId"],
            folderId=top["folderId"],
            includeSubfolders=True,
        ) == {in_top["assetId"], in_sub["assetId"]}
        assert await ids(tags=["beach", "SUN"]) == {in_top["assetId"]}
        assert await ids(untagged=True) == {unfiled["assetId"], fetched["assetId"]}
        assert await ids(sourceKinds=["external_url"]) == {fetched["assetId"]}
        assert await ids(sourceHost="IMG.test") == {fetched["assetId"]}
        assert await ids(mimeTypes=["image/jpeg"]) == set()
        assert len(await ids(mimeTypes=["image/png"])) == 4
        future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
        assert await ids(createdAfter=future) == set()
        assert unfiled["assetId"] in await ids(createdBefore=future)
        for arguments, fragment in [
            ({"limit": 0}, "limit"),
            ({"limit": 101}, "limit"),
            ({"sourceKinds": ["ftp"]}, "sourceKinds"),
            ({"mimeTypes": ["image/svg+xml"]}, "mimeTypes"),
            ({"vault": "Library", "folderId": top["folderId"]}, "projectId"),
            ({"includeSubfolders": True}, "folderId"),
            ({"untagged": True, "tags": ["beach"]}, "untagged: cannot be combined with tags"),
            ({"cursor": "not-a-cursor"}, "cursor"),
            ({"createdAfter": "2026-01-01T00:00:00"}, "createdAfter"),
        ]:
            message = await _error(client, "image_asset_list", arguments)
            assert message.startswith("invalid_input:") and fragment in message, (
                arguments,
                message,
            )
        missing = await _error(
            client, "image_asset_list", {"vault": "Library", "projectId": "apr_" + "b" * 26}
        )
        assert missing == "not_found: project not found"


async def test_refused_calls_are_not_logged_as_server_errors(
    client_as: Callable[[str], Client[Any]], bob: Any
) -> None:
    """A refusal the caller can act on is not a server error: nothing at ERROR for it."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    framework = logging.getLogger("fastmcp")
    handler, level = Keep(logging.DEBUG), framework.level
    framework.addHandler(handler)
    framework.setLevel(logging.DEBUG)
    try:
        async with client_as(bob.key) as client:
            missing = await _error(client, "image_asset_get", {"assetId": "ast_" + "a" * 26})
            typo = await _error(client, "image_asset_get", {"asset_id": "x"})
    finally:
        framework.removeHandler(handler)
        framework.setLevel(level)
    assert missing.startswith("not_found: ") and typo.startswith("invalid_input: ")
    calls = [r for r in records if "Error calling tool" in r.getMessage()]
    assert calls, "the framework reports the refused calls (at debug)"
    assert all(r.levelno < logging.WARNING for r in calls), [r.levelname for r in calls]


async def test_a_page_of_images_at_every_bound_fits_one_answer(
    client_as: Callable[[str], Client[Any]], alice: Any
) -> None:
    """Items of one answer stay within ANSWER_ITEMS_BUDGET; the page ends early, none is lost.

    Every field at its bound (4-byte characters) makes a page of 100 far larger than the 1 MiB
    one server-sent event may carry to the official SDK client.
    """
    fox = "\U0001f98a"
    async with client_as(alice.key) as client:
        saved = {
            (
                await _save(
                    client,
                    seed,
                    title=fox * 240,
                    description=fox * 4000,
                    altText=fox * 2000,
                    tags=[fox * 60 + f"{seed:02d}{n:02d}" for n in range(32)],
                )
            )["assetId"]
            for seed in range(50)
        }
        seen: list[str] = []
        pages = 0
        cursor: str | None = None
        while True:
            arguments: dict[str, Any] = {"limit": 100}
            if cursor:
                arguments["cursor"] = cursor
            page = (await client.call_tool("image_asset_list", arguments)).structured_content
            assert page is not None
            assert len(json.dumps(page, ensure_ascii=False).encode()) < ANSWER_ITEMS_BUDGET + 4096
            seen += [item["assetId"] for item in page["items"]]
            pages += 1
            cursor = page["nextCursor"]
            if cursor is None:
                break
    assert pages > 1  # the budget cut the page
    assert len(seen) == len(set(seen)) and set(seen) == saved


def test_fitting_keeps_at_least_one_item() -> None:
    class Item(WireModel):
        text: str

    items = [Item(text="x" * 100), Item(text="y" * 100), Item(text="z" * 100)]
    assert fitting(items, budget=250) == 2
    assert fitting(items, budget=10) == 1  # one item always goes, whatever its size
    assert fitting(items) == 3
