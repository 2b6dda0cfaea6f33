"""Base64 saves over HTTP reach ASSET_MAX_BYTES; a larger body gets a JSON-RPC error, not a bare 413.

Against a real `memory-server serve --transport http` subprocess with the default limits.
"""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import pyvips
from fastmcp import Client
from mcp.shared.exceptions import MCPError

from memory_db import MemorySettings
from memory_tools.serving.body_limit import mcp_body_limit
from memory_tools.testing.keys import new_key as make_key

from .test_processes import _env, serve_http

pytestmark = pytest.mark.slow

MiB = 1024 * 1024


def _noise_png(nbytes: int) -> bytes:
    """A PNG of random pixels (incompressible) of about ``nbytes`` bytes."""
    edge = int((nbytes / 3) ** 0.5)
    pixels = np.random.default_rng(7).integers(0, 256, (edge, edge, 3), dtype=np.uint8)
    image = pyvips.Image.new_from_array(pixels, interpretation="srgb")
    return image.pngsave_buffer(compression=0)


@pytest.fixture
def server(
    tmp_path: Path, embedded_data_dir: Path
) -> Iterator[tuple[str, dict[str, str], subprocess.Popen[str]]]:
    env = _env(tmp_path)
    with serve_http(env, capture=False) as (url, process):
        yield url, env, process


async def test_a_15_mib_image_saves_by_base64_over_http_and_larger_bodies_are_explained(
    server: tuple[str, dict[str, str], subprocess.Popen[str]],
) -> None:
    url, env, _process = server
    key = make_key(env, "big@example.com")
    data = _noise_png(15 * MiB)
    assert 15 * MiB <= len(data) < 16 * MiB
    async with Client(url + "/mcp", auth=key) as client:
        saved = await client.call_tool(
            "image_asset_save",
            {"imageBase64": base64.b64encode(data).decode(), "title": "Fifteen MiB of noise"},
        )
        assert saved.structured_content is not None
        assert saved.structured_content["bytes"] == len(data)

    limit = mcp_body_limit(MemorySettings())
    # An MCP client sending more than the limit is told why, and where to go instead.
    oversized = "A" * (limit + 1)
    async with Client(url + "/mcp", auth=key) as client:
        with pytest.raises(MCPError, match=r"limit of \d+ bytes.*POST /uploads"):
            await client.call_tool("image_asset_save", {"imageBase64": oversized})
    headers = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    # Declared too large: refused from the headers, before the body is read.
    too_large = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "x", "params": {}}).encode()
    async with httpx.AsyncClient(timeout=30) as http:
        refused = await http.post(
            url + "/mcp",
            content=too_large + b" " * (limit + 1 - len(too_large)),
            headers=headers,
        )
    assert refused.status_code == 413
    assert refused.headers["content-type"] == "application/json"
    error = refused.json()["error"]
    assert error["code"] == -32600
    assert f"limit of {limit} bytes" in error["message"] and "POST /uploads" in error["message"]
    assert error["data"] == {
        "limitBytes": limit,
        "maxImageBytes": 20 * MiB,
        "uploadRoute": "/uploads",
    }
