"""memory-server: the standalone image-memory MCP server and its operator CLI.

It only wires: the CLI (``memory_server.cli``) parses the command line and composes
``memory_tools.serving`` with the memory tools; what it serves lives in that library.
"""

from memory_server.cli import build_parser, main, server_app

__all__ = ["build_parser", "main", "server_app"]
