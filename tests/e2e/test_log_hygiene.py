"""A whole session against a real server process, its log read line by line afterwards.

``memory-server serve --transport http`` (JSON logs, its in-process worker embedding) is driven
with the official MCP SDK client: a save by base64 and one by upload, a get with signed links
(fetched, and one tampered), a search, a delete, and a call with a bad key. The log must carry
request, asset, namespace, job, model, task and representation fields, and none of: image bytes,
base64 runs, signed-link signatures, the API key, or the owner's e-mail address.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import time
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx
import pytest

from memory_tools.testing.keys import new_key as make_key

from .test_processes import SERVER, _env, _free_port, _png

pytestmark = pytest.mark.slow

OWNER = "hygiene.owner@example.com"
# Base64 of a PNG, a JPEG or a WebP, and runs of the base64 alphabet with both letter cases
# (hex digests and ids are one case): stricter than the redaction step's own rule.
_IMAGE_BASE64 = re.compile(r"iVBORw0KGgo|/9j/|UklGR")
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/]{80,}")
_SIGNED_QUERY = re.compile(r"(?i)[?&](signature|expires|x-amz-signature|x-amz-credential)=")


def _mixed_case(run: str) -> bool:
    return any(c.islower() for c in run) and any(c.isupper() for c in run)


@asynccontextmanager
async def _session(url: str, key: str) -> AsyncGenerator[Any]:
    """An official MCP SDK client session over streamable HTTP with a bearer key."""
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http2,
        streamable_http_client(url, http_client=http2) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def _call(session: Any, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, result.content
    return dict(result.structured_content)


async def _ready(session: Any, asset_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        got = await _call(
            session,
            "image_asset_get",
            {"assetId": asset_id, "includePreview": True, "includeOriginal": True},
        )
        if got["embeddingStatus"] == "ready":
            return got
        await anyio.sleep(0.2)
    pytest.fail("the in-process worker did not embed the image within 60 s")


async def _session_of_every_kind(base: str, key: str) -> None:
    async with _session(base + "/mcp", key) as session, httpx.AsyncClient(timeout=30) as http:
        by_base64 = await _call(
            session,
            "image_asset_save",
            {"imageBase64": base64.b64encode(_png(31)).decode(), "title": "Lighthouse"},
        )
        data = _png(32)
        auth = {"Authorization": f"Bearer {key}"}
        started = await http.post(
            base + "/uploads",
            json={"contentType": "image/png", "contentLength": len(data)},
            headers=auth,
        )
        assert started.status_code == 201, started.text
        ticket = started.json()
        put = await http.put(ticket["url"], content=data, headers=ticket["headers"])
        assert put.status_code == 200, put.text
        completed = await http.post(ticket["completeUrl"], json={}, headers=auth)
        assert completed.status_code == 200, completed.text
        for asset_id in (by_base64["assetId"], completed.json()["assetId"]):
            got = await _ready(session, asset_id)
        link = got["original"]["url"]
        assert (await http.get(link)).status_code == 200
        parts = urlsplit(link)
        tampered = f"{base}{parts.path}?{parts.query.replace('signature=', 'signature=0')}"
        assert (await http.get(tampered)).status_code == 403
        found = await _call(session, "image_asset_search", {"query": "lighthouse"})
        assert found["results"]
        await _call(session, "image_asset_delete", {"assetId": by_base64["assetId"]})
        bad = await http.post(base + "/mcp", json={}, headers={"Authorization": f"Bearer {key}x"})
        assert bad.status_code == 401


def _start_server(env: dict[str, str], port: int, log_path: Path) -> subprocess.Popen[bytes]:
    """``serve --transport http`` on ``port`` with its output in ``log_path``, once healthy."""
    with log_path.open("wb") as sink:
        server = subprocess.Popen(
            [*SERVER, "serve", "--transport", "http", "--port", str(port)],
            env=env,
            stdout=sink,
            stderr=sink,
        )
    deadline = time.monotonic() + 90
    while True:
        assert server.poll() is None, log_path.read_text()[-3000:]
        assert time.monotonic() < deadline, "the server did not start within 90 s"
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            time.sleep(0.2)


@pytest.mark.usefixtures("embedded_data_dir")  # a migrated database in tmp_path/data
async def test_a_whole_session_logs_no_bytes_base64_links_keys_or_owners(tmp_path: Path) -> None:
    env = _env(tmp_path)
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "server.log"
    server = _start_server(env, port, log_path)
    try:
        key = make_key(env, OWNER)
        await _session_of_every_kind(base, key)
    finally:
        server.terminate()
        server.wait(timeout=60)
    text = log_path.read_text()
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    assert len(lines) > 10

    assert key not in text and key[:12] not in text
    assert OWNER not in text and "@example.com" not in text
    assert not _SIGNED_QUERY.search(text)
    assert not _IMAGE_BASE64.search(text)
    runs = [run for run in _BASE64_RUN.findall(text) if _mixed_case(run)]
    assert not runs, runs[:3]
    assert "\\x89PNG" not in text and "JFIF" not in text

    # What the log does carry: who and what, by opaque ids.
    def having(*fields: str) -> list[dict[str, Any]]:
        return [line for line in lines if all(line.get(f) for f in fields)]

    assert having("request_id", "namespace_id", "asset_id")  # asset_saved, in its request
    assert having("request_id", "asset_id")  # asset_deleted
    assert having("model", "task")  # the worker's batch
    assert all(line["request_id"].startswith("req_") for line in having("request_id"))
