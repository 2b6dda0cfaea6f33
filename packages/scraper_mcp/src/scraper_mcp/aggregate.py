"""The aggregate MCP server: the same memory tool objects as the standalone server.

Parity is by construction: both servers register the ``Tool`` objects that
``memory_tools.build_memory_tools`` returns, with the same middleware and strictness, so their
manifests cannot drift. Scraper tools and their opt-in save handoffs register here too.
"""

from __future__ import annotations

from fastmcp import FastMCP
from fastmcp.server.auth import AuthProvider

from memory_tools import MemoryServices, build_memory_server
from scraper_mcp.chromium import system_chromium
from scraper_mcp.tools import build_scraper_tools

AGGREGATE_INSTRUCTIONS_PREFIX = "Aggregate server: scraper tools and the image memory. "


def build_aggregate_server(
    services: MemoryServices, *, name: str = "mcp-scraper", auth: AuthProvider | None = None
) -> FastMCP:
    """A server carrying every memory tool and every scraper tool."""
    server = build_memory_server(services, name=name, auth=auth)
    server.instructions = AGGREGATE_INSTRUCTIONS_PREFIX + (server.instructions or "")
    chromium = system_chromium(services.settings)
    for tool in build_scraper_tools(services, chromium=chromium):
        server.add_tool(tool)
    if chromium is not None:
        # A mounted server's lifespan runs with its parent's: the browser (launched on the first
        # screenshot) is closed when this server stops. It adds no tools.
        server.mount(FastMCP("chromium", lifespan=chromium.lifespan, mask_error_details=True))
    return server
