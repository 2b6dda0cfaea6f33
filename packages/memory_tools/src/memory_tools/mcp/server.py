"""Build the standalone memory MCP server from services."""

from __future__ import annotations

from importlib.metadata import version

from fastmcp import FastMCP
from fastmcp.server.auth import AuthProvider

from memory_tools.errors import CODES
from memory_tools.mcp.resources import AssetResources
from memory_tools.mcp.tools import build_memory_tools
from memory_tools.mcp.toolsets import MEMORY_SELECTION, ToolSelection
from memory_tools.mcp.validation import InvalidInputMiddleware
from memory_tools.services import MemoryServices

INSTRUCTIONS = (
    "Image memory: organise saved images in vaults, projects and folders, and find them again. "
    "Vault handles: 'Library' (your default vault), your other vaults by name, or "
    "'owner@example.com/Name' for vaults shared with you. Errors start with a stable code "
    f"({', '.join(CODES)}); 'unavailable' means the database is briefly unreachable: retry the "
    "same call after a few seconds; 'busy' means the server is saturated: retry in a moment; "
    "'embedding_unavailable' means the embedding provider is briefly unavailable: retry shortly."
)


def deletion_note(hours: int) -> str:
    """What the instructions say about deletes, for ``ASSET_DELETE_GRACE_HOURS``."""
    if hours == 0:
        return " Deleting an image is final: its bytes are purged at once."
    return (
        f" A deleted image stays recoverable for {hours} hours: image_asset_restore brings it "
        "back (search does not find it meanwhile)."
    )


def build_memory_server(
    services: MemoryServices,
    *,
    name: str = "image-memory",
    auth: AuthProvider | None = None,
    tools: ToolSelection = MEMORY_SELECTION,
) -> FastMCP:
    """A FastMCP server with the memory tools ``tools`` selects (by default every one).

    The assets are resources too (:mod:`memory_tools.mcp.resources`) wherever the selection
    offers ``image_asset_get``, the tool whose checks and answer they share.
    """
    offers_assets = any(spec.name == "image_asset_get" for spec in tools.offered())
    server = FastMCP(
        name,
        # serverInfo.version: this project's release, not the framework's.
        version=version("memory-tools"),
        instructions=INSTRUCTIONS + deletion_note(services.settings.asset_delete_grace_hours),
        auth=auth,
        mask_error_details=True,
        strict_input_validation=True,
        middleware=[InvalidInputMiddleware()],
    )
    for tool in build_memory_tools(services, tools.offers):
        server.add_tool(tool)
    if offers_assets:
        AssetResources(services).register(server)
    return server
