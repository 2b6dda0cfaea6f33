"""The scraper tools: each is one method of ``ScraperTools`` declared with ``@scraper_tools.tool``.

The same registry as the memory tools (:mod:`memory_tools.mcp.registry`): the method's name is
the tool's name, its docstring the description, its parameters the input schema, its return
model the output schema; the decorator states the title, the four hints (scraper tools reach
the open web: ``open_world=True``) and the audited operation. A body is one call through
``memory_tools.mcp.tools.run_authorised`` / ``run_as_caller``, so a scraper call is admitted,
authenticated and refused exactly like a memory call.

Adding a scraper tool: one method here, its workflow in a ``scraper_mcp`` module returning a
``memory_tools.wire.WireModel``, its entry in docs/tools.md.
"""

from __future__ import annotations

from collections.abc import Callable

from fastmcp.tools import Tool

from memory_tools import MemoryServices
from memory_tools.mcp.registry import ToolRegistry, ToolSpec

scraper_tools = ToolRegistry()


def build_scraper_tools(
    services: MemoryServices, offers: Callable[[ToolSpec], bool] | None = None
) -> list[Tool]:
    """The scraper tools bound to ``services`` (``offers``: only those a selection admits)."""
    return scraper_tools.bind(ScraperTools(services), offers)


class ScraperTools:
    """The scraper tools of one server: each ``@scraper_tools.tool`` method is a tool."""

    def __init__(self, services: MemoryServices) -> None:
        self.services = services

    # Tools, in this order: scrape_page_images, scrape_image_download, scrape_page_screenshot.
