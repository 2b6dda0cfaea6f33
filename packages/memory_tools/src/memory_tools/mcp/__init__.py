"""MCP registration of the memory tools (fastmcp)."""

from memory_tools.mcp.auth import ApiKeyVerifier
from memory_tools.mcp.server import INSTRUCTIONS, build_memory_server
from memory_tools.mcp.tools import build_memory_tools

__all__ = [
    "INSTRUCTIONS",
    "ApiKeyVerifier",
    "build_memory_server",
    "build_memory_tools",
]
