"""Upload and Search in a real browser against a real server: three images dropped at once, each
with its own progress bar, watched until ready; then found by words and by an image."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anyio
import pytest
import pyvips
from fastmcp import Client as MCPClient
from playwright.sync_api import Browser, JSHandle, Page, expect

from memory_db import new_id
from memory_db.testing.s3_peers import S3Peer
from memory_tools.testing.keys import new_key as make_key

from ..e2e.test_processes import _env, serve_http
from .conftest import (
    MOBILE,
    ResponseLog,
    RunningServer,
    check_accessibility,
    screenshot,
    sign_in,
)


def _png(seed: int) -> bytes:
    xyz = pyvips.Image.xyz(96, 64)
    red = ((xyz[0] * (seed + 2) + xyz[1]) % 256).cast("uchar")
    green = ((xyz[1] * (seed + 4)) % 256).cast("uchar")
    blue = ((xyz[0] + seed * 37) % 256).cast("uchar")
    return red.bandjoin([green, blue]).copy(interpretation="srgb").pngsave_buffer()


def _files(page: Page, files: list[tuple[str, str, bytes]]) -> JSHandle:
    """A DataTransfer holding real File objects, as the browser makes for a drop or a paste."""
    return page.evaluate_handle(
        """(files) => {
            const transfer = new DataTransfer();
            for (const [name, type, data] of files) {
                const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
                transfer.items.add(new File([bytes], name, { type }));
            }
            return transfer;
        }""",
        [[name, kind, base64.b64encode(data).decode()] for name, kind, data in files],
    )


def test_three_images_dropped_at_once_each_progress_and_become_ready_then_found(
    open_page: Callable[..., Page], new_key: Callable[..., str], tmp_path: Path
) -> None:
    page = open_page(new_key("uploader"))
    state_requests: list[str] = []
    page.on(
        "request", lambda r: state_requests.append(r.url) if r.url.find("/state?") > 0 else None
    )
    page.goto("/upload")
    expect(page.get_by_role("heading", name="Upload images")).to_be_visible()
    # The page's own styles apply at desktop width too: a drop zone, rows in columns.
    expect(page.locator("#drop-zone")).to_have_css("border-top-style", "dashed")
    expect(page.locator("#upload-list")).to_have_css("list-style-type", "none")
    check_accessibility(page)
    page.get_by_label("Tags for these images").fill("harbour, evening")

    # A drop as the browser delivers it: dragenter, dragover, drop, carrying real Files.
    images = [(f"harbour-{n}.png", "image/png", _png(n)) for n in (1, 2, 3)]
    dropped = _files(page, [*images, ("notes.txt", "text/plain", b"not an image")])
    zone = page.locator("#drop-zone")
    for kind in ("dragenter", "dragover"):
        zone.dispatch_event(kind, {"dataTransfer": dropped})
    expect(zone).to_have_class(re.compile("drop-active"))
    zone.dispatch_event("drop", {"dataTransfer": dropped})
    expect(zone).not_to_have_class(re.compile("drop-active"))

    rows = page.locator(".upload-row")
    expect(rows).to_have_count(4)
    # The text file is refused before anything is sent, with the server's rule and code.
    refused = rows.filter(has_text="notes.txt")
    expect(refused.locator(".status-text")).to_have_text("Refused")
    expect(refused.locator(".upload-error")).to_contain_text("invalid_input")
    expect(refused.locator(".upload-error")).to_contain_text("image/jpeg, image/png")
    # Each image: its own bar filled to its size, then Ready (icon, word and colour).
    ready = page.locator('.upload-row[data-state="ready"]')
    expect(ready).to_have_count(3, timeout=30_000)
    for name, _kind, data in images:
        row = rows.filter(has_text=name)
        expect(row.locator(".status-text")).to_have_text("Ready")
        expect(row.locator(".status-icon")).to_have_text("✓")
        bar = row.locator("progress")
        assert bar.evaluate("(p) => [p.value, p.max]") == [len(data), len(data)]
        expect(row.get_by_role("link", name="Open")).to_have_attribute(
            "href", re.compile(r"^/assets/ast_")
        )
    expect(page.locator("#upload-summary")).to_have_text("3 of 4 ready, 1 failed")
    # A file over ASSET_MAX_BYTES is refused before a byte is sent, in the server's words.
    limit = int(page.locator("#upload-form").get_attribute("data-max-bytes") or "0")
    big = page.evaluate_handle(
        """(size) => {
            const transfer = new DataTransfer();
            transfer.items.add(new File([new Uint8Array(size)], "huge.png", {type: "image/png"}));
            return transfer;
        }""",
        limit + 1,
    )
    zone.dispatch_event("drop", {"dataTransfer": big})
    huge = rows.filter(has_text="huge.png")
    expect(huge.locator(".status-text")).to_have_text("Refused")
    expect(huge.locator(".upload-error")).to_contain_text(
        f"contentLength: must be between 1 and {limit} bytes"
    )
    expect(page.locator("#upload-summary")).to_have_text("3 of 5 ready, 2 failed")
    # Waiting is a long request per image, answered when the worker is done: no tight loop.
    assert 3 <= len(state_requests) <= 9, state_requests
    check_accessibility(page)
    screenshot(page, "upload-desktop")
    page.set_viewport_size(MOBILE)
    screenshot(page, "upload-mobile")
    check_accessibility(page)

    # Search by words: the tags given at upload time.
    page.goto("/search")
    check_accessibility(page)
    page.get_by_label("Words").fill("harbour")
    page.get_by_role("button", name="Search", exact=True).click()
    expect(page).to_have_url(re.compile(r"/search\?query=harbour(&limit=10)?$"))
    hits = page.locator(".search-hit")
    expect(hits).to_have_count(3)
    expect(page.locator(".search-verdict")).to_contain_text("3 results, best first.")
    expect(hits.first.locator('.badge[data-kind="metadata"]')).to_have_text("words")
    # Every preview is a signed link that loaded.
    for image in hits.locator("img").all():
        expect(image).to_have_js_property("complete", True)
        assert image.evaluate("(img) => img.naturalWidth") > 0
    page.get_by_text("Filters", exact=True).click()
    expect(page.get_by_label("Only untagged")).to_be_visible()
    check_accessibility(page)
    screenshot(page, "search-mobile")
    page.set_viewport_size({"width": 1280, "height": 860})

    # Search by an image chosen with the file picker: the same picture comes first.
    query = tmp_path / "query.png"
    query.write_bytes(images[1][2])
    page.get_by_label("Words").fill("")
    page.get_by_label("Image (or paste one)").set_input_files(str(query))
    expect(page.locator("#search-image-chosen")).to_contain_text("query.png")
    page.get_by_role("button", name="Search", exact=True).click()
    expect(page.locator(".search-like")).to_contain_text("Like the image query.png")
    first = hits.first
    expect(first.locator(".search-similarity")).to_have_text(re.compile(r"^(1\.000|0\.99\d)$"))
    # An identical picture scores at the top of the range (1.0 only when also first in the
    # fused list; these images have no words, so no fused vector: 0.957).
    expect(first.locator(".search-score")).to_have_text(re.compile(r"^(1\.000|0\.9[5-9]\d)$"))
    screenshot(page, "search-desktop")

    # A pasted image (Ctrl+V): it becomes the query image; with words, both are searched.
    page.goto("/search")
    pasted = _files(page, [("", "image/png", images[2][2])])
    page.evaluate(
        "(transfer) => document.dispatchEvent("
        "new ClipboardEvent('paste', {clipboardData: transfer, bubbles: true}))",
        pasted,
    )
    expect(page.locator("#search-image-chosen")).to_contain_text("KB")
    page.get_by_label("Words").fill("evening")
    page.get_by_role("button", name="Search", exact=True).click()
    expect(hits.first).to_be_visible()
    expect(page.get_by_label("Words")).to_have_value("evening")
    assert page.locator(".search-verdict").inner_text().startswith(("✓", "⚠"))


def test_a_search_that_finds_nothing_says_so_with_an_action(
    open_page: Callable[..., Page], new_key: Callable[..., str]
) -> None:
    page = open_page(new_key("seeker"))
    page.goto("/search?query=volcano")
    expect(page.locator(".search-verdict")).to_contain_text("Nothing found")
    page.get_by_role("link", name="Upload images").click()
    expect(page).to_have_url(re.compile(r"/upload$"))


def test_on_s3_the_browser_puts_each_file_to_the_bucket_the_page_policy_allows(
    browser: Browser, moto_peer: S3Peer, tmp_path: Path
) -> None:
    """With an S3 store the signed PUT goes to the bucket's endpoint: the page's CSP allows that
    origin in connect-src, and the bucket's CORS rule (docs/web.md) lets the browser send it."""
    bucket = "web" + new_id("aob")[4:16]
    client = moto_peer.client()
    client.create_bucket(Bucket=bucket)
    env = _env(
        tmp_path,
        ASSET_STORAGE_PROVIDER="s3",
        ASSET_S3_BUCKET=bucket,
        ASSET_S3_REGION=moto_peer.region,
        ASSET_S3_ENDPOINT=moto_peer.endpoint_url,
        ASSET_S3_FORCE_PATH_STYLE="true",
        ASSET_S3_ACCESS_KEY_ID=moto_peer.access_key_id,
        ASSET_S3_SECRET_ACCESS_KEY=moto_peer.secret_access_key,
        ASSET_WORKER_SWEEP_SECONDS="1",
    )
    with serve_http(env, capture=False) as (url, _process):
        client.put_bucket_cors(
            Bucket=bucket,
            CORSConfiguration={
                "CORSRules": [
                    {
                        "AllowedOrigins": [url],
                        "AllowedMethods": ["PUT"],
                        "AllowedHeaders": ["Content-Type"],
                        "MaxAgeSeconds": 3600,
                    }
                ]
            },
        )
        key = make_key(env, "s3-uploader@example.com")
        context = browser.new_context(base_url=url)
        try:
            page = context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            puts: list[str] = []
            page.on("request", lambda r: puts.append(r.url) if r.method == "PUT" else None)
            sign_in(page, key)
            answer = page.goto("/upload")
            assert answer is not None
            policy = answer.headers["content-security-policy"]
            assert f"connect-src 'self' {moto_peer.endpoint_url}" in policy
            picked = tmp_path / "bucket.png"
            picked.write_bytes(_png(8))
            page.get_by_label("Choose images").set_input_files(str(picked))
            row = page.locator(".upload-row")
            expect(row.locator(".status-text")).to_have_text("Ready", timeout=30_000)
            assert len(puts) == 1 and puts[0].startswith(f"{moto_peer.endpoint_url}/{bucket}/")
            # The preview on the search page: the preview route redirects to the bucket, which
            # the page's policy allows for images, and it loads.
            href = row.get_by_role("link").get_attribute("href") or ""
            asset_id = href.rsplit("/", 1)[-1]
            with page.expect_response(
                lambda answer: answer.url.startswith(f"{moto_peer.endpoint_url}/{bucket}/")
            ) as from_bucket:
                page.goto(f"/search?assetId={asset_id}")
            assert from_bucket.value.status == 200
            preview = page.locator(".search-hit img").first
            expect(preview).to_have_attribute("src", f"/app/previews/{asset_id}")
            expect(preview).to_have_js_property("complete", True)
            assert preview.evaluate("(img) => img.naturalWidth") > 0
            assert not errors, errors
        finally:
            context.close()


