"""aggregate-server: the aggregate MCP server (`scraper-mcp-server`)."""

from aggregate_server.cli import main

__all__ = ["main"]
