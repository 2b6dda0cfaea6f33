"""The ``/mcp`` body limit in process: declared and chunked bodies, and the SDK's own limit."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import anyio
import httpx
import pytest
import pyvips
from fastmcp import Client
from starlette.types import Message, Receive, Scope, Send

from memory_db.embedding import LocalEmbedder
from memory_tools import MemoryServices
from memory_tools.serving import body_limit
from memory_tools.serving.app import build_http_server
from memory_tools.serving.body_limit import HEADROOM_BYTES, mcp_body_limit, mcp_middleware

MiB = 1024 * 1024
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def _noise_png(nbytes: int) -> bytes:
    edge = int((nbytes / 3) ** 0.5)
    noise = pyvips.Image.gaussnoise(edge, edge, mean=128, sigma=60).cast("uchar")
    return noise.bandjoin([noise.rot180(), noise.flip("horizontal")]).pngsave_buffer(compression=0)


async def _chunks(body: bytes, size: int = 64 * 1024) -> AsyncIterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


async def test_bodies_over_the_limit_get_a_json_rpc_error_declared_or_chunked(
    services: MemoryServices, serve_http: Callable[..., Any], make_key: Callable[..., Any]
) -> None:
    small = replace(
        services,
        embedder=LocalEmbedder(),
        settings=services.settings.model_copy(update={"asset_max_bytes": 100_000}),
    )
    limit = mcp_body_limit(small.settings)
    assert limit == 133_336 + HEADROOM_BYTES
    key = await make_key("limit@example.com", ("read", "write"))
    headers = {**HEADERS, "Authorization": f"Bearer {key}"}
    server = build_http_server(small)
    async with serve_http(server, mcp_middleware(small.settings)) as mcp_url:
        async with httpx.AsyncClient(timeout=30) as http:
            for content in (b"x" * (limit + 1), _chunks(b"x" * (limit + 1))):
                refused = await http.post(mcp_url, content=content, headers=headers)
                assert refused.status_code == 413
                error = refused.json()["error"]
                assert f"limit of {limit} bytes" in error["message"]
                assert error["data"]["uploadRoute"] == "/uploads"
        # A chunked body within the limit reaches the MCP server unchanged.
        async with httpx.AsyncClient(timeout=30) as http:
            request = (
                b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": '
                b'{"protocolVersion": "2025-06-18", "capabilities": {}, '
                b'"clientInfo": {"name": "t", "version": "1"}}}'
            )
            answered = await http.post(mcp_url, content=_chunks(request, 16), headers=headers)
            assert answered.status_code == 200, answered.text
            assert '"serverInfo"' in answered.text


async def test_the_sdk_limit_of_4_mib_is_lifted_to_what_the_schema_accepts(
    services: MemoryServices, serve_http: Callable[..., Any], make_key: Callable[..., Any]
) -> None:
    saving = replace(services, embedder=LocalEmbedder())
    key = await make_key("big@example.com", ("read", "write"))
    data = _noise_png(5 * MiB)
    assert len(data) > 5 * MiB  # as base64 well over the SDK's 4 MiB
    server = build_http_server(saving)
    middleware = mcp_middleware(saving.settings)
    async with (
        serve_http(server, middleware) as mcp_url,
        Client(mcp_url, auth=key) as client,
    ):
        saved = await client.call_tool(
            "image_asset_save", {"imageBase64": base64.b64encode(data).decode()}
        )
    assert saved.structured_content is not None
    assert saved.structured_content["bytes"] == len(data)


async def test_large_bodies_wait_for_the_body_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """Six 3 MiB saves at once with room for 7 MiB: two are handled at a time, never three."""
    monkeypatch.setattr(body_limit, "_lift_sdk_limit", lambda _app, _limit: None)
    size = 3 * MiB
    in_flight = peak = 0

    async def app(_scope: Scope, receive: Receive, send: Send) -> None:
        nonlocal in_flight, peak
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        in_flight += len(body)
        peak = max(peak, in_flight)
        await anyio.sleep(0.05)
        in_flight -= len(body)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    limiter = body_limit.McpBodyLimit(app, limit=4 * MiB, max_image_bytes=size, budget=7 * MiB)
    statuses: list[int] = []

    async def one() -> None:
        scope: Scope = {
            "type": "http",
            "path": "/mcp",
            "method": "POST",
            "headers": [(b"content-length", str(size).encode())],
        }
        delivered = False

        async def receive() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": b"x" * size, "more_body": False}
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                statuses.append(message["status"])

        await limiter(scope, receive, send)

    async with anyio.create_task_group() as group:
        for _ in range(6):
            group.start_soon(one)
    assert statuses == [200] * 6
    assert peak == 2 * size
    assert limiter.admission.queued >= 1 and limiter.admission.in_flight == 0
