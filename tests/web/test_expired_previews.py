"""Thumbnails on a page left open longer than the signed links live still load.

The server runs with ``ASSET_SIGNED_GET_TTL_SECONDS`` of a few seconds. A phone-width library
of many images loads the cards below the fold lazily; the test waits until the links of the
page's first load have expired (by the clock), then scrolls every card into view: each image
loads, and no request is refused (each ``<img>`` asks the preview route for a fresh link).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from memory_tools.testing.keys import new_key as make_key

from ..e2e.test_processes import _env, serve_http
from .agent_calls import save_images
from .conftest import ResponseLog, RunningServer, migrated_home, sign_in
from .test_asset_forms import _png

pytestmark = pytest.mark.slow

TTL_SECONDS = 3
IMAGES = 40


@pytest.fixture(scope="module")
def short_links_server(
    tmp_path_factory: pytest.TempPathFactory, migrated_pgdata: Path
) -> Iterator[RunningServer]:
    """A server of its own whose signed links live TTL_SECONDS (one for the module)."""
    env = _env(
        migrated_home(tmp_path_factory, "short-links", migrated_pgdata),
        ASSET_WORKER_SWEEP_SECONDS="1",
        ASSET_SIGNED_GET_TTL_SECONDS=str(TTL_SECONDS),
    )
    with serve_http(env, capture=False) as (url, _process):
        yield RunningServer(url, env)


def _wait_until_expired(page: Page, rendered_at: float) -> None:
    """Wait, by the clock, until every link signed when the page was drawn has expired."""
    deadline_ms = (rendered_at + TTL_SECONDS + 1) * 1000
    # The clock is the condition; the timeout only bounds a hung browser.
    page.wait_for_function(f"() => Date.now() > {deadline_ms}", timeout=60_000)


def _unloaded(page: Page, selector: str) -> int:
    return page.evaluate(
        "(s) => Array.from(document.querySelectorAll(s)).filter((i) => !i.naturalWidth).length",
        selector,
    )


def _scroll_all_and_check(page: Page, selector: str) -> None:
    images = page.locator(selector)
    count = images.count()
    assert count > 0
    for index in range(count):
        image = images.nth(index)
        image.scroll_into_view_if_needed()
        expect(image).to_have_js_property("complete", True)
        assert image.evaluate("(img) => img.naturalWidth") > 0, f"image {index} is broken"


def test_cards_scrolled_into_view_after_the_links_expired_still_load(
    browser: Browser, short_links_server: RunningServer, tmp_path: Path
) -> None:
    key = make_key(short_links_server.env, "long-reader@example.com")
    context = browser.new_context(
        viewport={"width": 390, "height": 600}, base_url=short_links_server.url
    )
    log = ResponseLog()
    try:
        page = context.new_page()
        page.on("response", log.record)
        sign_in(page, key)
        # Saved as an agent saves them: the upload page is not the subject here.
        save_images(
            short_links_server.url,
            key,
            [
                (_png(40 + n), {"title": f"harbour {n:02d}", "tags": ["harbour"]})
                for n in range(IMAGES)
            ],
        )

        page.goto(f"/library?limit={IMAGES}")
        rendered_at = time.time()
        expect(page.locator(".library-card")).to_have_count(IMAGES)
        # The page is long: Chromium has not loaded the cards far below the fold yet.
        assert _unloaded(page, ".library-card img") > 0
        _wait_until_expired(page, rendered_at)
        _scroll_all_and_check(page, ".library-card img")

        # The same for search results, and for the asset page opened from a stale card.
        page.goto("/search?query=harbour&limit=30")
        rendered_at = time.time()
        expect(page.locator(".search-hit")).not_to_have_count(0)
        _wait_until_expired(page, rendered_at)
        _scroll_all_and_check(page, ".search-hit img")
        assert not log.unexpected(), log.unexpected()
        # What the route answers: a redirect cached for less than the link lives.
        answer = page.request.get(
            page.locator(".search-hit img").first.get_attribute("src") or "",
            max_redirects=0,
        )
        assert answer.status == 303
        assert answer.headers["cache-control"] == f"private, max-age={TTL_SECONDS // 2}"
    finally:
        context.close()
