"""memory-server: the standalone image-memory MCP server, its CLI and HTTP routes."""

from memory_server.app import add_http_routes, build_http_server
from memory_server.bootstrap import DEFAULT_HOST, DEFAULT_PORT, public_base_url, running
from memory_server.cli import Terminated, build_parser, install_sigterm_handler, main

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
