"""Fixtures: services on a fresh database with a local object store, and people with keys."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memory_db import Database, MemorySettings
from memory_db.storage import LocalAssetObjectStore, UrlSigner
from memory_tools import MemoryServices
from memory_tools.operations import admin
from memory_tools.testing.mcp_http import serve_mcp_http


@pytest.fixture
def services(database: Database, tmp_path: Path) -> MemoryServices:
    settings = MemorySettings(asset_ocr="off", memory_data_dir=tmp_path / "data")
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
    return serve_mcp_http
