"""Upload and Search in a real browser against a real server: three images dropped at once, each
with its own progress bar, watched until ready; then found by words and by an image."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from pathlib import Path

import pyvips
from playwright.sync_api import JSHandle, Page, expect

from .conftest import MOBILE, check_accessibility, screenshot


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
    expect(hits.first.locator(".badge", has_text="metadata")).to_be_visible()
    # Every preview is a signed link that loaded.
    for image in hits.locator("img").all():
        expect(image).to_have_js_property("complete", True)
        assert image.evaluate("(img) => img.naturalWidth") > 0
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
    expect(hits.first.locator(".facts dd").first).to_have_text(re.compile(r"^(1\.000|0\.99\d)$"))
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
