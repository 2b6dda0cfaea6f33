"""`scraper-mcp-server` over stdio and HTTP serves the memory tools as `memory-server` does.

It embeds what it saves in-process like `memory-server serve` (a save becomes ``ready``), and
takes the same serve flags: ``--no-worker``, ``--processes``, ``--toolsets``, ``--read-only``.
"""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import pyvips
from fastmcp import Client
from fastmcp.client.transports import StdioTransport
from fastmcp.exceptions import ToolError

from memory_db.database import create_engine
from memory_db.testing import PostgresForTests
from memory_db.unit_of_work import Database
from memory_tools.operations import admin

pytestmark = pytest.mark.slow

AGGREGATE = [sys.executable, "-m", "aggregate_server"]


def _png_base64(seed: int) -> str:
    xyz = pyvips.Image.xyz(64, 48)
    red = ((xyz[0] * (seed + 2)) % 256).cast("uchar")
    green = ((xyz[1] * 5 + seed) % 256).cast("uchar")
    png = red.bandjoin([green, red]).copy(interpretation="srgb").pngsave_buffer()
    return base64.b64encode(png).decode("ascii")


async def _save_and_wait(client: Client[Any], seed: int) -> str:
    """Save an image through ``client``; its embedding state after waiting up to 30 s."""
    saved = await client.call_tool("image_asset_save", {"imageBase64": _png_base64(seed)})
    asset = saved.structured_content["assetId"]
    got = await client.call_tool("image_asset_get", {"assetId": asset, "waitSeconds": 30})
    return got.structured_content["embeddingStatus"]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASSET_", "MEMORY_", "JINA_"))}
    env.update(MEMORY_DATA_DIR=str(tmp_path / "data"), **extra)
    return env


async def _database_with_key(postgres: PostgresForTests) -> tuple[str, str]:
    """A fresh cloned database and an API key of alice's in it: ``(name, key)``."""
    name = await postgres.clone()
    database = Database(create_engine(postgres.url(name), pool_size=1))
    try:
        await admin.create_identity(database, "alice@example.com", 10**9)
        key = (await admin.create_key(database, "alice@example.com", ["read", "write"])).secret
    finally:
        await database.close()
    return name, key


