"""The aggregate MCP server: the same memory tool objects as the standalone server.

Parity is by construction: both servers register the ``Tool`` objects that
``memory_tools.build_memory_tools`` returns, with the same middleware and strictness, so their
manifests cannot drift. Scraper tools and their opt-in save handoffs register here too.
"""

from __future__ import annotations

from fastmcp import FastMCP
from fastmcp.server.auth import AuthProvider

from memory_tools import MemoryServices, build_memory_server
from memory_tools.mcp.for_scrapers import MEMORY, MEMORY_TOOLSETS, ToolSelection, Toolset
from scraper_mcp.chromium import system_chromium
from scraper_mcp.tools import build_scraper_tools, scraper_tools

AGGREGATE_INSTRUCTIONS_PREFIX = "Aggregate server: scraper tools and the image memory. "

SCRAPER = Toolset("scraper", "the scraper tools, which fetch the open web", lambda: scraper_tools)
# What `scraper-mcp-server serve --toolsets` accepts, and what it offers without it.
AGGREGATE_TOOLSETS = (*MEMORY_TOOLSETS, SCRAPER)
AGGREGATE_SELECTION = ToolSelection((MEMORY, SCRAPER))


def build_aggregate_server(
    services: MemoryServices,
    *,
    name: str = "mcp-scraper",
    auth: AuthProvider | None = None,
    tools: ToolSelection = AGGREGATE_SELECTION,
) -> FastMCP:
    """A server carrying the memory tools and scraper tools ``tools`` selects (all by default).

    The memory tools are registered by ``build_memory_server`` itself, so the two servers
    offer the same tools under the same selection.
    """
    server = build_memory_server(services, name=name, auth=auth, tools=tools)
    server.instructions = AGGREGATE_INSTRUCTIONS_PREFIX + (server.instructions or "")
    chromium = system_chromium(services.settings)
    for tool in build_scraper_tools(services, tools.offers, chromium=chromium):
        server.add_tool(tool)
    if chromium is not None:
        # A mounted server's lifespan runs with its parent's: the browser (launched on the first
        # screenshot) is closed when this server stops. It adds no tools.
        server.mount(FastMCP("chromium", lifespan=chromium.lifespan, mask_error_details=True))
    return server
