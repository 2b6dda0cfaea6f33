"""What a caller and an operator see at the edges, with real server processes."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import pyvips
from fastmcp import Client

from .test_processes import _env, _new_key, _png, serve_http

pytestmark = pytest.mark.slow


def _truncated_jpeg() -> bytes:
    """A JPEG with its second half cut off: libvips warns about it while decoding."""
    whole = pyvips.Image.xyz(256, 256)[0].cast("uchar").jpegsave_buffer(Q=90)
    return whole[: len(whole) // 2]


async def test_json_log_format_gives_json_only_on_stderr(tmp_path: Path) -> None:
    env = _env(tmp_path)  # MEMORY_LOG_FORMAT=json
    with serve_http(env) as (url, process):
        key = _new_key(env, "alice@example.com")
        assert httpx.post(url + "/mcp", json={}).status_code == 401
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
    assert any(
        r["event"] == "command_notice" and "MCP over streamable HTTP" in r["message"]
        for r in records
    )
    assert any(str(r.get("logger", "")).startswith(("uvicorn", "fastmcp")) for r in records)
    # libvips' chatter about the truncated JPEG is debug, so not at the default level
    assert [r for r in records if r.get("logger") == "pyvips"] == []
