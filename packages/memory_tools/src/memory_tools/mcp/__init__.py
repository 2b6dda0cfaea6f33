"""MCP registration of the memory tools (fastmcp).

fastmcp loads on first use of these names, not with the package: ``mcp.toolsets`` (which tools a
server offers) is imported by every app's command line, and an operator command (``admin``,
``backup`` ...) must not pay for the HTTP stack (``apps/memory_server/tests/test_startup.py``).
"""

from typing import TYPE_CHECKING

from memory_db.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from memory_tools.mcp.auth import ApiKeyVerifier
    from memory_tools.mcp.server import INSTRUCTIONS, build_memory_server
    from memory_tools.mcp.tools import build_memory_tools

_LAZY = {
    "memory_tools.mcp.auth": ("ApiKeyVerifier",),
    "memory_tools.mcp.server": ("INSTRUCTIONS", "build_memory_server"),
    "memory_tools.mcp.tools": ("build_memory_tools",),
}
__getattr__ = lazy_exports(__name__, globals(), _LAZY)

__all__ = [
    "INSTRUCTIONS",
    "ApiKeyVerifier",
    "build_memory_server",
    "build_memory_tools",
]
