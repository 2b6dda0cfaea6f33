"""Bulk actions over MCP against a real server: two owners, two official SDK clients.

A real `memory-server serve --transport http` subprocess; alice's and bob's sessions of the
official MCP SDK client over streamable HTTP (which validate every structured answer against
the tool's listed output schema). Alice moves forty of her images in one call, with progress;
while that call runs, bob deletes two of his images in one call that also names one of alice's.
Each id is authorised alone: bob's two go to the trash, alice's id answers him ``not_found``
exactly like an id that never existed, and all forty of alice's move, none deleted.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from memory_tools.testing.keys import new_key

from .test_processes import _env, _png, serve_http

pytestmark = pytest.mark.slow

NEVER_EXISTED = {"code": "not_found", "message": "asset not found"}


@pytest.fixture
def server(tmp_path: Path, embedded_data_dir: Path) -> Iterator[tuple[str, dict[str, str]]]:
    env = _env(tmp_path)
    with serve_http(env, capture=False) as (url, _process):
        yield url, env


@asynccontextmanager
async def _session(url: str, secret: str) -> AsyncIterator[ClientSession]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {secret}"}, timeout=120) as http,
        streamable_http_client(url + "/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        # Listing first: the SDK then validates each answer against the tool's output schema.
        await session.list_tools()
        yield session


async def _answer(session: ClientSession, tool: str, arguments: dict[str, Any]) -> Any:
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def _save(session: ClientSession, seed: int) -> str:
    image = base64.b64encode(_png(seed)).decode()
    return (await _answer(session, "image_asset_save", {"imageBase64": image}))["assetId"]


async def test_two_owners_bulk_at_once_each_id_authorised_alone(
    server: tuple[str, dict[str, str]],
) -> None:
    url, env = server
    alice_key = new_key(env, "alice@example.com")
    bob_key = new_key(env, "bob@example.com")
    async with _session(url, alice_key) as alice, _session(url, bob_key) as bob:
        alices = [await _save(alice, seed) for seed in range(1, 41)]
        bobs = [await _save(bob, seed) for seed in (101, 102)]
        project = (await _answer(alice, "image_project_create", {"name": "Trips"}))["projectId"]

        reports: list[tuple[float, float | None]] = []
        moving = anyio.Event()
        answers: dict[str, Any] = {}

        async def progress(progress: float, total: float | None, message: str | None) -> None:
            reports.append((progress, total))
            moving.set()

        async def move_forty() -> None:
            result = await alice.call_tool(
                "image_asset_move",
                {"assetIds": alices, "projectId": project},
                progress_callback=progress,
            )
            assert not result.is_error, result.content
            answers["alice"] = result.structured_content

        async def delete_with_one_of_alices() -> None:
            await moving.wait()  # alice's bulk call is under way
            answers["bob"] = await _answer(
                bob, "image_asset_delete", {"assetIds": [bobs[0], alices[0], bobs[1]]}
            )

        with anyio.fail_after(300):  # forty moves and three deletes; only a hang reaches this
            async with anyio.create_task_group() as group:
                group.start_soon(move_forty)
                group.start_soon(delete_with_one_of_alices)

        moved = answers["alice"]
        assert (moved["succeeded"], moved["failed"]) == (40, 0)
        assert [item["assetId"] for item in moved["items"]] == alices
        assert all(item["ok"] and item["projectId"] == project for item in moved["items"])
        assert reports == [(n, 40) for n in range(1, 41)]

        deleted = answers["bob"]
        assert [item["ok"] for item in deleted["items"]] == [True, False, True]
        assert deleted["items"][1] == {"assetId": alices[0], "ok": False, "error": NEVER_EXISTED}
        assert (deleted["succeeded"], deleted["failed"]) == (2, 1)
        missing = await _answer(bob, "image_asset_delete", {"assetIds": ["ast_" + "z" * 26]})
        assert missing["items"][0]["error"] == deleted["items"][1]["error"]

        # alice's images: all forty in the project, none deleted; bob's two are in the trash.
        listed = await _answer(
            alice, "image_asset_list", {"vault": "Library", "projectId": project, "limit": 100}
        )
        assert sorted(item["assetId"] for item in listed["items"]) == sorted(alices)
        for asset in bobs:
            gone = await bob.call_tool("image_asset_get", {"assetId": asset})
            assert gone.is_error and "not_found" in gone.content[0].text  # type: ignore[union-attr]

        # A single id still gets the single answer on the same tool.
        single = await _answer(alice, "image_asset_move", {"assetId": alices[0]})
        assert single["assetId"] == alices[0] and single["projectId"] is None
        assert "items" not in single
