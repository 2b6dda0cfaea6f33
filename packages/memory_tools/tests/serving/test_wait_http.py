"""Clients that go away while ``image_asset_get`` waits (``waitSeconds``) over HTTP leave nothing
behind on the server: no waiter, no listening connection, no pooled connection, no admission
turn. A cancelled call ends at once; a client killed without a word ends at its deadline."""

from __future__ import annotations

import base64
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import anyio
import pytest
from fastmcp import Client
from sqlalchemy.pool import QueuePool

from memory_db.embedding import LocalEmbedder
from memory_tools import MemoryServices, build_memory_server
from memory_tools.serving import build_http_server

from ..pictures import picture


async def _until(condition: Callable[[], bool], within: float = 10.0) -> None:
    with anyio.fail_after(within):
        while not condition():
            await anyio.sleep(0.02)


# A client in a process of its own: killing it closes its connections as a crash would.
CLIENT = """
import asyncio, sys
import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

async def main(url, key, asset_id, wait_seconds, cancel_after):
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        call = session.call_tool("image_asset_get", {"assetId": asset_id, "waitSeconds": float(wait_seconds)})
        if cancel_after == "never":
            await call
            return
        try:
            await asyncio.wait_for(call, float(cancel_after))  # cancels the call at the time
        except TimeoutError:
            print("cancelled", flush=True)
        await asyncio.sleep(30)  # the session stays open: only the call was cancelled

asyncio.run(main(*sys.argv[1:]))
"""


@pytest.mark.slow
# Without sessions, as `memory-server serve` runs (every request stands alone; a call that asked
# for no progress is answered as JSON, or as a stream once it runs late: json_answers), and with
# them.
@pytest.mark.parametrize("stateless", [True, False], ids=["stateless", "sessions"])
async def test_a_disconnecting_client_leaks_no_waiter_or_connection(
    saving: MemoryServices, make_person: Callable[..., Any], serve_http: Any, stateless: bool
) -> None:
    services = replace(saving, embedder=LocalEmbedder())  # no worker runs: the asset stays pending
    person = await make_person("leaver@example.com")
    watch = services.database.asset_states
    pool = services.database.engine.pool
    assert isinstance(pool, QueuePool)
    async with Client(build_memory_server(replace(services, default_api_key=person.key))) as c:
        saved = await c.call_tool(
            "image_asset_save", {"imageBase64": base64.b64encode(picture(77)).decode()}
        )
    assert saved.structured_content is not None
    asset_id = saved.structured_content["assetId"]
    async with serve_http(build_http_server(services), stateless=stateless) as url:

        def client(wait_seconds: float, cancel_after: str) -> subprocess.Popen[bytes]:
            arguments = [url, person.key, asset_id, str(wait_seconds), cancel_after]
            return subprocess.Popen([sys.executable, "-c", CLIENT, *arguments])

        # Cancelled calls (MCP notifications/cancelled, which the SDK sends when the caller's
        # task is cancelled) end at once, their sessions still open.
        cancelling = [client(25, "4") for _ in range(4)]
        vanishing: list[subprocess.Popen[bytes]] = []
        try:
            await _until(lambda: watch.waiters == 4, within=30)
            await _until(lambda: pool.checkedout() == 1)  # the one listener, shared
            # Waiting calls hold no turn (a waiter counted here may still be on its read
            # after subscribing, which holds its turn for that read only).
            await _until(lambda: services.call_admission.running == 0)
            await _until(lambda: watch.waiters == 0 and not watch.listening, within=15)
            await _until(lambda: pool.checkedout() == 0, within=5)
            assert all(c.poll() is None for c in cancelling)  # cancelled, not disconnected
            # A client killed mid-wait sends nothing. With sessions its call outlives the
            # request and ends at its own deadline (6 s), holding only its place on the shared
            # listener meanwhile; without them the call is the request's, and ends with it.
            vanishing = [client(6, "never") for _ in range(2)]
            await _until(lambda: watch.waiters == 2, within=30)
            started = anyio.current_time()
            for c in vanishing:
                c.kill()
            if not stateless:
                await _until(lambda: pool.checkedout() == 1)
                await _until(lambda: services.call_admission.running == 0)
            await _until(lambda: watch.waiters == 0 and not watch.listening, within=15)
            await _until(lambda: pool.checkedout() == 0, within=5)
            assert anyio.current_time() - started < (5 if stateless else 10)
            assert services.call_admission.running == 0
        finally:
            for c in [*cancelling, *vanishing]:
                c.kill()
                c.wait(timeout=10)
