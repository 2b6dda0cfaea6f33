"""The duplicates page in a real browser: near-duplicate pairs found by the server's own
embedding worker, keep one (the others go to the trash), and "Not duplicates" remembered across
a reload and a new run of ``memory-server enrich --what duplicates``."""

from __future__ import annotations

import base64
import json
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import pyvips
from playwright.sync_api import Page, expect

from memory_tools.testing.keys import new_key as make_key

from ..e2e.test_processes import _cli
from .conftest import MOBILE, RunningServer, check_accessibility, screenshot
from .test_trash_usage_sharing import _tools

pytestmark = pytest.mark.slow

# image_asset_get waits for the embedding event at most 30 s a call (its bound); the test asks
# again up to this many times, for a machine busy with other suites.
WAIT_SECONDS = 30
WAIT_CALLS = 6
QUEUE_DEADLINE_SECONDS = 120


def _picture(seed: int) -> bytes:
    xyz = pyvips.Image.xyz(120, 90)
    red = ((xyz[0] * (seed + 2) + xyz[1]) % 256).cast("uchar")
    green = ((xyz[1] * 3 + seed * 40) % 256).cast("uchar")
    blue = ((xyz[0] + xyz[1] + seed * 90) % 256).cast("uchar")
    return red.bandjoin([green, blue]).copy(interpretation="srgb").pngsave_buffer()


def _saved_pair(server: RunningServer, key: str, seed: int, title: str) -> list[str]:
    """A picture and its JPEG re-encode, saved over MCP and waited for until embedded."""
    png = _picture(seed)
    jpeg = pyvips.Image.new_from_buffer(png, "").jpegsave_buffer(Q=85)
    saved = _tools(
        server,
        key,
        [
            ("image_asset_save", {"imageBase64": base64.b64encode(png).decode(), "title": title}),
            (
                "image_asset_save",
                {"imageBase64": base64.b64encode(jpeg).decode(), "title": f"{title} (copy)"},
            ),
        ],
    )
    ids = [str(item["assetId"]) for item in saved]
    waited: list[Any] = []
    for _ in range(WAIT_CALLS):
        waited = _tools(
            server,
            key,
            [("image_asset_get", {"assetId": i, "waitSeconds": WAIT_SECONDS}) for i in ids],
        )
        if all(item["status"] == "ready" for item in waited):
            return ids
    raise AssertionError(f"not embedded after {WAIT_CALLS} waits: {waited}")


def _queue(server: RunningServer) -> tuple[float, float]:
    """The server's own gauges of waiting and running jobs (``/metrics``, open on loopback)."""
    text = httpx.get(server.url + "/metrics", timeout=30).text
    found = dict(re.findall(r"^(memory_embedding_(?:queue_depth|jobs_running)) (\S+)$", text, re.M))
    return float(found["memory_embedding_queue_depth"]), float(
        found["memory_embedding_jobs_running"]
    )


def _wait_for_an_idle_queue(server: RunningServer) -> None:
    """Until the server's worker has run every queued job (the enrich's among them).

    The worker sweeps every second here (ASSET_WORKER_SWEEP_SECONDS=1); the bound is for a
    machine busy with other suites, and a queue that never empties fails with its numbers.
    """
    deadline = time.monotonic() + QUEUE_DEADLINE_SECONDS
    queue = _queue(server)
    while queue != (0, 0):
        assert time.monotonic() < deadline, f"the queue is not idle: {queue}"
        time.sleep(0.2)
        queue = _queue(server)


def test_keep_one_and_dismiss_another_cluster(
    open_page: Callable[..., Page], web_server: RunningServer
) -> None:
    owner = f"dups-{uuid.uuid4().hex[:8]}@example.com"
    key = make_key(web_server.env, owner)
    harbour, harbour_copy = _saved_pair(web_server, key, 1, "Harbour")
    _saved_pair(web_server, key, 5, "Pier")
    page = open_page(key)
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Duplicates").click()
    page.wait_for_url("**/duplicates")
    groups = page.get_by_role("list", name="Groups of near-duplicates").locator(":scope > li")
    expect(groups).to_have_count(2)
    expect(page.get_by_role("radio", name="Harbour (copy)")).to_be_visible()
    check_accessibility(page)
    screenshot(page, "duplicates-desktop")

    harbour_group = groups.filter(has=page.get_by_role("radio", name="Harbour", exact=True))
    harbour_group.get_by_role("radio", name="Harbour", exact=True).check()
    harbour_group.get_by_role("button", name="Keep this one, trash the others").click()
    results = page.get_by_role("list", name="What happened to each image")
    expect(results.get_by_role("listitem")).to_have_count(2)
    expect(results.get_by_role("listitem").filter(has_text="Harbour (copy)")).to_contain_text(
        "Moved to the trash"
    )
    expect(results.get_by_role("listitem").filter(has_text="Kept")).to_contain_text("Harbour")
    check_accessibility(page)
    page.get_by_role("link", name="Open the trash").click()
    expect(page.get_by_role("img", name="Harbour (copy)")).to_be_visible()
    assert harbour_copy in page.content() and harbour not in page.content()

    page.goto("/duplicates")
    expect(groups).to_have_count(1)
    groups.first.get_by_role("button", name="Not duplicates").click()
    expect(page.get_by_role("status")).to_contain_text("not duplicates")
    expect(page.get_by_role("heading", name="No near-duplicates here")).to_be_visible()
    page.reload()
    expect(page.get_by_role("heading", name="No near-duplicates here")).to_be_visible()

    # Comparing every image of the vault again finds the pair again, and the decision holds.
    enriched = _cli(
        web_server.env,
        *("enrich", "--json", "--vault-owner", owner, "--vault", "Library"),
        *("--what", "duplicates"),
    )
    assert enriched.returncode == 0, enriched.stderr
    assert json.loads(enriched.stdout)["queued"] == 3  # the live images: Harbour, both Piers
    _wait_for_an_idle_queue(web_server)
    page.reload()
    expect(page.get_by_role("heading", name="No near-duplicates here")).to_be_visible()
    expect(page.get_by_text("memory-server enrich --what duplicates")).to_be_visible()
    check_accessibility(page)
    screenshot(page, "duplicates-empty")


def test_duplicates_at_mobile_width(
    open_page: Callable[..., Page], new_key: Callable[..., str], web_server: RunningServer
) -> None:
    key = new_key("dups-mobile")
    _saved_pair(web_server, key, 9, "Lighthouse")
    page = open_page(key, MOBILE)
    page.goto("/duplicates")
    expect(page.get_by_role("radio", name="Lighthouse (copy)")).to_be_visible()
    widths = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1], f"/duplicates scrolls sideways at phone width: {widths}"
    check_accessibility(page)
    screenshot(page, "duplicates-mobile")
