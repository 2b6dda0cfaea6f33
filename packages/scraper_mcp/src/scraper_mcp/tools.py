"""The scraper tools: each is one method of ``ScraperTools`` declared with ``@scraper_tools.tool``.

The same registry as the memory tools (:mod:`memory_tools.mcp.registry`): the method's name is
the tool's name, its docstring the description, its parameters the input schema, its return
model the output schema; the decorator states the title, the four hints (scraper tools reach
the open web: ``open_world=True``) and the audited operation. A body is one call through
``run_as_caller``, the MCP face of the one call runner (``memory_tools.workflows.calls``), so a
scraper call is admitted, authenticated and refused exactly like a memory call. Everything
taken from ``memory_tools`` comes from its root or ``memory_tools.mcp.for_scrapers``.

Adding a scraper tool: one method here, its workflow in a ``scraper_mcp`` module returning a
``memory_tools.wire.WireModel``, its entry in docs/tools.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastmcp.tools import Tool
from pydantic import Field

from memory_tools import FeatureDisabled, MemoryServices
from memory_tools.mcp.for_scrapers import MAX_URL_LENGTH, ToolRegistry, ToolSpec, run_as_caller
from scraper_mcp import page_images, pages, screenshots
from scraper_mcp.artifacts import ArtifactView
from scraper_mcp.chromium import Chromium
from scraper_mcp.download import download_image
from scraper_mcp.pages import PageImages, PageSave
from scraper_mcp.screenshots import ScreenshotView

scraper_tools = ToolRegistry()

# What a tool declares it needs (``requires=``) when it is offered only with a Chromium
# (scraper_mcp.chromium.system_chromium).
CHROMIUM = "chromium"


def build_scraper_tools(
    services: MemoryServices,
    offers: Callable[[ToolSpec], bool] | None = None,
    *,
    chromium: Chromium | None = None,
) -> list[Tool]:
    """The scraper tools bound to ``services`` that ``offers`` admits (all when ``None``).

    Without ``chromium``, none that needs one.
    """

    def offered(spec: ToolSpec) -> bool:
        if chromium is None and CHROMIUM in spec.requires:
            return False
        return offers is None or offers(spec)

    return scraper_tools.bind(ScraperTools(services, chromium=chromium), offered)


class ScraperTools:
    """The scraper tools of one server: each ``@scraper_tools.tool`` method is a tool."""

    def __init__(self, services: MemoryServices, *, chromium: Chromium | None = None) -> None:
        self.services = services
        self.chromium = chromium

    # Tools, in this order: scrape_page_images, scrape_image_download, scrape_page_screenshot.

    @scraper_tools.tool(
        "Find images on a page",
        # Static hints cover the opt-in: with ``save`` the call stores images.
        read_only=False,
        idempotent=False,
        open_world=True,
        audited="asset_save",
    )
    async def scrape_page_images(
        self,
        url: Annotated[
            str, Field(min_length=1, max_length=4096, description="A public https page URL.")
        ],
        limit: Annotated[
            int,
            Field(ge=1, le=page_images.MAX_CANDIDATES, description="At most this many candidates."),
        ] = 20,
        minWidth: Annotated[
            int | None,
            Field(ge=1, le=100_000, description="Drop images declared narrower."),
        ] = None,
        save: Annotated[
            PageSave | None,
            Field(description="Also save the top candidates."),
        ] = None,
    ) -> PageImages:
        """Fetch a web page and list its images, most likely important first.

        Nothing is stored unless save is given: then the top save.max candidates are saved.
        """
        return await run_as_caller(
            self.services,
            pages.scrape_page_images,
            self.services,
            url=url,
            limit=limit,
            min_width=minWidth,
            save=save,
        )

    @scraper_tools.tool(
        "Download image as artifact",
        read_only=False,
        idempotent=False,
        open_world=True,
        audited="artifact_store",
    )
    async def scrape_image_download(
        self,
        imageUrl: Annotated[
            str,
            Field(
                min_length=1,
                max_length=4096,
                description="A public https URL of a JPEG, PNG, WebP or GIF.",
            ),
        ],
        pageUrl: Annotated[
            str | None,
            Field(max_length=4096, description="The page it is on (not fetched)."),
        ] = None,
    ) -> ArtifactView:
        """Download an image as a private artifact; image_asset_save keeps it (before expiresAt)."""
        return await run_as_caller(
            self.services, download_image, self.services, image_url=imageUrl, page_url=pageUrl
        )

    @scraper_tools.tool(
        "Screenshot a page",
        read_only=False,
        idempotent=False,
        open_world=True,
        audited="artifact_store",
        requires=frozenset({CHROMIUM}),
    )
    async def scrape_page_screenshot(
        self,
        url: Annotated[
            str,
            Field(
                min_length=1,
                max_length=MAX_URL_LENGTH,
                description="A public page URL.",
            ),
        ],
        fullPage: Annotated[
            bool,
            Field(description="The whole page, not one screen."),
        ] = False,
        width: Annotated[
            int,
            Field(
                ge=screenshots.MIN_WIDTH,
                le=screenshots.MAX_WIDTH,
                description="Window width in pixels.",
            ),
        ] = screenshots.DEFAULT_WIDTH,
    ) -> ScreenshotView:
        """Screenshot a public web page as a private PNG artifact; image_asset_save keeps it."""
        chromium = self.chromium
        if chromium is None:  # the tool is only registered with a browser
            raise FeatureDisabled("page screenshots need a browser; this server has none")
        return await run_as_caller(
            self.services,
            screenshots.screenshot_page,
            self.services,
            chromium,
            url,
            fullPage,
            width,
        )
