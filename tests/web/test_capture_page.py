"""Capture time and camera in a real browser: a photo uploaded with EXIF shows when and with
what it was taken on its asset page, the library sorts by it, and no location is shown while
the server does not keep locations (the default)."""

from __future__ import annotations

import base64
from collections.abc import Callable

import pytest
import pyvips
from playwright.sync_api import Page, expect

from .conftest import check_accessibility, screenshot

pytestmark = pytest.mark.slow


def _photo(day: int, make: str, model: str) -> bytes:
    x = pyvips.Image.xyz(96, 64)
    image = (x[0] * (day + 2) % 256).cast("uchar").bandjoin([(x[1] * 3 % 256).cast("uchar")] * 2)
    image = image.copy(interpretation="srgb").copy()
    for name, value in {
        "exif-ifd0-Make": make,
        "exif-ifd0-Model": model,
        "exif-ifd2-DateTimeOriginal": f"2022:06:{day:02d} 17:45:00",
        "exif-ifd2-OffsetTimeOriginal": "+02:00",
        "exif-ifd3-GPSLatitudeRef": "N",
        "exif-ifd3-GPSLatitude": "59/1 19/1 0/1",
        "exif-ifd3-GPSLongitudeRef": "E",
        "exif-ifd3-GPSLongitude": "18/1 4/1 0/1",
    }.items():
        image.set_type(pyvips.GValue.gstr_type, name, value)
    return image.jpegsave_buffer(Q=85)


def _upload(page: Page, files: list[tuple[str, bytes]]) -> list[str]:
    page.goto("/upload")
    transfer = page.evaluate_handle(
        """(files) => {
            const transfer = new DataTransfer();
            for (const [name, data] of files) {
                const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
                transfer.items.add(new File([bytes], name, { type: "image/jpeg" }));
            }
            return transfer;
        }""",
        [[name, base64.b64encode(data).decode()] for name, data in files],
    )
    page.locator("#drop-zone").dispatch_event("drop", {"dataTransfer": transfer})
    links = page.locator(".upload-row .upload-link:not([hidden])")
    # Generous: uploads wait for the shared server's decode and store, on a busy machine.
    expect(links).to_have_count(len(files), timeout=60_000)
    return [
        (links.nth(i).get_attribute("href") or "").rsplit("/", 1)[-1] for i in range(len(files))
    ]


def _grid_order(page: Page, *asset_ids: str) -> list[str]:
    """The given assets in the order the library's grid links to them."""
    links = page.locator(", ".join(f'a[href="/assets/{a}"]' for a in asset_ids))
    expect(links.first).to_be_visible()
    hrefs = [links.nth(i).get_attribute("href") or "" for i in range(links.count())]
    return [href.rsplit("/", 1)[-1] for href in dict.fromkeys(hrefs)]


def test_the_asset_page_shows_capture_time_and_camera_and_the_library_sorts_by_it(
    open_page: Callable[..., Page], new_key: Callable[..., str]
) -> None:
    page = open_page(new_key("photographer"))
    # The later capture is uploaded first: newest upload first and newest capture first differ.
    [late] = _upload(page, [("late.jpg", _photo(20, "Apple", "iPhone 13 mini"))])
    [early] = _upload(page, [("early.jpg", _photo(2, "NIKON CORPORATION", "NIKON Z 6"))])
    page.goto(f"/assets/{early}")
    taken = page.locator(".asset-taken time")
    expect(taken).to_have_text("2022-06-02 17:45:00+02:00")
    expect(taken).to_have_attribute("datetime", "2022-06-02T17:45:00+02:00")
    expect(page.locator(".asset-camera")).to_have_text("NIKON CORPORATION NIKON Z 6")
    expect(page.locator(".asset-location")).to_have_count(0)  # ASSET_KEEP_LOCATION is off
    check_accessibility(page)
    screenshot(page, "asset-capture")
    # The library by date taken: the later capture first, though it was uploaded first.
    page.goto("/library")
    assert _grid_order(page, early, late) == [early, late]  # newest upload first
    page.goto("/library?order=taken")
    expect(page.locator("#filter-order")).to_have_value("taken")
    assert _grid_order(page, early, late) == [late, early]  # newest capture first
    # "Taken until" 10 June, from the toolbar: only the photo of the 2nd is left.
    page.goto("/library")
    page.get_by_label("Taken until (UTC)").fill("2022-06-10")
    page.get_by_role("button", name="Apply").click()
    page.wait_for_url("**takenUntil=2022-06-10**")
    expect(page.locator(f'a[href="/assets/{early}"]').first).to_be_visible()
    expect(page.locator(f'a[href="/assets/{late}"]')).to_have_count(0)
    expect(page.get_by_label("Taken until (UTC)")).to_have_value("2022-06-10")
    check_accessibility(page)
    screenshot(page, "library-taken-until")
