"""Fixtures: services on a fresh database with a local object store, and people with keys."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memory_db import Database, MemorySettings
from memory_db.storage import LocalAssetObjectStore, UrlSigner
from memory_tools import MemoryServices, admin


@pytest.fixture
def services(database: Database, tmp_path: Path) -> MemoryServices:
    settings = MemorySettings(memory_data_dir=tmp_path / "data")
    store = LocalAssetObjectStore(tmp_path / "objects", UrlSigner(b"k" * 32), "http://testserver")
    return MemoryServices(database=database, store=store, settings=settings)


@pytest.fixture
def make_key(database: Database) -> Callable[..., Any]:
    async def make(email: str, scopes: tuple[str, ...] = ("read", "write")) -> str:
        with contextlib.suppress(Exception):
            await admin.create_identity(database, email, 10**9)
        return (await admin.create_key(database, email, scopes)).secret

    return make


@pytest.fixture
def serve_http() -> Callable[..., Any]:
    """Serve a FastMCP server with a real uvicorn on 127.0.0.1, shut down gracefully."""
    import asyncio
    import contextlib
    import socket

    import uvicorn

    @contextlib.asynccontextmanager
    async def serve(server: Any, middleware: list[Any] | None = None) -> Any:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        app = server.http_app(path="/mcp", middleware=middleware)
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

    return serve
