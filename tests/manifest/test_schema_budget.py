"""``tools/list`` stays within its byte budgets (``scraper_mcp.schema_budget``), tool by tool.

Every tool an agent is offered costs it context on every session: a tool that grows past its
budget, a tool without one, or a list past its server's budget fails here with the figures.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from fastmcp import FastMCP

from memory_tools import MemoryServices, build_memory_server
from memory_tools.mcp.tools import tools as memory_registry
from memory_tools.mcp.toolsets import MEMORY_READ, ToolSelection
from scraper_mcp.aggregate import build_aggregate_server
from scraper_mcp.manifest import listing_services
from scraper_mcp.schema_budget import (
    AGGREGATE_LIST_BUDGET,
    MEMORY_LIST_BUDGET,
    MEMORY_TOOL_BUDGETS,
    SCRAPER_TOOL_BUDGETS,
    list_size,
)
from scraper_mcp.tools import scraper_tools


@pytest.fixture
async def services() -> AsyncIterator[MemoryServices]:
    # The documented default settings, as the manifest is listed: no database is reached.
    services = listing_services()
    yield services
    await services.database.close()


async def test_the_memory_servers_tools_are_within_their_budgets(
    services: MemoryServices,
) -> None:
    size = await list_size(build_memory_server(services))
    assert size.over_budget(MEMORY_LIST_BUDGET) == []
    assert {tool.name for tool in size.tools} == set(MEMORY_TOOL_BUDGETS)


async def test_the_aggregate_servers_tools_are_within_their_budgets(
    services: MemoryServices,
) -> None:
    size = await list_size(build_aggregate_server(services))
    assert size.over_budget(AGGREGATE_LIST_BUDGET) == []
    assert {tool.name for tool in size.tools} <= set(MEMORY_TOOL_BUDGETS) | set(
        SCRAPER_TOOL_BUDGETS
    )


async def test_a_read_only_toolset_is_within_its_budgets(services: MemoryServices) -> None:
    server = build_memory_server(services, tools=ToolSelection((MEMORY_READ,)))
    size = await list_size(server)
    assert size.over_budget(MEMORY_LIST_BUDGET) == [] and len(size.tools) < len(MEMORY_TOOL_BUDGETS)


def test_every_declared_tool_has_a_budget_and_they_fit_the_lists_budget() -> None:
    assert set(MEMORY_TOOL_BUDGETS) == {spec.name for spec in memory_registry.specs}
    assert set(SCRAPER_TOOL_BUDGETS) == {spec.name for spec in scraper_tools.specs}
    # The per-tool budgets cannot promise more than the whole list may hold.
    assert sum(MEMORY_TOOL_BUDGETS.values()) <= MEMORY_LIST_BUDGET
    assert MEMORY_LIST_BUDGET + sum(SCRAPER_TOOL_BUDGETS.values()) == AGGREGATE_LIST_BUDGET


async def test_a_tool_grown_past_its_budget_is_reported(services: MemoryServices) -> None:
    # The check above can fail: one description grown by a paragraph is named with its bytes.
    # (A short paragraph: past the tool's budget, well within what the list has left.)
    server = build_memory_server(services)
    get = await server.get_tool("image_asset_get")
    assert get is not None
    # Grown past its own budget and no further than the list's headroom allows (a few dozen
    # bytes since issue 35), so the tool alone is named.
    grown = get.model_copy(update={"description": f"{get.description} " + "x" * 20})
    bigger = FastMCP("grown")
    for tool in await server.list_tools():
        bigger.add_tool(grown if tool.name == "image_asset_get" else tool)
    found = await list_size(bigger)
    over = found.over_budget(MEMORY_LIST_BUDGET)
    assert len(over) == 1 and over[0].startswith("image_asset_get: "), over
    assert f"> its budget of {MEMORY_TOOL_BUDGETS['image_asset_get']}" in over[0]
    assert found.over_budget(found.total - 1)[-1].startswith("tools/list: ")
