"""What a caller and an operator see at the edges, with real server processes."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import pyvips
from fastmcp import Client
from fastmcp.client.transports import StdioTransport

from memory_tools.testing.keys import new_key as make_key

from .test_processes import SERVER, _env, _png, serve_http

pytestmark = pytest.mark.slow


def _truncated_jpeg() -> bytes:
    """A JPEG with its second half cut off: libvips warns about it while decoding."""
    whole = pyvips.Image.xyz(256, 256)[0].cast("uchar").jpegsave_buffer(Q=90)
    return whole[: len(whole) // 2]


@pytest.mark.usefixtures("embedded_data_dir")  # a migrated database in tmp_path/data
async def test_json_log_format_gives_json_only_on_stderr(tmp_path: Path) -> None:
    env = _env(tmp_path)  # MEMORY_LOG_FORMAT=json
    with serve_http(env) as (url, process):
        key = make_key(env, "alice@example.com")
        refused = httpx.post(url + "/mcp", json={}, headers={"Authorization": "Bearer mk_x"})
        assert refused.status_code == 401
        assert refused.json()["error"]["data"]["code"] == "unauthenticated"
        assert refused.headers["www-authenticate"].startswith('Bearer error="invalid_token"')
        async with Client(url + "/mcp", auth=key) as client:
            await client.call_tool(
                "image_asset_save", {"imageBase64": base64.b64encode(_png(3)).decode()}
            )
            for arguments in (
                {"imageBase64": base64.b64encode(_truncated_jpeg()).decode()},
                {"image_base64": "AAAA"},
                {"sourceUrl": "http://127.0.0.1/x.png"},
            ):
                await client.call_tool("image_asset_save", arguments, raise_on_error=False)
            await client.call_tool("image_asset_search", {"query": "gradient"})
        process.terminate()
        assert process.wait(timeout=30) == 0
        _out, err = process.communicate()
    lines = [line for line in err.splitlines() if line.strip()]
    not_json: list[str] = []
    records: list[dict[str, Any]] = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:
            not_json.append(line)
    assert not_json == []
    assert all({"event", "level", "timestamp"} <= set(record) for record in records)
    # the start-up notice is an event too, and the framework's lines are in the pipeline
    notices = [
        r["message"]
        for r in records
        if r["event"] == "command_notice" and "MCP over streamable HTTP" in r["message"]
    ]
    assert len(notices) == 1
    # ... and it survives redaction intact: its instructions can still be followed.
    assert "[redacted]" not in notices[0] and "id:" not in notices[0]
    assert "make key OWNER=<your e-mail address>" in notices[0]
    assert any(str(r.get("logger", "")).startswith(("uvicorn", "fastmcp")) for r in records)
    # libvips' chatter about the truncated JPEG is debug, so not at the default level
    assert [r for r in records if r.get("logger") == "pyvips"] == []


async def _saved_and_ready(client: Client[Any]) -> dict[str, Any]:
    saved = await client.call_tool(
        "image_asset_save", {"imageBase64": base64.b64encode(_png(5)).decode()}
    )
    asset = saved.structured_content["assetId"]  # type: ignore[index]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = await client.call_tool(
            "image_asset_get", {"assetId": asset, "includePreview": True}
        )
        data: dict[str, Any] = state.structured_content  # type: ignore[assignment]
        if data["embeddingStatus"] == "ready":
            return data
        await anyio.sleep(0.2)
    pytest.fail("the saved image did not become ready within 60 s")


def _stdio(env: dict[str, str], key: str, errlog: Path) -> StdioTransport:
    return StdioTransport(
        SERVER[0],
        [*SERVER[1:], "serve", "--transport", "stdio"],
        env={**env, "MEMORY_API_KEY": key},
        keep_alive=False,
        log_file=errlog,
    )


async def test_stdio_previews_are_served_on_an_announced_loopback_port(
    tmp_path: Path, database_url: str
) -> None:
    env = _env(tmp_path, MEMORY_DATABASE_URL=database_url)  # migrated (the template's clone)
    key = make_key(env, "alice@example.com")
    errlog = tmp_path / "stderr.log"
    async with Client(_stdio(env, key, errlog)) as client:
        state = await _saved_and_ready(client)
        preview = state["preview"]
        # Before: http://127.0.0.1:8765/objects/..., where nothing listens.
        assert not preview["url"].startswith("http://127.0.0.1:8765/")
        async with httpx.AsyncClient(timeout=10) as http:
            opened = await http.get(preview["url"])
            assert opened.status_code == 200 and opened.headers["content-type"] == "image/webp"
            assert opened.content[:4] == b"RIFF" and opened.content[8:12] == b"WEBP"
            assert (await http.get(preview["url"].split("?")[0])).status_code == 403
            assert (await http.get(httpx.URL(preview["url"]).join("/mcp"))).status_code == 404
        base = str(httpx.URL(preview["url"]).copy_with(path="/", query=None)).rstrip("/")
        found = await client.call_tool(
            "image_asset_search",
            {"imageBase64": base64.b64encode(_png(5)).decode(), "includePreview": True},
        )
        hits = found.structured_content["results"]  # type: ignore[index]
        assert hits and all(hit["preview"]["url"].startswith(base + "/objects/") for hit in hits)
    notices = [json.loads(line) for line in errlog.read_text().splitlines() if line.strip()]
    announced = [r["message"] for r in notices if r["event"] == "command_notice"]
    assert f"image-memory: preview links served at {base}" in announced
    # the port is closed with the server
    with pytest.raises(httpx.ConnectError):
        httpx.get(preview["url"], timeout=5)


async def test_stdio_previews_say_why_when_no_link_can_be_served(
    tmp_path: Path, database_url: str
) -> None:
    env = _env(tmp_path, MEMORY_DATABASE_URL=database_url, MEMORY_STDIO_LINKS="off")
    key = make_key(env, "alice@example.com")
    async with Client(_stdio(env, key, tmp_path / "stderr.log")) as client:
        state = await _saved_and_ready(client)
    preview = state["preview"]
    assert preview["url"] is None and preview["expiresAt"] is None
    assert "MEMORY_STDIO_LINKS=off" in preview["unavailable"]
    assert "MEMORY_PUBLIC_BASE_URL" in preview["unavailable"]


@pytest.mark.usefixtures("embedded_data_dir")  # a migrated database in tmp_path/data
async def test_stdio_previews_use_a_running_http_server_when_configured(tmp_path: Path) -> None:
    env = _env(tmp_path)  # the embedded default: both processes share its data directory
    with serve_http(env) as (url, _process):
        key = make_key(env, "alice@example.com")
        stdio_env = {**env, "MEMORY_PUBLIC_BASE_URL": url}
        async with Client(_stdio(stdio_env, key, tmp_path / "stderr.log")) as client:
            state = await _saved_and_ready(client)
        assert state["preview"]["url"].startswith(url + "/objects/")
        async with httpx.AsyncClient(timeout=10) as http:
            opened = await http.get(state["preview"]["url"])
        assert opened.status_code == 200 and opened.content[8:12] == b"WEBP"
