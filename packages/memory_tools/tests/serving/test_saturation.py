"""A saturated server: every HTTP entry point answers its documented retryable refusal at once.

One call holds the only admission turn (``MEMORY_MAX_CONCURRENT_CALLS=1``); callers then wait
``MEMORY_ADMISSION_WAIT_SECONDS`` and get ``busy``, with nothing changed, instead of a stall.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx
from fastmcp import Client

from memory_db.ids import new_id
from memory_db.storage import build_object_key, build_staging_key
from memory_tools import MemoryServices
from memory_tools.serving import build_http_server


def _saturated(services: MemoryServices) -> MemoryServices:
    settings = services.settings.model_copy(
        update={"memory_max_concurrent_calls": 1, "memory_admission_wait_seconds": 0.3}
    )
    return replace(services, settings=settings)


async def test_while_every_turn_is_taken_http_callers_get_busy_and_nothing_changes(
    services: MemoryServices, serve_http: Any, make_key: Callable[..., Any]
) -> None:
    key = await make_key("alice@example.com")
    busy = _saturated(services)
    auth = {"Authorization": f"Bearer {key}"}
    release = anyio.Event()

    async def hold_the_only_turn() -> None:
        async with busy.call_admission.admit():
            await release.wait()

    async with serve_http(build_http_server(busy)) as url, anyio.create_task_group() as group:
        group.start_soon(hold_the_only_turn)
        await anyio.wait_all_tasks_blocked()
        assert busy.call_admission.running == 1
        base = url.removesuffix("/mcp")
        # The turn is held throughout, so only the admission's own wait (0.3 s) can end these
        # calls; the client's 30 s timeout is a hang guard.
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            started = await http.post(
                "/uploads", json={"contentType": "image/png", "contentLength": 10}, headers=auth
            )
            assert started.status_code == 503
            assert started.headers["content-type"] == "application/json"
            assert started.headers["retry-after"] == "1"
            assert started.json()["error"]["code"] == "busy"
            completed = await http.post("/uploads/aup_x/complete", json={}, headers=auth)
            assert completed.status_code == 503
            assert completed.json()["error"]["code"] == "busy"

            store = busy.store
            get_url = await store.create_signed_get_url(
                build_object_key("production", new_id("ans"), new_id("aob"), "preview"), 60
            )
            got = await http.get(urlsplit(get_url).path + "?" + urlsplit(get_url).query)
            assert got.status_code == 503 and got.headers["retry-after"] == "1"
            assert "busy" in got.text
            staging = build_staging_key("production", new_id("ans"), new_id("aur"), "png")
            put = await store.create_signed_put_url(
                staging, content_type="image/png", content_length=4, expires_in=60
            )
            sent = await http.put(
                urlsplit(put.url).path + "?" + urlsplit(put.url).query,
                content=b"abcd",
                headers=dict(put.headers),
            )
            assert sent.status_code == 503 and sent.headers["retry-after"] == "1"
            # Liveness and readiness are not calls: they answer while the server is saturated.
            assert (await http.get("/healthz")).status_code == 200
            assert (await http.get("/healthz/ready")).status_code == 200
            # Each refusal came from the admission's wait, counted there.
            assert busy.call_admission.refused == 4

        async with Client(url, auth=key) as client:
            result = await client.call_tool(
                "image_project_create", {"name": "P"}, raise_on_error=False
            )
            assert result.is_error
            text = str(getattr(result.content[0], "text", ""))
            assert text.startswith("busy: "), text
            release.set()
            # The turn is free again: the same calls go through, and nothing was made before.
            listed = await client.call_tool("image_project_list", {})
            assert listed.structured_content == {"projects": []}
            made = await client.call_tool("image_project_create", {"name": "P"})
            assert made.structured_content is not None
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            started = await http.post(
                "/uploads", json={"contentType": "image/png", "contentLength": 10}, headers=auth
            )
            assert started.status_code == 201
