"""The aggregate server carries exactly the memory tools of the standalone server."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from fastmcp import Client

from memory_db import Database, MemorySettings
from memory_db.database import create_engine
from memory_db.storage import InMemoryAssetObjectStore, UrlSigner
from memory_tools import MemoryServices, admin, build_memory_server
from scraper_mcp import build_aggregate_server


def _services(database: Database, tmp_path: Path, key: str | None = None) -> MemoryServices:
    return MemoryServices(
        database=database,
        store=InMemoryAssetObjectStore(UrlSigner(hashlib.sha256(b"x").digest())),
        settings=MemorySettings(memory_data_dir=tmp_path / "data"),
        default_api_key=key,
    )


def _manifest(tools: list[Any]) -> list[dict[str, Any]]:
    manifest = []
    for tool in sorted(tools, key=lambda t: t.name):
        wire = tool.model_dump(mode="json", by_alias=True, exclude_none=True)
        meta = wire.get("_meta") or {}
        meta.pop("fastmcp", None)
        if not meta:
            wire.pop("_meta", None)
        manifest.append(wire)
    return manifest


async def test_manifests_match(tmp_path: Path) -> None:
    # Listing tools never touches the database, so an unconnected engine is enough here.
    database = Database(create_engine("postgresql+asyncpg://nobody@127.0.0.1:9/none"))
    services = _services(database, tmp_path)
    async with Client(build_memory_server(services)) as standalone:
        memory_tools = await standalone.list_tools()
    async with Client(build_aggregate_server(services)) as aggregate:
        aggregate_tools = await aggregate.list_tools()
    await database.close()
    memory_manifest = _manifest(memory_tools)
    aggregate_memory = [t for t in _manifest(aggregate_tools) if t["name"].startswith("image_")]
    assert memory_manifest == aggregate_memory
    assert {t["name"] for t in memory_manifest} >= {"image_project_create", "image_folder_list"}


async def test_aggregate_server_runs_the_same_workflows(database: Database, tmp_path: Path) -> None:
    await admin.create_identity(database, "alice@example.com", 10**9)
    key = (await admin.create_key(database, "alice@example.com", ["read", "write"])).secret
    async with Client(build_aggregate_server(_services(database, tmp_path, key))) as client:
        created = await client.call_tool("image_project_create", {"name": "From aggregate"})
        assert created.structured_content["vault"] == "Library"
    async with Client(build_memory_server(_services(database, tmp_path, key))) as client:
        listed = await client.call_tool("image_project_list", {})
    assert [p["name"] for p in listed.structured_content["projects"]] == ["From aggregate"]
