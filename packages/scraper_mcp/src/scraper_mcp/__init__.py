"""scraper_mcp."""
