"""``scrape_page_screenshot``: a PNG of a public page, stored as the caller's artifact.

The flow (docs/design.md#screenshots): the URL is checked by the fetch policy; the document is
fetched by us (redirects followed and each target checked) so that a refused or failed page
fails the call before a browser is involved, and so that the page opens at its final URL; then
Chromium renders it, every further request of the page fetched by
:class:`~scraper_mcp.page_requests.PageRequests` under the same policy; the PNG is stored with
:func:`scraper_mcp.artifacts.store_artifact` (validated as a save validates an image); the
answer carries the artifact and one small JPEG of the top of the page as MCP image content
(never the full page: a tall PNG can pass a client's message limit).

Bounds: ``width`` 320-2560 px (the tool's schema), the page's bytes
(``SCRAPER_SCREENSHOT_MAX_PAGE_BYTES``), its time (``SCRAPER_SCREENSHOT_TIMEOUT_SECONDS``, from
the first request to the PNG), the height of a full page (``SCRAPER_SCREENSHOT_MAX_HEIGHT``,
and lower if width x height would pass ``ASSET_MAX_DECODED_PIXELS``).
"""

from __future__ import annotations

import anyio
import anyio.to_thread
import pyvips
from pydantic import Field

from memory_db import get_logger
from memory_tools import Caller, MemoryServices, ToolFailure
from memory_tools.mcp.for_scrapers import (
    FetchFailed,
    Thumbnail,
    lock_down_libvips,
    policy,
    require_scope,
    shrink,
)
from scraper_mcp.artifacts import ArtifactView, store_artifact
from scraper_mcp.chromium import Chromium
from scraper_mcp.page_images import clean
from scraper_mcp.page_requests import PageRequests

log = get_logger(__name__)

MIN_WIDTH = 320
MAX_WIDTH = 2560
DEFAULT_WIDTH = 1280
MAX_TITLE = 300
DOCUMENT_HEADERS = {
    "accept": "text/html,application/xhtml+xml,application/xml;q=0.9,image/*;q=0.8,*/*;q=0.5",
    "accept-language": "en;q=0.9,*;q=0.5",
}


class ScreenshotView(ArtifactView):
    """A page's screenshot, stored as your artifact: save it with image_asset_save (artifactId)."""

    page_url: str = Field(description="The page captured, after redirects.")
    page_title: str = Field(description="The page's title ('' when it has none).")
    full_page: bool = Field(description="Whether the whole page was asked for.")
    cut: bool = Field(
        description="True when the page was taller than the screenshot bound and was cut there."
    )


async def screenshot_page(
    caller: Caller,
    services: MemoryServices,
    chromium: Chromium,
    url: str,
    full_page: bool,
    width: int,
) -> ScreenshotView:
    """Render ``url`` in Chromium, store the PNG as ``caller``'s artifact, answer with it."""
    settings = services.settings
    # Refused before any work: the same answers store_artifact would give after it.
    policy.require(settings)
    require_scope(caller, "write")
    fetcher = services.fetcher
    if fetcher is None:
        raise ToolFailure("this server has no URL fetcher configured")
    fetch_policy = fetcher.policy
    await fetcher.check(url)
    timeout = settings.scraper_screenshot_timeout_seconds
    by_pixels = settings.asset_max_decoded_pixels // width
    max_height = max(1, min(settings.scraper_screenshot_max_height, by_pixels))
    try:
        # The page is fetched and rendered elsewhere (the network, Chromium's processes, at most
        # SCRAPER_SCREENSHOT_CONCURRENCY at once): the call gives its admission turn to others
        # meanwhile, as downloads do, and takes it again to store the artifact.
        async with services.call_admission.stepped_aside():
            with anyio.fail_after(timeout):
                async with fetcher.client(DOCUMENT_HEADERS) as client:
                    requests = PageRequests(
                        client=client,
                        policy=fetch_policy,
                        max_bytes=settings.scraper_screenshot_max_page_bytes,
                        deadline=anyio.current_time() + timeout,
                    )
                    document = await requests.fetch("GET", url, DOCUMENT_HEADERS)
                    if not 200 <= document.status < 300:
                        raise FetchFailed(f"the page answered HTTP {document.status}")
                    requests.prime(document)
                    capture = await chromium.capture(
                        requests,
                        document.url,
                        width=width,
                        full_page=full_page,
                        max_height=max_height,
                    )
    except TimeoutError:
        raise FetchFailed(f"the page was not captured within {timeout:g} s") from None
    log.info(
        "page_screenshot_taken",
        bytes=len(capture.png),
        requests=requests.requests,
        refused=len(requests.refused),
        page_bytes=requests.bytes_fetched,
        cut=capture.cut,
    )
    # The page wrote its title: no lone surrogate, control or bidi character is kept.
    title = clean(capture.title.encode("utf-8", "replace").decode("utf-8"), MAX_TITLE) or ""
    artifact = await store_artifact(
        services,
        caller,
        capture.png,
        source_kind="screenshot",
        source_ref={"pageUrl": document.url, "pageTitle": title},
    )
    view = ScreenshotView(
        **artifact.model_dump(by_alias=False),
        page_url=document.url,
        page_title=title,
        full_page=full_page,
        cut=capture.cut,
    )
    return view.with_thumbnails((await top_thumbnail(services, artifact, capture.png),))


async def top_thumbnail(services: MemoryServices, artifact: ArtifactView, png: bytes) -> Thumbnail:
    """A small JPEG of the top of the screenshot (at most as tall as it is wide).

    Made like the thumbnails of search results (:func:`memory_tools.workflows.thumbnails.shrink`),
    from
    the PNG that ``store_artifact`` has just validated, within the process's decode budget.
    """
    artifact_id = artifact.artifact_id
    try:
        async with services.decode_admission.admit(artifact.width * artifact.height):
            jpeg, shown_width, shown_height = await anyio.to_thread.run_sync(_top, png)
    except pyvips.Error:
        log.warning("screenshot_thumbnail_failed", artifact_id=artifact_id, exc_info=True)
        return Thumbnail(
            artifact_id, missing="the screenshot could not be shrunk", id_name="artifactId"
        )
    return Thumbnail(
        artifact_id, jpeg=jpeg, width=shown_width, height=shown_height, id_name="artifactId"
    )


def _top(png: bytes) -> tuple[bytes, int, int]:
    lock_down_libvips()
    image = pyvips.Image.new_from_buffer(png, "", access="sequential", fail_on="error")
    top = image.crop(0, 0, image.width, min(image.height, image.width))
    return shrink(top.pngsave_buffer(compression=1))