def test_a_file_over_the_quota_is_refused_in_its_row_with_the_code(
    open_page: Callable[..., Page],
    web_server: RunningServer,
    response_logs: dict[Page, ResponseLog],
) -> None:
    owner = f"small-quota-{new_id('aob')[4:12]}@example.com"
    page = open_page(make_key(web_server.env, owner, "read,write", quota_bytes=1_000_000))
    response_logs[page].allow(507, r"/app/uploads$")  # quota_exceeded, shown in its row
    page.goto("/upload")
    big = page.evaluate_handle(
        """() => {
            const transfer = new DataTransfer();
            const bytes = new Uint8Array(1500000);
            transfer.items.add(new File([bytes], "poster.png", {type: "image/png"}));
            return transfer;
        }"""
    )
    page.locator("#drop-zone").dispatch_event("drop", {"dataTransfer": big})
    row = page.locator(".upload-row")
    expect(row.locator(".status-text")).to_have_text("Refused")
    expect(row.locator(".error-code")).to_have_text("quota_exceeded")
    expect(row.locator(".error-message")).to_contain_text("quota")
    expect(row.locator(".status-icon")).to_have_text("✕")


def _words_png(words: str) -> bytes:
    """A screenshot-like PNG of ``words`` in large dark type, which the server's OCR reads."""
    mask = pyvips.Image.text(words, font="DejaVu Sans 20", dpi=72)
    page = (pyvips.Image.black(mask.width + 60, mask.height + 50, bands=3) + 250).cast("uchar")
    alpha = mask.embed(30, 25, page.width, page.height) / 255.0
    inked = (page * (1 - alpha) + alpha * 20).cast("uchar").copy(interpretation="srgb")
    return inked.pngsave_buffer()


