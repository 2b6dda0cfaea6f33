"""memory-server: the standalone image-memory MCP server and its operator CLI.

It only wires: the CLI (``memory_server.cli``) parses the command line and composes
``memory_tools.serving`` with the memory tools; what it serves lives in that library.
"""

from memory_db.garbage_collection import collection_paused

# Importing the CLI is most of a process's start: done without the cyclic collector
# (memory_db.garbage_collection says why).
with collection_paused():
    from memory_server.cli import build_parser, main, server_app

__all__ = ["build_parser", "main", "server_app"]
