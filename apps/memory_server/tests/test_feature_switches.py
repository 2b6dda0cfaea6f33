"""ASSET_FEATURE_ENABLED=false stops the direct-upload routes too, not only the MCP tools."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import httpx
from sqlalchemy import text

from memory_db import new_id
from memory_db.embedding import LocalEmbedder
from memory_db.storage import build_object_key
from memory_tools import MemoryServices
from memory_tools.serving.app import build_http_server

from .test_uploads import _png


async def _counts(services: MemoryServices) -> tuple[int, int]:
    async with services.database.engine.connect() as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT (SELECT count(*) FROM mem_assets),"
                    " (SELECT count(*) FROM mem_asset_upload_reservations WHERE status = 'active')"
                )
            )
        ).one()
    return int(row[0]), int(row[1])


async def test_memory_switched_off_refuses_upload_start_and_completion(
    services: MemoryServices, serve_http: Callable[..., Any], make_key: Callable[..., Any]
) -> None:
    on = replace(services, embedder=LocalEmbedder())
    off = replace(on, settings=on.settings.model_copy(update={"asset_feature_enabled": False}))
    key = await make_key("switch@example.com")
    auth = {"Authorization": f"Bearer {key}"}
    data = _png(3)
    start = {"contentType": "image/png", "contentLength": len(data)}
    # An upload begun while image memory was on (the bytes arrive, not yet completed) ...
    async with serve_http(build_http_server(on)) as mcp_url, httpx.AsyncClient() as http:
        base = mcp_url.removesuffix("/mcp")
        ticket = (await http.post(f"{base}/uploads", json=start, headers=auth)).json()
        signed = httpx.URL(ticket["url"])
        put = await http.put(
            httpx.URL(base).join(signed.raw_path.decode()),
            content=data,
            headers=ticket["headers"],
        )
        assert put.status_code == 200, put.text
    assert await _counts(services) == (0, 1)
    # ... and after a restart with ASSET_FEATURE_ENABLED=false, neither route saves.
    async with serve_http(build_http_server(off)) as mcp_url, httpx.AsyncClient() as http:
        base = mcp_url.removesuffix("/mcp")
        refused_start = await http.post(f"{base}/uploads", json=start, headers=auth)
        refused_complete = await http.post(
            f"{base}/uploads/{ticket['uploadId']}/complete", json={}, headers=auth
        )
        # The signed links are refused too: the still-open upload link, and any read link.
        refused_put = await http.put(
            httpx.URL(base).join(signed.raw_path.decode()),
            content=_png(4)[: len(data)].ljust(len(data), b"\0"),
            headers=ticket["headers"],
        )
        key = build_object_key("production", new_id("ans"), new_id("aob"), "preview")
        read_link = httpx.URL(await services.store.create_signed_get_url(key, 60))
        refused_get = await http.get(httpx.URL(base).join(read_link.raw_path.decode()))
    for refused in (refused_start, refused_complete):
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"] == {
            "code": "feature_disabled",
            "message": "image memory is switched off (ASSET_FEATURE_ENABLED=false)",
        }
    for refused in (refused_put, refused_get):
        assert refused.status_code == 503, refused.text
        assert "ASSET_FEATURE_ENABLED=false" in refused.text
    assert await _counts(services) == (0, 1)
