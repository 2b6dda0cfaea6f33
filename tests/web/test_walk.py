"""The web app's walk, as a person does it in a real browser against a real `memory-server`.

Sign in; create a project and a folder; drop three images onto the upload page and watch them
become ready; find them by words and by an image; edit a title and find it by the new words;
move one into the folder; delete one, find it in the trash and restore it; see usage change;
see the jobs table show the finished work and stop polling when idle; share the library with a
second person and revoke it, after which their browser sees nothing. Every page is checked
with axe-core, and screenshots are saved at desktop and mobile widths (test-output/screenshots).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import pyvips
from playwright.sync_api import JSHandle, Page, expect

from .conftest import (
    DESKTOP,
    JOBS_POLL_MILLISECONDS,
    MOBILE,
    ResponseLog,
    check_accessibility,
    screenshot,
)

pytestmark = pytest.mark.slow


def _photo(seed: int) -> bytes:
    """A 160x120 picture of its own: gradients that differ by seed."""
    xyz = pyvips.Image.xyz(160, 120)
    red = ((xyz[0] * (seed + 1) + xyz[1] * 2) % 256).cast("uchar")
    green = ((xyz[1] * (seed + 3) + 40 * seed) % 256).cast("uchar")
    blue = ((xyz[0] * 2 + xyz[1] * seed) % 256).cast("uchar")
    return red.bandjoin([green, blue]).copy(interpretation="srgb").pngsave_buffer()


def _dropped(page: Page, files: list[tuple[str, bytes]]) -> JSHandle:
    """A DataTransfer of real File objects, as the browser builds for a drop."""
    return page.evaluate_handle(
        """(files) => {
            const transfer = new DataTransfer();
            for (const [name, data] of files) {
                const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
                transfer.items.add(new File([bytes], name, { type: "image/png" }));
            }
            return transfer;
        }""",
        [[name, base64.b64encode(data).decode()] for name, data in files],
    )


def _both_widths(page: Page, name: str) -> None:
    """Check accessibility and save a screenshot at desktop and at mobile width."""
    check_accessibility(page)
    screenshot(page, f"walk-{name}-desktop")
    page.set_viewport_size(MOBILE)
    check_accessibility(page)
    screenshot(page, f"walk-{name}-mobile")
    page.set_viewport_size(DESKTOP)


def _used_bytes(page: Page) -> str:
    page.goto("/usage")
    return page.locator(".usage-numbers dd").first.inner_text()


def test_the_web_walk(
    open_page: Callable[..., Page],
    new_key: Callable[..., str],
    tmp_path: Path,
    response_logs: dict[Page, ResponseLog],
) -> None:
    # 1. Sign in (the key of an owner who also operates the server).
    page = open_page(new_key("walker", scopes="read,write,destructive,admin"))
    expect(page).to_have_url(re.compile(r"/library$"))
    expect(page.get_by_role("link", name="Upload images")).to_be_visible()  # the empty state
    _both_widths(page, "library-empty")
    used_before = _used_bytes(page)
    assert used_before.startswith("0 B"), used_before

    # 2. Create a project, then a folder in it.
    page.goto("/library")
    page.get_by_text("New project").click()
    page.get_by_label("Name", exact=True).fill("Harbour walk")
    page.get_by_role("button", name="Create project").click()
    expect(page.get_by_role("status")).to_contain_text("Harbour walk")
    page.get_by_role("link", name="Harbour walk").click()
    page.get_by_text("New folder").click()
    page.get_by_label("Folder name").fill("Best")
    page.get_by_role("button", name="Create folder").click()
    expect(page.get_by_role("link", name="Best")).to_be_visible()

    # 3. Drop three images onto the upload page, filed in the project.
    page.get_by_role("link", name="Harbour walk").click()
    page.get_by_role("link", name=re.compile("Upload images")).first.click()
    expect(page.locator("#upload-project")).to_have_value(re.compile(r"^apr_"))
    page.get_by_label("Tags for these images").fill("harbour, walk")
    pictures = [(f"harbour-{n}.png", _photo(n)) for n in (1, 2, 3)]
    dropped = _dropped(page, pictures)
    zone = page.locator("#drop-zone")
    for kind in ("dragenter", "dragover", "drop"):
        zone.dispatch_event(kind, {"dataTransfer": dropped})

    # 4. Watch each become ready, live.
    rows = page.locator(".upload-row")
    expect(rows).to_have_count(3)
    expect(page.locator('.upload-row[data-state="ready"]')).to_have_count(3, timeout=60_000)
    expect(page.locator("#upload-summary")).to_have_text("3 of 3 ready")
    _both_widths(page, "upload")

    # 5. Search by words, then by an image.
    page.goto("/search")
    page.get_by_label("Words").fill("harbour")
    page.get_by_role("button", name="Search", exact=True).click()
    hits = page.locator(".search-hit")
    expect(hits).to_have_count(3)
    _both_widths(page, "search-words")
    query = tmp_path / "query.png"
    query.write_bytes(pictures[1][1])
    page.get_by_label("Words").fill("")
    page.get_by_label("Image (or paste one)").set_input_files(str(query))
    page.get_by_role("button", name="Search", exact=True).click()
    expect(page.locator(".search-like")).to_contain_text("query.png")
    expect(hits.first.locator(".search-similarity")).to_have_text("1.000")  # the same picture
    expect(page.locator(".search-verdict")).to_be_visible()

    # 6. Edit its title (a file's name is never used as one) and find it by the new words.
    hits.first.get_by_role("link").first.click()
    page.get_by_label("Title").fill("Lighthouse at dusk")
    page.get_by_role("button", name=re.compile("^Save")).click()
    expect(page.get_by_role("heading", name="Lighthouse at dusk", level=1)).to_be_visible()
    asset_url = page.url
    _both_widths(page, "asset")
    page.goto("/search?query=lighthouse+dusk")
    expect(hits.first).to_contain_text("Lighthouse at dusk")

    # 7. Move it into the folder "Best".
    page.goto(asset_url)
    place = page.get_by_label("Project or folder")
    best = place.locator("option", has_text="Best").get_attribute("value")
    assert best
    place.select_option(value=best)
    page.get_by_role("button", name="Move").click()
    expect(page.get_by_role("status")).to_be_visible()
    page.goto("/library")
    page.get_by_role("link", name="Harbour walk").click()
    page.get_by_role("link", name="Best").click()
    expect(page.locator(".library-grid > li")).to_have_count(1)
    expect(page.locator(".library-grid")).to_contain_text("Lighthouse at dusk")

    # 8. Delete another one, find it in the trash, restore it.
    page.goto("/library")
    cards = page.locator(".library-grid > li")
    expect(cards).to_have_count(3)
    cards.filter(has_not_text="Lighthouse at dusk").first.get_by_role("link").first.click()
    doomed_url = page.url
    page.get_by_role("link", name="Delete…").click()
    page.get_by_role("button", name="Move to trash").click()
    expect(page.get_by_role("status")).to_contain_text("Moved to the trash.")
    expect(cards).to_have_count(2)
    page.get_by_role("link", name="Open the trash").click()
    expect(page.locator(".trash-item")).to_have_count(1)
    _both_widths(page, "trash")
    page.get_by_role("button", name=re.compile("^Restore")).click()
    expect(page.get_by_role("status")).to_be_visible()
    page.goto("/library")
    expect(cards).to_have_count(3)
    page.wait_for_function(
        "() => [...document.querySelectorAll('.library-grid img')].every(i => i.naturalWidth > 0)"
    )
    _both_widths(page, "library")
    page.goto(doomed_url)
    expect(page.get_by_role("link", name="Delete…")).to_be_visible()

    # 9. Usage has grown by what was uploaded.
    used_after = _used_bytes(page)
    assert used_after != used_before and not used_after.startswith("0 B"), used_after
    _both_widths(page, "usage")

    # 10. The jobs table shows the finished embeddings, and polls no more once idle.
    rows_requests: list[str] = []
    page.on("request", lambda r: rows_requests.append(r.url) if "/jobs/rows" in r.url else None)
    page.goto("/jobs?type=embedding")
    expect(page.locator("#jobs-live")).to_have_attribute("data-state", "idle", timeout=30_000)
    expect(page.locator('tr[data-status="done"]').first).to_be_visible()
    _both_widths(page, "jobs")
    seen = len(rows_requests)
    # Absence is seen over time: four polling intervals in which an idle table asks nothing.
    page.wait_for_timeout(JOBS_POLL_MILLISECONDS * 4)
    assert len(rows_requests) == seen, rows_requests

    # 11. Share the library with a second person, who sees it; revoke it, and they see nothing.
    guest_key = new_key("guest", scopes="read")
    guest_email = _guest_email(open_page, guest_key)
    page.goto("/sharing")
    page.get_by_label("Person's e-mail").first.fill(guest_email)
    page.get_by_role("button", name="Share").first.click()
    expect(page.locator("main")).to_contain_text(guest_email)
    guest = open_page(guest_key)
    guest.goto("/library")
    expect(guest.locator(".library-tree")).to_contain_text("Library")
    _both_widths(page, "sharing")
    page.get_by_role("button", name=re.compile(f"Revoke {re.escape(guest_email)}")).click()
    expect(page.locator("main")).not_to_contain_text(f"{guest_email}'s")
    response_logs[guest].allow(404, r"/assets/ast_")  # revoked: the image is not found
    guest.goto(asset_url)
    expect(guest.get_by_role("heading", level=1)).to_have_text(re.compile("Not found"))


def _guest_email(open_page: Callable[..., Page], key: str) -> str:
    """The guest's identity, as their account page shows it."""
    page = open_page(key)
    page.goto("/account")
    return page.locator(".facts dd").first.inner_text().strip()