async def test_stdio_aggregate_server(postgres: PostgresForTests, tmp_path: Path) -> None:
    name = await postgres.clone()
    url = postgres.url(name)
    database = Database(create_engine(url, pool_size=1))
    try:
        await admin.create_identity(database, "alice@example.com", 10**9)
        key = (await admin.create_key(database, "alice@example.com", ["read", "write"])).secret
    finally:
        await database.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASSET_", "MEMORY_", "JINA_"))}
    env.update(MEMORY_DATA_DIR=str(tmp_path / "data"), MEMORY_DATABASE_URL=url, MEMORY_API_KEY=key)
    try:
        transport = StdioTransport(
            sys.executable,
            ["-m", "aggregate_server", "serve", "--transport", "stdio"],
            env=env,
            keep_alive=False,
        )
        async with Client(transport) as client:
            names = {tool.name for tool in await client.list_tools()}
            assert {
                "image_project_create",
                "image_project_list",
                "image_folder_create",
                "image_folder_list",
            } <= names
            created = await client.call_tool("image_project_create", {"name": "Aggregate"})
            assert created.structured_content["name"] == "Aggregate"
            # The in-process worker embeds what the aggregate saves.
            assert await _save_and_wait(client, 1) == "ready"
        missing_key = {k: v for k, v in env.items() if k != "MEMORY_API_KEY"}
        result = subprocess.run(
            [sys.executable, "-m", "aggregate_server", "serve", "--transport", "stdio"],
            env=missing_key,
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        assert result.returncode == 2 and "MEMORY_API_KEY" in result.stderr
    finally:
        await postgres.drop(name)


@contextmanager
def _serving_http(
    env: dict[str, str], port: int, stderr: list[str], *options: str
) -> Iterator[subprocess.Popen[str]]:
    """`scraper-mcp-server serve --transport http` on ``port``, up and live; then SIGTERM.

    What the server wrote to stderr is appended to ``stderr`` once it has stopped.
    """
    process = subprocess.Popen(
        [
            *AGGREGATE,
            *("serve", "--transport", "http", "--host", "127.0.0.1", "--port", str(port)),
            *options,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90
        while True:
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            assert time.monotonic() < deadline, "the aggregate server did not start in 90 s"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        yield process
    finally:
        process.terminate()
        process.wait(timeout=30)
        assert process.stderr is not None
        with process.stderr:
            stderr.append(process.stderr.read())


async def test_http_aggregate_server_serves_what_memory_server_serves(
    postgres: PostgresForTests, tmp_path: Path
) -> None:
    name, key = await _database_with_key(postgres)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    env = _env(tmp_path, MEMORY_DATABASE_URL=postgres.url(name))
    output: list[str] = []
    try:
        with _serving_http(env, port, output) as server:
            # The plain routes of memory_tools.serving beside /mcp: readiness, direct uploads.
            async with httpx.AsyncClient(base_url=url, timeout=10) as http:
                ready = await http.get("/healthz/ready")
                assert ready.status_code == 200 and ready.json()["status"] == "ok"
                refused = await http.post("/uploads", json={})
                assert refused.status_code == 401
                assert refused.headers["www-authenticate"] == "Bearer"
            async with Client(url + "/mcp", auth=key) as client:
                names = {tool.name for tool in await client.list_tools()}
                assert {"image_project_create", "image_asset_save", "image_asset_search"} <= names
                created = await client.call_tool("image_project_create", {"name": "Over HTTP"})
                assert created.structured_content["name"] == "Over HTTP"
                assert await _save_and_wait(client, 2) == "ready"
    finally:
        await postgres.drop(name)
    stderr = "".join(output)
    assert server.returncode == 0, stderr
    # The same start-up banner as memory-server's, under the aggregate's name.
    assert f"mcp-scraper: MCP over streamable HTTP at {url}/mcp" in stderr
    assert "tools: toolsets memory,scraper" in stderr and "read-only" not in stderr
    assert "data directory:" in stderr and "create-key" in stderr


def test_a_taken_port_is_one_line_and_status_2(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [*AGGREGATE, "serve", "--transport", "http", "--port", str(port)],
            env=_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines == [lines[0]] and f"127.0.0.1:{port} is already in use" in lines[0]
    # Refused before anything was started: no database was created for nothing.
    assert not (tmp_path / "data" / "postgres").exists()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_no_worker_leaves_what_it_saves_pending(
    postgres: PostgresForTests, tmp_path: Path
) -> None:
    name, key = await _database_with_key(postgres)
    env = _env(tmp_path, MEMORY_DATABASE_URL=postgres.url(name), MEMORY_API_KEY=key)
    try:
        transport = StdioTransport(
            sys.executable,
            ["-m", "aggregate_server", "serve", "--transport", "stdio", "--no-worker"],
            env=env,
            keep_alive=False,
        )
        async with Client(transport) as client:
            saved = await client.call_tool("image_asset_save", {"imageBase64": _png_base64(3)})
            asset = saved.structured_content["assetId"]
            got = await client.call_tool("image_asset_get", {"assetId": asset, "waitSeconds": 2})
            assert got.structured_content["embeddingStatus"] == "pending"
    finally:
        await postgres.drop(name)


async def test_read_only_processes_offer_read_only_tools_and_refuse_uploads(
    postgres: PostgresForTests, tmp_path: Path
) -> None:
    from memory_tools.mcp.toolsets import MEMORY, ToolSelection

    name, key = await _database_with_key(postgres)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = _env(tmp_path, MEMORY_DATABASE_URL=postgres.url(name))
    options = ("--processes", "2", "--toolsets", "memory,scraper", "--read-only")
    output: list[str] = []
    expected = {spec.name for spec in ToolSelection((MEMORY,), read_only=True).offered()}
    try:
        with _serving_http(env, port, output, *options) as server:
            # Each server child was started with the parent's selection.
            children = subprocess.run(
                ["ps", "-ww", "--ppid", str(server.pid), "-o", "args="],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.splitlines()
            serving = [line for line in children if " serve " in line]
            assert len(serving) == 2, children
            assert all(line.endswith("--toolsets memory,scraper --read-only") for line in serving)
            # Fresh connections, so both children answer some of them.
            for _ in range(4):
                async with Client(url + "/mcp", auth=key) as client:
                    names = {tool.name for tool in await client.list_tools()}
                    assert names == expected and "image_asset_search" in names
            # A tool that is not offered cannot be called on any child.
            async with Client(url + "/mcp", auth=key) as client:
                with pytest.raises(ToolError, match="Unknown tool"):
                    await client.call_tool("image_project_create", {"name": "Refused"})
            async with httpx.AsyncClient(base_url=url, timeout=10) as http:
                refused = await http.post(
                    "/uploads",
                    json={"contentType": "image/png", "contentLength": 10},
                    headers={"Authorization": f"Bearer {key}"},
                )
            assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    finally:
        await postgres.drop(name)
    stderr = "".join(output)
    assert server.returncode == 0, stderr
    assert "tools: toolsets memory,scraper (read-only: only read-only tools)" in stderr
