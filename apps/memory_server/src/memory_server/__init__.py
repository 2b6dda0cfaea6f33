"""memory-server: the standalone image-memory MCP server, its CLI and HTTP routes."""

from typing import TYPE_CHECKING, Any

from memory_server.bootstrap import DEFAULT_HOST, DEFAULT_PORT, public_base_url, running
from memory_server.cli import Terminated, build_parser, install_sigterm_handler, main

if TYPE_CHECKING:
    from memory_server.app import add_http_routes, build_http_server


def __getattr__(name: str) -> Any:
    # The HTTP app (fastmcp, starlette) loads on first use, so `admin` commands start quickly.
    if name in ("add_http_routes", "build_http_server"):
        from memory_server import app

        return getattr(app, name)
    raise AttributeError(f"module 'memory_server' has no attribute {name!r}")


__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "Terminated",
    "add_http_routes",
    "build_http_server",
    "build_parser",
    "install_sigterm_handler",
    "main",
    "public_base_url",
    "running",
]
