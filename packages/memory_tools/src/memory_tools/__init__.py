"""memory-tools: authorised workflows of the image memory and their MCP tools."""

from typing import TYPE_CHECKING, Any

from memory_tools import admin
from memory_tools.access import Caller, ResolvedVault, authenticate, display_handle, resolve_vault
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
from memory_tools.services import MemoryServices

if TYPE_CHECKING:
    from memory_tools.mcp import ApiKeyVerifier, build_memory_server, build_memory_tools

_MCP_NAMES = frozenset({"ApiKeyVerifier", "build_memory_server", "build_memory_tools"})


def __getattr__(name: str) -> Any:
    # The MCP layer (fastmcp) loads on first use, so operator commands start quickly.
    if name in _MCP_NAMES:
        from memory_tools import mcp

        return getattr(mcp, name)
    raise AttributeError(f"module 'memory_tools' has no attribute {name!r}")


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
    "admin",
    "authenticate",
    "build_memory_server",
    "build_memory_tools",
    "display_handle",
    "resolve_vault",
]
