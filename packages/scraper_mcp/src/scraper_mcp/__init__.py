"""scraper-mcp: the aggregate MCP registration (scraper tools next to the memory tools)."""

from scraper_mcp.aggregate import build_aggregate_server

__all__ = ["build_aggregate_server"]
