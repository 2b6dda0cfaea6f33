"""memory-tools: authorised workflows of the image memory and their MCP tools."""

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
from memory_tools.mcp import ApiKeyVerifier, build_memory_server, build_memory_tools
from memory_tools.services import MemoryServices

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
