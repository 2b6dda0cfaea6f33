"""The aggregate server lists exactly the memory tools of the standalone server, over MCP.

Both servers are asked ``tools/list`` through a fastmcp client; their memory tools are compared
in the wire view (``scraper_mcp.manifest.memory_tool_differences``: names, titles, descriptions,
input and output schemas, annotations; ``_meta.fastmcp`` dropped; sorted by name), for each
choice of toolsets. The comparison is shown to fail on an aggregate with a drifted memory tool.
"""

from __future__ import annotations

import base64
import copy
import hashlib
from dataclasses import replace
from pathlib import Path

import pytest
import pyvips
from fastmcp import Client

from memory_db import Database, MemorySettings
from memory_db.embedding import LocalEmbedder
from memory_db.storage import InMemoryAssetObjectStore, UrlSigner
from memory_tools import MemoryServices, build_memory_server
from memory_tools.mcp.toolsets import MEMORY, MEMORY_READ, ToolSelection
from memory_tools.operations import admin
from scraper_mcp import SCRAPER, build_aggregate_server
from scraper_mcp.manifest import listed_tools, listing_services, memory_tool_differences


def _services(database: Database, tmp_path: Path, key: str | None = None) -> MemoryServices:
    return MemoryServices(
        database=database,
        store=InMemoryAssetObjectStore(UrlSigner(hashlib.sha256(b"x").digest())),
        settings=MemorySettings(memory_data_dir=tmp_path / "data"),
        default_api_key=key,
    )


# The same choice of memory tools on both servers (the aggregate adds its scraper tools).
SELECTIONS = {
    "default": (ToolSelection((MEMORY,)), ToolSelection((MEMORY, SCRAPER))),
    "memory-read": (ToolSelection((MEMORY_READ,)), ToolSelection((MEMORY_READ, SCRAPER))),
    "read-only": (
        ToolSelection((MEMORY,), read_only=True),
        ToolSelection((MEMORY, SCRAPER), read_only=True),
    ),
}


@pytest.mark.parametrize("selection", SELECTIONS)
async def test_the_aggregate_lists_the_memory_tools_as_the_memory_server_does(
    selection: str,
) -> None:
    memory_tools, aggregate_tools = SELECTIONS[selection]
    services = listing_services()
    try:
        memory = await listed_tools(build_memory_server(services, tools=memory_tools))
        aggregate = await listed_tools(build_aggregate_server(services, tools=aggregate_tools))
    finally:
        await services.database.close()
    assert memory_tool_differences(memory, aggregate) == []
    assert {tool["name"] for tool in memory} == {spec.name for spec in memory_tools.offered()}
    assert {"image_asset_search", "image_vault_list"} <= {tool["name"] for tool in memory}


async def _drifted(drift: str) -> list[str]:
    """The differences reported for an aggregate server built with one memory tool drifted."""
    services = listing_services()
    try:
        memory = await listed_tools(build_memory_server(services))
        aggregate = build_aggregate_server(services)
        tool = await aggregate.get_tool("image_asset_get")
        assert tool is not None and tool.annotations is not None
        if drift == "annotation":
            hints = tool.annotations.model_copy(update={"idempotent_hint": False})
            aggregate.add_tool(tool.model_copy(update={"annotations": hints}))
        elif drift == "description":
            aggregate.add_tool(tool.model_copy(update={"description": "Get an image."}))
        elif drift == "input schema":
            schema = copy.deepcopy(tool.parameters)
            schema["properties"]["assetId"]["maxLength"] = 65
            aggregate.add_tool(tool.model_copy(update={"parameters": schema}))
        elif drift == "missing":
            aggregate = build_aggregate_server(
                services, tools=ToolSelection((MEMORY, SCRAPER), read_only=True)
            )
        else:
            aggregate.add_tool(tool.model_copy(update={"name": "image_asset_get_v2"}))
        return memory_tool_differences(memory, await listed_tools(aggregate))
    finally:
        await services.database.close()


@pytest.mark.parametrize(
    ("drift", "reported"),
    [
        ("annotation", "image_asset_get: annotations.idempotentHint: true != false"),
        ("description", 'image_asset_get: description: "One image you may read'),
        ("input schema", "image_asset_get: inputSchema.properties.assetId.maxLength: 64 != 65"),
        ("missing", "image_asset_save: listed by the memory server only"),
        ("extra", "image_asset_get_v2: an image_ tool the memory server does not list"),
    ],
)
async def test_the_comparison_reports_a_drifted_memory_tool(drift: str, reported: str) -> None:
    # The parity test above can fail: an aggregate whose memory tool drifts is reported.
    found = await _drifted(drift)
    assert any(line.startswith(reported) for line in found), found


async def test_aggregate_server_runs_the_same_workflows(database: Database, tmp_path: Path) -> None:
    await admin.create_identity(database, "alice@example.com", 10**9)
    key = (await admin.create_key(database, "alice@example.com", ["read", "write"])).secret
    async with Client(build_aggregate_server(_services(database, tmp_path, key))) as client:
        created = await client.call_tool("image_project_create", {"name": "From aggregate"})
        assert created.structured_content["vault"] == "Library"
    async with Client(build_memory_server(_services(database, tmp_path, key))) as client:
        listed = await client.call_tool("image_project_list", {})
    assert [p["name"] for p in listed.structured_content["projects"]] == ["From aggregate"]


async def test_the_aggregate_serves_the_asset_resources(database: Database, tmp_path: Path) -> None:
    """The asset resources come with the memory tools (memory_tools.mcp.resources): the same
    template, listing and read on the aggregate server as on the memory server."""
    await admin.create_identity(database, "alice@example.com", 10**9)
    key = (await admin.create_key(database, "alice@example.com", ["read", "write"])).secret
    png = pyvips.Image.black(32, 24).pngsave_buffer()
    services = replace(_services(database, tmp_path, key), embedder=LocalEmbedder())
    async with Client(build_aggregate_server(services)) as client:
        saved = await client.call_tool(
            "image_asset_save", {"imageBase64": base64.b64encode(png).decode()}
        )
        uri = f"image-memory://assets/{saved.structured_content['assetId']}"
        templates = await client.list_resource_templates()
        listed = await client.list_resources()
        read = await client.read_resource_mcp(uri)
        capabilities = client.server_capabilities
    assert [t.uri_template for t in templates] == ["image-memory://assets/{assetId}"]
    assert [str(r.uri) for r in listed] == [uri]
    assert [c.mime_type for c in read.contents] == ["image/webp", "application/json"]
    assert capabilities is not None and capabilities.resources is not None
    assert capabilities.resources.subscribe is True
    # A selection without image_asset_get (the scraper tools alone) offers no asset resources.
    scraper_only = build_aggregate_server(services, tools=ToolSelection((SCRAPER,)))
    async with Client(scraper_only) as client:
        assert await client.list_resource_templates() == []