def _save_and_read(url: str, key: str) -> str:
    """Over MCP: a tagged image, a screenshot whose words only OCR reads, and one unrelated; the
    screenshot's id once its text was read."""

    async def save() -> str:
        async with MCPClient(url + "/mcp", auth=key) as client:
            for data, title, tags in (
                (_png(11), "Quay at dusk", ["lighthouse"]),
                (_png(12), "Birthday cake", []),
            ):
                arguments = {"imageBase64": base64.b64encode(data).decode(), "title": title}
                await client.call_tool("image_asset_save", {**arguments, "tags": tags})
            read = await client.call_tool(
                "image_asset_save",
                {
                    "imageBase64": base64.b64encode(_words_png("LIGHTHOUSE TOURS daily")).decode(),
                    "title": "Boats",
                },
            )
            asset_id = str((read.structured_content or {})["assetId"])
            # OCR runs in the server's worker on a shared machine: wait for its text (an event
            # we poll for), with a deadline generous enough for a busy two-core machine.
            with anyio.fail_after(180):
                while True:
                    got = await client.call_tool("image_asset_get", {"assetId": asset_id})
                    found = (got.structured_content or {}).get("textInImage") or {}
                    if "lighthouse" in str(found.get("text") or "").lower():
                        return asset_id
                    await anyio.sleep(0.2)

    # Playwright's sync API owns this thread's event loop: MCP runs on a thread of its own.
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(anyio.run, save).result(timeout=240)


