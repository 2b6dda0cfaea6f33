"""`scraper-mcp-server` over stdio serves the memory tools."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastmcp import Client
from fastmcp.client.transports import StdioTransport

from memory_db.database import create_engine
from memory_db.testing import PostgresForTests
from memory_db.unit_of_work import Database
from memory_tools import admin

pytestmark = pytest.mark.slow


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
