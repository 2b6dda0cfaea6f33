"""Many callers at once: no pool deadlock, first-come-first-served admission, and ``busy``.

The pool here is deliberately small (2 connections, no overflow), and 4x as many clients
search (text and image), save, get and list at once through the MCP tools.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import anyio
import pytest
from fastmcp import Client

from memory_db import Database
from memory_db.database import create_engine
from memory_tools import MemoryServices, build_memory_server
from memory_tools.capacity import CallAdmission
from memory_tools.errors import Busy
from memory_tools.testing.web import Reply, WebServer
from memory_tools.worker import EmbeddingWorker

from ..pictures import b64, picture
from ..tool_calls import call as _call
from ..tool_calls import error as _error

POOL = 2


@pytest.fixture
async def small_pool(database_url: str) -> AsyncIterator[Database]:
    database = Database(create_engine(database_url, pool_size=POOL, max_overflow=0))
    try:
        yield database
    finally:
        await database.close()


def _limited(services: MemoryServices, *, calls: int, wait: float, key: str) -> MemoryServices:
    settings = services.settings.model_copy(
        update={"memory_max_concurrent_calls": calls, "memory_admission_wait_seconds": wait}
    )
    return replace(services, settings=settings, default_api_key=key)


async def test_four_times_the_pool_of_concurrent_callers_all_finish_without_a_timeout(
    saving: MemoryServices, small_pool: Database, alice: Any
) -> None:
    services = _limited(replace(saving, database=small_pool), calls=POOL, wait=60.0, key=alice.key)
    server = build_memory_server(services)
    async with Client(server) as client:
        for seed in range(4):
            await _call(
                client, "image_asset_save", {"imageBase64": b64(picture(seed)), "title": "harbour"}
            )
    await EmbeddingWorker(services).drain()

    failures: list[str] = []
    calls = 0

    async def one_client(number: int) -> None:
        nonlocal calls
        async with Client(server) as client:
            for round_ in range(3):
                seed = 100 + number * 10 + round_
                for tool, arguments in (
                    ("image_asset_search", {"query": "harbour", "limit": 5}),
                    ("image_asset_search", {"imageBase64": b64(picture(1)), "limit": 5}),
                    ("image_asset_save", {"imageBase64": b64(picture(seed)), "title": "t"}),
                    ("image_asset_list", {"limit": 5}),
                ):
                    result = await client.call_tool(tool, arguments, raise_on_error=False)
                    calls += 1
                    if result.is_error:
                        failures.append(str(getattr(result.content[0], "text", "")))
                        continue
                    if tool == "image_asset_save":
                        asset_id = result.structured_content["assetId"]  # type: ignore[index]
                        await _call(client, "image_asset_get", {"assetId": asset_id})
                        calls += 1

    began = time.monotonic()
    with anyio.fail_after(120):
        async with anyio.create_task_group() as group:
            for number in range(4 * POOL):
                group.start_soon(one_client, number)
    assert failures == []
    assert calls == 4 * POOL * 3 * 5
    admission = services.call_admission
    assert admission.high_water <= POOL  # never more admitted than the pool can serve
    assert admission.queued > 0  # and the others waited their turn instead of failing
    assert admission.refused == 0
    # A stall on the pool would take its 10 s checkout timeout at least once.
    assert time.monotonic() - began < 60


async def _hold(admission: CallAdmission, release: anyio.Event) -> None:
    async with admission.admit():
        await release.wait()


async def test_admission_is_first_come_first_served() -> None:
    admission = CallAdmission(1, wait_seconds=5)
    order: list[int] = []
    release = anyio.Event()

    async def call(number: int) -> None:
        async with admission.admit():
            order.append(number)
            await anyio.sleep(0.01)

    async with anyio.create_task_group() as group:
        group.start_soon(_hold, admission, release)
        await anyio.sleep(0.01)
        for number in range(6):
            group.start_soon(call, number)
            await anyio.sleep(0.01)  # arrive in this order while another call holds the turn
        assert admission.waiting == 6
        release.set()
    assert order == list(range(6))
    assert admission.queued == 6 and admission.high_water == 1


async def test_a_call_that_waits_too_long_is_refused_quickly_as_busy() -> None:
    admission = CallAdmission(1, wait_seconds=0.2)
    release = anyio.Event()
    async with anyio.create_task_group() as group:
        group.start_soon(_hold, admission, release)
        await anyio.sleep(0.01)
        began = time.monotonic()
        with pytest.raises(Busy, match="busy: the server is busy"):
            async with admission.admit():
                pytest.fail("admitted past the limit")
        assert time.monotonic() - began < 2
        release.set()
    assert admission.refused == 1 and admission.running == 0 and admission.waiting == 0
    async with admission.admit():  # the refused wait left no token behind
        assert admission.running == 1


async def test_admission_refuses_nonsense_limits() -> None:
    with pytest.raises(ValueError):
        CallAdmission(0, wait_seconds=1)
    with pytest.raises(ValueError):
        CallAdmission(1, wait_seconds=0)


async def test_a_busy_tool_call_says_so_and_changes_nothing(
    saving: MemoryServices, alice: Any
) -> None:
    services = _limited(saving, calls=1, wait=0.3, key=alice.key)
    async with Client(build_memory_server(services)) as client:
        async with services.call_admission.admit():  # another call holds the only turn
            refused = await _error(client, "image_project_create", {"name": "P"})
            saved = await _error(client, "image_asset_save", {"imageBase64": b64(picture(3))})
        assert refused.startswith("busy: the server is busy"), refused
        assert saved.startswith("busy: "), saved
        listed = await _call(client, "image_project_list", {})
        assert [p["name"] for p in listed["projects"]] == []
        assets = await _call(client, "image_asset_list", {})
        assert assets["items"] == []
        # Once the turn is free, the same call goes through.
        assert (await _call(client, "image_project_create", {"name": "P"}))["name"] == "P"


async def test_a_save_gives_its_turn_away_while_it_downloads(
    saving: MemoryServices, web: WebServer, alice: Any
) -> None:
    """One turn only: a slow download does not make every other caller busy."""
    body = picture(7, size=8)
    web.routes["/slow.png"] = Reply(
        body=body, headers={"Content-Type": "image/png"}, drip_seconds=0.8 / len(body)
    )
    services = _limited(saving, calls=1, wait=0.3, key=alice.key)
    saved: dict[str, Any] = {}

    async def save() -> None:
        async with Client(build_memory_server(services)) as client:
            url = web.url("/slow.png", host="img.test")
            saved.update(await _call(client, "image_asset_save", {"sourceUrl": url}))

    async with anyio.create_task_group() as group:
        group.start_soon(save)
        await anyio.sleep(0.2)  # the save is downloading now
        async with Client(build_memory_server(services)) as client:
            listed = await _call(client, "image_project_list", {})
        assert listed == {"projects": []}
        assert saved == {}  # the download was still running when the list was answered
    assert saved["assetId"].startswith("ast_")
    assert services.call_admission.refused == 0