@pytest.mark.usefixtures("embedded_data_dir")  # a migrated database in tmp_path/data
def test_a_words_only_search_shows_each_cards_score_above_zero_and_what_matched(
    browser: Browser, tmp_path: Path
) -> None:
    """Issue 30: a search by words showed Score 0.000 on every card for tag and OCR matches and
    named visual among what matched; the score now orders the cards and only what counted is
    named, in words. A server of its own: the shared one has OCR off (tests/e2e ``_env``)."""
    env = _env(tmp_path, ASSET_WORKER_SWEEP_SECONDS="1", ASSET_OCR="screenshots")
    with serve_http(env, capture=False) as (url, _process):
        key = make_key(env, "reader@example.com")
        read = _save_and_read(url, key)
        context = browser.new_context(base_url=url)
        try:
            page = context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            sign_in(page, key)
            page.goto("/search?query=lighthouse")
            hits = page.locator(".search-hit")
            expect(hits).to_have_count(2)
            score_texts = hits.locator("dt:text-is('Score') + dd").all_inner_texts()
            scores = [float(text) for text in score_texts]
            assert all(0 < score <= 1 for score in scores), scores
            assert scores == sorted(scores, reverse=True), scores
            expect(page.locator(".search-score-help")).to_contain_text(
                "0 to 1, higher matches better"
            )
            # Not the picture alone: a text query against an image-only vector is no evidence.
            expect(page.locator('.search-hit .badge[data-kind="visual"]')).to_have_count(0)
            for card in hits.all():
                words = card.locator('.badge[data-kind="metadata"]')
                expect(words).to_have_text("words")
                expect(words).to_have_attribute("title", re.compile("text read in it"))
            # The screenshot is found by the words OCR read in it.
            expect(hits.locator(f'a.search-hit-title[href="/assets/{read}"]')).to_have_count(1)
            check_accessibility(page)
            screenshot(page, "search-words-scores")
            assert not errors, errors
        finally:
            context.close()
