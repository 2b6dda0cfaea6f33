"""A direct upload's completion decodes through the server's decode admission."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import httpx
import pyvips

from memory_db.embedding import LocalEmbedder
from memory_tools import MemoryServices
from memory_tools.serving.app import build_http_server


async def test_completing_an_upload_is_admitted_against_the_decode_budget(
    services: MemoryServices, serve_http: Callable[..., Any], make_key: Callable[..., Any]
) -> None:
    uploading = replace(services, embedder=LocalEmbedder())
    admission = uploading.decode_admission
    key = await make_key("decoder@example.com")
    auth = {"Authorization": f"Bearer {key}"}
    data = pyvips.Image.xyz(30, 20)[0].cast("uchar").pngsave_buffer()
    async with serve_http(build_http_server(uploading)) as mcp_url, httpx.AsyncClient() as http:
        base = mcp_url.removesuffix("/mcp")
        started = await http.post(
            f"{base}/uploads",
            json={"contentType": "image/png", "contentLength": len(data)},
            headers=auth,
        )
        assert started.status_code == 201, started.text
        ticket = started.json()
        signed = httpx.URL(ticket["url"])
        put = await http.request(
            ticket["method"],
            httpx.URL(base).join(signed.raw_path.decode()),
            content=data,
            headers=ticket["headers"],
        )
        assert put.status_code == 200, put.text
        assert admission.admitted == 0  # nothing is decoded before completion
        done = await http.post(
            str(httpx.URL(base).join(ticket["completeUrl"])), json={}, headers=auth
        )
        assert done.status_code == 200, done.text
    assert admission.admitted == 1 and admission.high_water == 30 * 20
    assert admission.in_flight == 0
