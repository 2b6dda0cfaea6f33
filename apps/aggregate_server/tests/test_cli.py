"""`scraper-mcp-server` over stdio and HTTP serves the memory tools as `memory-server` does."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from fastmcp import Client
from fastmcp.client.transports import StdioTransport

from memory_db.database import create_engine
from memory_db.testing import PostgresForTests
from memory_db.unit_of_work import Database
from memory_tools import admin

pytestmark = pytest.mark.slow

AGGREGATE = [sys.executable, "-m", "aggregate_server"]


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
    env: dict[str, str], port: int, stderr: list[str]
) -> Iterator[subprocess.Popen[str]]:
    """`scraper-mcp-server serve --transport http` on ``port``, up and live; then SIGTERM.

    What the server wrote to stderr is appended to ``stderr`` once it has stopped.
    """
    process = subprocess.Popen(
        [*AGGREGATE, "serve", "--transport", "http", "--host", "127.0.0.1", "--port", str(port)],
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
    finally:
        await postgres.drop(name)
    stderr = "".join(output)
    assert server.returncode == 0, stderr
    # The same start-up banner as memory-server's, under the aggregate's name.
    assert f"mcp-scraper: MCP over streamable HTTP at {url}/mcp" in stderr
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
