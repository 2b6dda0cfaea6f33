"""Fixtures: a local site on 127.0.0.1 reached as ``site.test`` through the fetcher's test
resolver allowance (the default policy never allows loopback), and aggregate-server services
on a fresh database with a local object store and the local embedder."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client

from memory_db import Database
from memory_tools import MemoryServices
from memory_tools.operations import admin
from memory_tools.testing.mcp_http import serve_mcp_http
from memory_tools.testing.web import WebServer, serve_web
from scraper_mcp import build_aggregate_server

from .site_services import site_services


@pytest.fixture
def site() -> Iterator[WebServer]:
    with serve_web() as server:
        yield server


@pytest.fixture
async def scraper_services(
    database: Database, tmp_path: Path, site: WebServer
) -> AsyncIterator[MemoryServices]:
    services = site_services(database, tmp_path, site.port)
    yield services
    assert services.fetcher is not None
    await services.fetcher.aclose()


@pytest.fixture
def make_key(database: Database) -> Callable[..., Any]:
    async def make(email: str, scopes: tuple[str, ...] = ("read", "write")) -> str:
        with contextlib.suppress(Exception):
            await admin.create_identity(database, email, 10**9)
        return (await admin.create_key(database, email, scopes)).secret

    return make


@pytest.fixture
def aggregate_client(scraper_services: MemoryServices) -> Callable[[str], Client[Any]]:
    """An in-process MCP client of the aggregate server acting with ``key`` (as over stdio)."""
    return lambda key: Client(
        build_aggregate_server(replace(scraper_services, default_api_key=key))
    )


@pytest.fixture
def serve_http() -> Callable[..., Any]:
    """Serve a FastMCP server with a real uvicorn on 127.0.0.1 (a free port), then stop it."""
    return serve_mcp_http
