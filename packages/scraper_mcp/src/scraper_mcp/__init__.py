"""scraper-mcp: the aggregate MCP registration (scraper tools next to the memory tools)."""

from scraper_mcp.aggregate import (
    AGGREGATE_SELECTION,
    AGGREGATE_TOOLSETS,
    SCRAPER,
    build_aggregate_server,
)

__all__ = ["AGGREGATE_SELECTION", "AGGREGATE_TOOLSETS", "SCRAPER", "build_aggregate_server"]
