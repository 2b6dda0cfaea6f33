"""Serve a FastMCP server over real HTTP on 127.0.0.1 for a test (uvicorn, a free port)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn
from fastmcp import FastMCP


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@asynccontextmanager
async def serve_mcp_http(
    server: FastMCP,
    middleware: list[Any] | None = None,
    *,
    port: int | None = None,
    stateless: bool = False,
) -> AsyncGenerator[str]:
    """Run ``server``'s HTTP app (lifespan on) until the block ends; yield its ``/mcp`` URL.

    ``port``: where to listen (a free one when None, see :func:`free_port`). ``stateless``: no
    MCP sessions, every request on its own, as ``memory-server serve`` runs. Shut down
    gracefully: open streams are closed and the server's lifespan runs to its end.
    """
    port = port or free_port()
    app = server.http_app(path="/mcp", middleware=middleware, stateless_http=stateless)
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_config=None, access_log=False, lifespan="on"
    )
    uv_server = uvicorn.Server(config)
    task = asyncio.create_task(uv_server.serve())
    while not uv_server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        uv_server.should_exit = True
        await task
