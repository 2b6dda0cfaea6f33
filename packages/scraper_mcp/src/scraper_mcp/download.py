"""``scrape_image_download``: fetch one image through the safe fetcher and keep it as an artifact.

The image is fetched exactly as ``image_asset_save`` fetches a ``sourceUrl`` (the server's one
:class:`~memory_tools.ingest.SafeFetcher`: the same URL and address policy, every redirect
checked again, the same size and time limits, the call's admission turn given away while it
downloads), then validated and stored by :func:`scraper_mcp.artifacts.store_artifact`. The
``pageUrl`` is only recorded, never fetched. Nothing is stored when any step refuses.
"""

from __future__ import annotations

from memory_tools import Caller, FeatureDisabled, InvalidInputFailure, MemoryServices
from memory_tools.mcp.for_scrapers import Download, policy, require_scope, scrub_url
from scraper_mcp.artifacts import ArtifactView, store_artifact

MAX_URL_LENGTH = 4096


def _page_url(raw: str | None) -> str | None:
    """The page URL as recorded: an http(s) URL, scrubbed (``invalid_input`` otherwise)."""
    if raw is None:
        return None
    if len(raw) > MAX_URL_LENGTH or not raw.lower().startswith(("https://", "http://")):
        raise InvalidInputFailure("pageUrl: an http or https URL of at most 4096 characters")
    try:
        return scrub_url(raw)
    except ValueError:
        raise InvalidInputFailure("pageUrl: not a valid URL") from None


async def download_image(
    caller: Caller, services: MemoryServices, *, image_url: str, page_url: str | None = None
) -> ArtifactView:
    """Download ``image_url`` for ``caller`` and store it as their artifact.

    Refusals: ``feature_disabled``, ``forbidden`` (no ``write`` scope), ``unsafe_url`` (the URL,
    a redirect or the answer breaks the fetch policy), ``fetch_failed``, ``invalid_image``,
    ``invalid_input``, ``quota_exceeded`` (the caller's live-artifact bound).
    """
    policy.require(services.settings)
    require_scope(caller, "write")  # before any request leaves the server
    fetcher = services.fetcher
    if fetcher is None:
        raise FeatureDisabled("downloading images is not configured on this server")
    fetch_url = str(await fetcher.check(image_url))
    page = _page_url(page_url)
    data = await Download(fetcher, services.call_admission, fetch_url).read()
    source_ref: dict[str, object] = {"imageUrl": scrub_url(fetch_url)}
    if page is not None:
        source_ref["pageUrl"] = page
    return await store_artifact(services, caller, data, source_kind="scrape", source_ref=source_ref)
