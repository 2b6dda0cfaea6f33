"""Liveness, readiness, and what HTTP callers get while the database is down."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from fastmcp import Client
from structlog.testing import capture_logs

from memory_db import Database
from memory_db.database import create_engine
from memory_db.ids import new_id
from memory_db.storage import (
    LocalAssetObjectStore,
    UrlSigner,
    build_object_key,
    build_staging_key,
)
from memory_tools import MemoryServices
from memory_tools.serving import build_http_server


@pytest.fixture(autouse=True)
def _log_events_kept() -> Iterator[None]:
    """Every call during the outage logs a warning with its traceback: keep it unrendered."""
    with capture_logs():
        yield


@pytest.fixture
async def database_down(tmp_path: Path) -> AsyncIterator[Database]:
    """A database whose server is gone: no server listens in this socket directory."""
    database = Database(create_engine(f"postgresql+asyncpg://postgres@/memory?host={tmp_path}"))
    try:
        yield database
    finally:
        await database.close()


async def test_liveness_and_readiness_of_a_healthy_server(
    services: MemoryServices, serve_http: Any
) -> None:
    async with serve_http(build_http_server(services)) as url:
        base = url.removesuffix("/mcp")
        async with httpx.AsyncClient(base_url=base) as http:
            live = await http.get("/healthz")
            assert live.status_code == 200 and live.json() == {"status": "ok"}
            ready = await http.get("/healthz/ready")
            assert ready.status_code == 200
            assert ready.json() == {
                "status": "ok",
                "checks": {"database": "ok", "objectStore": "ok"},
            }


async def test_readiness_names_a_broken_object_store(
    services: MemoryServices, serve_http: Any, tmp_path: Path
) -> None:
    (tmp_path / "not-a-dir").write_bytes(b"x")
    store = LocalAssetObjectStore(tmp_path / "not-a-dir", UrlSigner(b"k" * 32), "http://x")
    server = build_http_server(replace(services, store=store))
    async with serve_http(server) as url, httpx.AsyncClient(base_url=url[: -len("/mcp")]) as http:
        ready = await http.get("/healthz/ready")
        assert (await http.get("/healthz")).status_code == 200
    assert ready.status_code == 503
    assert ready.json()["failing"] == ["objectStore"]
    assert ready.json()["checks"] == {"database": "ok", "objectStore": "unavailable"}


async def test_while_the_database_is_down_callers_get_unavailable(
    services: MemoryServices,
    database_down: Database,
    serve_http: Any,
    make_key: Callable[..., Any],
) -> None:
    key = await make_key("alice@example.com")  # made while the database was up
    down = replace(services, database=database_down)
    async with serve_http(build_http_server(down)) as url:
        base = url.removesuffix("/mcp")
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            assert (await http.get("/healthz")).status_code == 200  # the process is alive
            ready = await http.get("/healthz/ready")
            assert ready.status_code == 503
            assert ready.json()["failing"] == ["database"]
            assert ready.json()["checks"]["objectStore"] == "ok"

            auth = {"Authorization": f"Bearer {key}"}
            started = await http.post(
                "/uploads", json={"contentType": "image/png", "contentLength": 10}, headers=auth
            )
            assert started.status_code == 503
            assert started.headers["content-type"] == "application/json"
            assert started.json()["error"]["code"] == "unavailable"
            completed = await http.post("/uploads/aup_x/complete", json={}, headers=auth)
            assert completed.status_code == 503
            assert completed.json()["error"]["code"] == "unavailable"

            # Signed object links: the link is checked, then the database says what to serve
            # (GET) or whether the upload is still open (PUT); both answer a plain 503.
            store = down.store
            get_url = await store.create_signed_get_url(
                build_object_key("production", new_id("ans"), new_id("aob"), "preview"), 60
            )
            got = await http.get(urlsplit(get_url).path + "?" + urlsplit(get_url).query)
            assert got.status_code == 503 and "retry" in got.text
            staging = build_staging_key("production", new_id("ans"), new_id("aur"), "png")
            put = await store.create_signed_put_url(
                staging, content_type="image/png", content_length=4, expires_in=60
            )
            sent = await http.put(
                urlsplit(put.url).path + "?" + urlsplit(put.url).query,
                content=b"abcd",
                headers=dict(put.headers),
            )
            assert sent.status_code == 503

        # Over MCP the key cannot be checked either; the call still reaches the tool, which
        # answers the retryable tool error instead of an HTTP failure.
        async with Client(url, auth=key) as client:
            result = await client.call_tool("image_project_list", {}, raise_on_error=False)
            assert result.is_error
            text = str(getattr(result.content[0], "text", ""))
            assert text.startswith("unavailable: "), text
