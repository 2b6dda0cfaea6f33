"""aggregate-server: the aggregate MCP server (`scraper-mcp-server`)."""

from memory_db.garbage_collection import collection_paused

# Importing the CLI is most of a process's start: done without the cyclic collector
# (memory_db.garbage_collection says why).
with collection_paused():
    from aggregate_server.cli import main

__all__ = ["main"]
