"""Many callers at once: no pool deadlock, first-come-first-served admission, and ``busy``.

The pool here is deliberately small (2 connections, no overflow), and 4x as many clients
search (text and image), save, get and list at once through the MCP tools.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio
import pytest
from fastmcp import Client
from structlog.testing import capture_logs

from memory_db import Database
from memory_db.database import create_engine
from memory_tools import MemoryServices, build_memory_server
from memory_tools.capacity import CallAdmission
from memory_tools.errors import Busy
from memory_tools.ingest import MappedResolver, SafeFetcher
from memory_tools.serving.job_worker import job_worker

from ..pictures import b64, picture
from ..tool_calls import call as _call
from ..tool_calls import error as _error
from ..web_routes import HOSTS

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
    await job_worker(services).drain()

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

    # 120 s only guards against a hang (a deadlock that never ends); it measures nothing. A
    # stall on the pool ends in its checkout timeout, which the call reports as an error.
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
        await anyio.wait_all_tasks_blocked()
        assert admission.running == 1
        for number in range(6):
            group.start_soon(call, number)
            # Each arrives, and waits, before the next starts: the order of arrival is fixed.
            await anyio.wait_all_tasks_blocked()
            assert admission.waiting == number + 1
        release.set()
    assert order == list(range(6))
    assert admission.queued == 6 and admission.high_water == 1


async def test_a_call_that_waits_too_long_is_refused_quickly_as_busy() -> None:
    admission = CallAdmission(1, wait_seconds=0.2)
    release = anyio.Event()
    with capture_logs() as logs:
        async with anyio.create_task_group() as group:
            group.start_soon(_hold, admission, release)
            await anyio.wait_all_tasks_blocked()
            assert admission.running == 1
            began = anyio.current_time()
            # The turn is held until after the refusal, so only the admission's own deadline can
            # end this wait; 30 s guards against a wait that ignores it, it measures nothing.
            with (
                anyio.fail_after(30),
                pytest.raises(Busy, match="busy: the server is busy"),
            ):
                async with admission.admit():
                    pytest.fail("admitted past the limit")
            # It waited its whole turn first (a timer never fires early: not a speed assumption).
            assert anyio.current_time() - began >= admission.wait_seconds
            release.set()
    refusals = [line for line in logs if line["event"] == "call_refused_busy"]
    assert [line["waited_seconds"] for line in refusals] == [0.2]
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


class HeldDownload:
    """An image server on 127.0.0.1 that sends half of its body, then holds the rest until
    ``finish`` is set: the download is in flight for exactly as long as the test says."""

    def __init__(self, body: bytes) -> None:
        self.began = threading.Event()
        self.finish = threading.Event()
        held = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                held.began.set()
                # Bounded only so that a failed test does not leave the thread behind.
                held.finish.wait(timeout=120)
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(body[len(body) // 2 :])

            def log_message(self, format: str, *args: object) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> HeldDownload:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.finish.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


async def test_a_save_gives_its_turn_away_while_it_downloads(
    saving: MemoryServices, alice: Any
) -> None:
    """One turn only: a slow download does not make every other caller busy."""
    assert saving.fetcher is not None
    with HeldDownload(picture(7, size=8)) as download:
        # The download stays open until the list is answered: time limits of its own would
        # end it first on a busy machine, so this fetcher's are generous (none is reached).
        policy = replace(
            saving.fetcher.policy,
            allowed_ports=frozenset({download.port}),
            total_timeout=120.0,
            read_timeout=120.0,
        )
        fetcher = SafeFetcher(policy, resolver=MappedResolver(HOSTS))
        services = _limited(replace(saving, fetcher=fetcher), calls=1, wait=5.0, key=alice.key)
        saved: dict[str, Any] = {}

        async def save() -> None:
            async with Client(build_memory_server(services)) as client:
                url = f"http://img.test:{download.port}/slow.png"
                saved.update(await _call(client, "image_asset_save", {"sourceUrl": url}))

        try:
            with anyio.fail_after(60):  # guards against a hang only
                async with anyio.create_task_group() as group:
                    group.start_soon(save)
                    while not download.began.is_set():  # the save is downloading now
                        await anyio.sleep(0.01)
                    # Without giving its turn away the save would hold it until the download
                    # ends, which it does only after this list: the list would be busy.
                    async with Client(build_memory_server(services)) as client:
                        listed = await _call(client, "image_project_list", {})
                    assert listed == {"projects": []}
                    assert saved == {}  # still downloading: it has not been let finish
                    download.finish.set()
        finally:
            await fetcher.aclose()
    assert saved["assetId"].startswith("ast_")
    assert services.call_admission.refused == 0
