"""MCP registration of the memory tools (fastmcp).

The names below load on first use: the operator CLI imports ``memory_tools.mcp.toolsets`` to
parse ``--toolsets`` and must not pay for fastmcp and the HTTP stack on every command.
"""

from typing import TYPE_CHECKING

from memory_db.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from memory_tools.mcp.auth import ApiKeyVerifier
    from memory_tools.mcp.server import INSTRUCTIONS, build_memory_server
    from memory_tools.mcp.tools import build_memory_tools

__getattr__ = lazy_exports(
    __name__,
    globals(),
    {
        "memory_tools.mcp.auth": ("ApiKeyVerifier",),
        "memory_tools.mcp.server": ("INSTRUCTIONS", "build_memory_server"),
        "memory_tools.mcp.tools": ("build_memory_tools",),
    },
)

__all__ = [
    "INSTRUCTIONS",
    "ApiKeyVerifier",
    "build_memory_server",
    "build_memory_tools",
]
