"""The asset page's forms in a real browser, at phone width: a refused edit is seen where the
eye is and leaves an address that works; the other forms and buttons of the page and of the
library and upload toolbars do what they say, and no request they make is refused."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable

import pytest
import pyvips
from playwright.sync_api import Page, expect

from .conftest import MOBILE

pytestmark = pytest.mark.slow


def _png(seed: int) -> bytes:
    xyz = pyvips.Image.xyz(120, 90)
    red = ((xyz[0] * (seed + 3) + xyz[1]) % 256).cast("uchar")
    green = ((xyz[1] * (seed + 5)) % 256).cast("uchar")
    blue = ((xyz[0] + seed * 29) % 256).cast("uchar")
    return red.bandjoin([green, blue]).copy(interpretation="srgb").pngsave_buffer()


def upload(page: Page, names: list[str], *, seed: int = 0, tags: str = "") -> list[str]:
    """Drop PNGs named ``names`` on the upload page; their asset ids once each is saved."""
    page.goto("/upload")
    page.get_by_label("Tags for these images").fill(tags)
    transfer = page.evaluate_handle(
        """(files) => {
            const transfer = new DataTransfer();
            for (const [name, data] of files) {
                const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
                transfer.items.add(new File([bytes], name, { type: "image/png" }));
            }
            return transfer;
        }""",
        [[name, base64.b64encode(_png(seed + n)).decode()] for n, name in enumerate(names)],
    )
    page.locator("#drop-zone").dispatch_event("drop", {"dataTransfer": transfer})
    links = page.locator(".upload-row .upload-link:not([hidden])")
    expect(links).to_have_count(len(names), timeout=60_000)
    return [
        (links.nth(i).get_attribute("href") or "").rsplit("/", 1)[-1] for i in range(len(names))
    ]


def test_a_refused_edit_on_a_phone_shows_its_error_in_view_and_its_address_reloads(
    open_page: Callable[..., Page], new_key: Callable[..., str]
) -> None:
    page = open_page(new_key("phone-editor"), viewport=MOBILE)
    [asset_id] = upload(page, ["quay.png"])
    page.goto(f"/assets/{asset_id}")
    title = page.get_by_role("heading", level=1).inner_text()
    page.get_by_label("Title").fill("   ")  # passes the browser's `required`, not the server
    page.get_by_label("Description").fill("typed on a phone")
    page.get_by_label("Tags").fill("quay, dusk")
    page.get_by_role("button", name="Save").click()

    # The address is the asset page (post-redirect-get), at the message.
    expect(page).to_have_url(re.compile(rf"/assets/{asset_id}#asset-edit-error$"))
    alert = page.get_by_role("alert")
    expect(alert).to_have_count(1)
    expect(alert).to_contain_text("title: cannot be empty")
    expect(alert).to_contain_text("invalid_input")
    expect(alert).to_be_in_viewport()
    expect(alert).to_be_focused()
    # What was typed is kept; nothing was saved.
    expect(page.get_by_label("Description")).to_have_value("typed on a phone")
    expect(page.get_by_label("Tags")).to_have_value("quay, dusk")
    expect(page.get_by_role("heading", level=1)).to_have_text(title)

    # Reloading shows the page again (the message was shown once), never a 405.
    answer = page.reload()
    assert answer is not None and answer.status == 200
    expect(page.get_by_role("alert")).to_have_count(0)
    # The form's own address, opened as a bookmark, lands on the asset page.
    for action in ("edit", "move"):
        answer = page.goto(f"/assets/{asset_id}/{action}")
        assert answer is not None and answer.status == 200
        expect(page).to_have_url(re.compile(rf"/assets/{asset_id}$"))

    # A save that is accepted: the notice, the new title.
    page.get_by_label("Title").fill("Quay at dusk")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status").filter(has_text="Saved.")).to_be_visible()
    expect(page.get_by_role("heading", level=1)).to_have_text("Quay at dusk")


def test_every_other_form_and_button_of_the_asset_library_and_upload_pages(
    open_page: Callable[..., Page], new_key: Callable[..., str]
) -> None:
    page = open_page(new_key("clicker"))
    first, second = upload(page, ["one.png", "two.png"], seed=10)

    # Upload: the target form's Apply keeps the chosen vault.
    page.get_by_role("button", name="Apply").click()
    expect(page).to_have_url(re.compile(r"/upload\?vault=Library"))

    # Library: a project, then the toolbar's filters and order (Apply).
    page.goto("/library")
    page.get_by_text("New project").click()
    page.get_by_label("Name", exact=True).fill("Docks")
    page.get_by_role("button", name="Create project").click()
    expect(page.get_by_role("status")).to_contain_text("Docks")
    page.goto("/library")
    page.locator("#filter-order").select_option("oldest")
    page.locator("#filter-mime").select_option("image/png")
    page.get_by_role("button", name="Apply").click()
    expect(page).to_have_url(re.compile(r"mimeTypes=image%2Fpng.*order=oldest"))
    cards = page.locator(".library-card-link")
    expect(cards).to_have_count(2)
    oldest_first = [cards.nth(i).get_attribute("href") or "" for i in (0, 1)]
    assert sorted(oldest_first) == sorted([f"/assets/{first}", f"/assets/{second}"])
    for image in page.locator(".library-card img").all():
        expect(image).to_have_js_property("complete", True)
        assert image.evaluate("(img) => img.naturalWidth") > 0

    # The asset page: the preview loads, Download original answers the bytes, Move moves.
    page.goto(f"/assets/{first}")
    preview = page.locator(".asset-preview img")
    expect(preview).to_have_js_property("complete", True)
    assert preview.evaluate("(img) => img.naturalWidth") > 0
    with page.expect_download() as download:
        page.get_by_role("link", name="Download original").click()
    assert download.value.suggested_filename == f"{first}.png"
    page.get_by_label("Project or folder").select_option(label="Docks")
    page.get_by_role("button", name="Move").click()
    expect(page.get_by_role("status")).to_have_text(re.compile("Moved."))
    # Delete through the dialog; the confirmation page (no scripts) asks the same.
    page.goto(f"/assets/{second}/delete")
    expect(page.get_by_role("button", name="Move to trash")).to_be_visible()
    page.goto(f"/assets/{second}")
    page.get_by_role("link", name="Delete…").click()
    page.get_by_role("dialog").get_by_role("button", name="Move to trash").click()
    expect(page).to_have_url(re.compile(r"/library$"))
    expect(page.get_by_role("status")).to_contain_text("Moved to the trash.")
    # The trash shows its preview through the same route.
    page.goto("/trash")
    trashed = page.locator(".trash-preview img")
    expect(trashed).to_have_js_property("complete", True)
    assert trashed.evaluate("(img) => img.naturalWidth") > 0
    # Sign out from the header.
    page.get_by_role("button", name="Sign out").first.click()
    expect(page).to_have_url(re.compile(r"/sign-in"))
