"""memory-tools: authorised workflows of the image memory and their MCP tools."""

from typing import TYPE_CHECKING

from memory_db.lazy_exports import lazy_exports
from memory_tools.errors import (
    CODES,
    ConflictFailure,
    FeatureDisabled,
    Forbidden,
    InvalidInputFailure,
    NotFoundFailure,
    ToolFailure,
    Unauthenticated,
)

if TYPE_CHECKING:
    from memory_tools.access import (
        Caller,
        ResolvedVault,
        authenticate,
        display_handle,
        resolve_vault,
    )
    from memory_tools.mcp import ApiKeyVerifier, build_memory_server, build_memory_tools
    from memory_tools.services import MemoryServices

# Loaded on first use, so an operator command imports only what it runs: the MCP layer
# (fastmcp), and the services and access checks with what they import (the ingest pipeline,
# the embedders, the vector index).
_LAZY = {
    "memory_tools.mcp": ("ApiKeyVerifier", "build_memory_server", "build_memory_tools"),
    "memory_tools.access": (
        "Caller",
        "ResolvedVault",
        "authenticate",
        "display_handle",
        "resolve_vault",
    ),
    "memory_tools.services": ("MemoryServices",),
}
__getattr__ = lazy_exports(__name__, globals(), _LAZY)


__all__ = [
    "CODES",
    "ApiKeyVerifier",
    "Caller",
    "ConflictFailure",
    "FeatureDisabled",
    "Forbidden",
    "InvalidInputFailure",
    "MemoryServices",
    "NotFoundFailure",
    "ResolvedVault",
    "ToolFailure",
    "Unauthenticated",
    "authenticate",
    "build_memory_server",
    "build_memory_tools",
    "display_handle",
    "resolve_vault",
]
