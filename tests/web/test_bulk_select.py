"""Multi-select and bulk actions in a real browser: click, shift-click, the keyboard and select
all; moving forty images to a folder with the progress shown while one refused image is named
and the rest move; adding and removing a tag; to the trash, then restore and purge there."""

from __future__ import annotations

import asyncio
import base64
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import pyvips
from fastmcp import Client
from playwright.sync_api import Locator, Page, Route, expect

from .conftest import DESKTOP, MOBILE, RunningServer, check_accessibility, screenshot

pytestmark = pytest.mark.slow


def _png(seed: int) -> bytes:
    """A small picture of its own for each seed (identical bytes would be one image)."""
    xyz = pyvips.Image.xyz(64, 48)
    red = ((xyz[0] * (seed + 2)) % 256).cast("uchar")
    green = ((xyz[1] * 5 + seed) % 256).cast("uchar")
    return red.bandjoin([green, red]).copy(interpretation="srgb").pngsave_buffer()


def _tools(server: RunningServer, key: str, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """MCP tool calls over HTTP as ``key``, in order (a thread: the browser's driver owns this)."""

    async def run() -> list[Any]:
        async with Client(server.url + "/mcp", auth=key) as client:
            return [
                (await client.call_tool(name, arguments)).structured_content
                for name, arguments in calls
            ]

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, run()).result(timeout=120)


def _save(server: RunningServer, key: str, titles: list[str]) -> list[str]:
    """One image per title, saved as an agent would; their ids, oldest first."""
    calls = [
        ("image_asset_save", {"imageBase64": base64.b64encode(_png(seed)).decode(), "title": t})
        for seed, t in enumerate(titles, start=1)
    ]
    return [saved["assetId"] for saved in _tools(server, key, calls)]


def _picked(page: Page) -> Locator:
    return page.locator(".bulk-check:checked")


def _card(page: Page, title: str) -> Locator:
    return page.locator("[data-bulk-item]").filter(has=page.get_by_role("link", name=title))


def test_click_shift_click_keyboard_and_select_all(
    open_page: Callable[..., Page], new_key: Callable[..., str], web_server: RunningServer
) -> None:
    key = new_key("select")
    _save(web_server, key, [f"Shell {n}" for n in range(1, 7)])  # newest first: Shell 6 … 1
    page = open_page(key)
    page.goto("/library")
    count = page.locator("[data-bulk-count]")
    expect(page.locator("[data-bulk-item]")).to_have_count(6)
    # Nothing selected: no actions yet, only the way to select.
    expect(page.get_by_role("button", name="Move to trash")).to_be_hidden()
    expect(page.get_by_role("button", name="Select all on this page")).to_be_visible()

    page.get_by_label("Select Shell 6").click()
    expect(count).to_have_text("1 image selected.")
    page.get_by_label("Select Shell 3").click(modifiers=["Shift"])  # the range 6 … 3
    expect(count).to_have_text("4 images selected.")
    assert [c.get_attribute("value") for c in _picked(page).all()] == [
        _card(page, f"Shell {n}").locator(".bulk-check").get_attribute("value")
        for n in (6, 5, 4, 3)
    ]
    expect(page.get_by_role("button", name="Move to trash")).to_be_visible()
    check_accessibility(page)
    screenshot(page, "library-bulk-selected")
    page.keyboard.press("Escape")
    expect(count).to_have_text("Selection cleared.")
    expect(_picked(page)).to_have_count(0)

    # The keyboard: Tab reaches the first card (one stop for the grid), Space toggles it, the
    # arrows move, Shift+Space and Shift+arrow extend the range, Ctrl+A takes the page.
    first = _card(page, "Shell 6")
    first.focus()
    expect(first).to_be_focused()
    page.keyboard.press("Space")
    expect(count).to_have_text("1 image selected.")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    expect(_card(page, "Shell 4")).to_be_focused()
    page.keyboard.press("Shift+Space")
    expect(count).to_have_text("3 images selected.")
    page.keyboard.press("Shift+ArrowRight")
    expect(_card(page, "Shell 3")).to_be_focused()
    expect(count).to_have_text("4 images selected.")
    page.keyboard.press("Space")  # toggles the focused card off again
    expect(count).to_have_text("3 images selected.")
    page.keyboard.press("Control+a")
    expect(count).to_have_text("All 6 images on this page selected.")
    expect(_picked(page)).to_have_count(6)
    page.keyboard.press("Escape")
    expect(_picked(page)).to_have_count(0)
    page.get_by_role("button", name="Select all on this page").click()
    expect(_picked(page)).to_have_count(6)

    # At phone width the bar wraps; nothing scrolls sideways.
    page.set_viewport_size(MOBILE)
    widths = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1], f"the library scrolls sideways at phone width: {widths}"
    check_accessibility(page)
    screenshot(page, "library-bulk-mobile")
    page.set_viewport_size(DESKTOP)

    # Another page of results starts with nothing selected, and the page says so beforehand.
    expect(page.get_by_text("another page of results, or a new filter, clears it")).to_be_visible()
    page.goto("/library?limit=4")
    page.get_by_role("button", name="Select all on this page").click()
    expect(_picked(page)).to_have_count(4)
    page.get_by_role("link", name="Next").click()
    expect(page.locator("[data-bulk-item]")).to_have_count(2)
    expect(_picked(page)).to_have_count(0)


def test_move_forty_with_progress_tags_trash_restore_and_purge(
    open_page: Callable[..., Page], new_key: Callable[..., str], web_server: RunningServer
) -> None:
    key = new_key("bulk")
    titles = [f"Frame {n:02d}" for n in range(1, 41)]
    ids = _save(web_server, key, titles)
    (project,) = _tools(web_server, key, [("image_project_create", {"name": "Trips"})])
    (folder,) = _tools(
        web_server,
        key,
        [("image_folder_create", {"projectId": project["projectId"], "name": "Norway"})],
    )
    page = open_page(key)
    page.goto("/library?limit=50")
    expect(page.locator("[data-bulk-item]")).to_have_count(40)
    # Meanwhile an agent deletes one of them: the page still offers it, its move is refused.
    # Frame 36 is in the first chunk (newest first): the chunks after it still run.
    _tools(web_server, key, [("image_asset_delete", {"assetId": ids[35]})])

    # The second chunk is held until the test has seen the first one's progress (the page
    # sends a chunk only after the previous one answered).
    sent: list[Route] = []
    held: list[Route] = []

    def hold_second(route: Route) -> None:
        sent.append(route)
        if len(sent) == 2:
            held.append(route)
        else:
            route.continue_()

    page.route("**/bulk/items", hold_second)
    page.get_by_role("button", name="Select all on this page").click()
    page.get_by_label("Move to").select_option(label="Trips/Norway")
    page.get_by_role("button", name="Move", exact=True).click()
    progress = page.locator("progress#bulk-progress")
    expect(page.locator("[data-bulk-done]")).to_have_text("10 of 40")
    expect(progress).to_have_js_property("value", 10)
    expect(progress).to_have_js_property("max", 40)
    check_accessibility(page)
    screenshot(page, "library-bulk-progress")
    assert len(held) == 1, "the second chunk was not held"
    held[0].continue_()
    outcome = page.locator("[data-bulk-outcome]")
    # Thirty single moves, each its own transaction: generous on a busy shared machine.
    expect(outcome).to_contain_text("Moved 39 of 40 images. 1 image refused", timeout=60_000)
    expect(progress).to_have_js_property("value", 40)
    refused = page.get_by_role("list", name="Refused images").get_by_role("listitem")
    expect(refused).to_have_count(1)
    expect(refused).to_contain_text(f"Frame 36 ({ids[35]}): asset not found not_found")
    expect(_picked(page)).to_have_count(1)  # the refused one stays selected
    screenshot(page, "library-bulk-moved")
    where = {"vault": "Library", "projectId": project["projectId"], "limit": 50}
    where["folderId"] = folder["folderId"]
    (listed,) = _tools(web_server, key, [("image_asset_list", where)])
    assert sorted(item["assetId"] for item in listed["items"]) == sorted(ids[:35] + ids[36:])

    # Tags: two images, by click and shift-click.
    page.keyboard.press("Escape")
    page.get_by_label("Select Frame 40").click()
    page.get_by_label("Select Frame 39").click(modifiers=["Shift"])
    page.get_by_label("Tag", exact=True).fill("norway")
    page.get_by_role("button", name="Add tag").click()
    expect(outcome).to_have_text("Tagged 2 of 2 images.")
    got = _tools(web_server, key, [("image_asset_get", {"assetId": i}) for i in ids[38:]])
    assert [item["tags"] for item in got] == [["norway"], ["norway"]]
    page.get_by_label("Select Frame 40").click()
    page.get_by_label("Tag", exact=True).fill("norway")
    page.get_by_role("button", name="Remove tag").click()
    expect(outcome).to_have_text("Untagged 1 of 1 image.")
    got = _tools(web_server, key, [("image_asset_get", {"assetId": i}) for i in ids[38:]])
    assert [item["tags"] for item in got] == [["norway"], []]  # Frame 39, Frame 40

    # To the trash: the cards leave the page.
    for title in ("Frame 01", "Frame 02", "Frame 03"):
        page.get_by_label(f"Select {title}").click()
    page.get_by_role("button", name="Move to trash").click()
    expect(outcome).to_have_text("Moved to the trash 3 of 3 images.")
    expect(page.locator("[data-bulk-item]")).to_have_count(37)

    # In the trash: restore two, then purge the rest after the dialog.
    page.goto("/trash")
    items = page.get_by_role("list", name="Deleted images").get_by_role("listitem")
    expect(items).to_have_count(4)  # the three, and the one the agent deleted
    page.get_by_label("Select Frame 01").click()
    page.get_by_label("Select Frame 02").click()
    page.get_by_role("button", name="Restore selected").click()
    outcome = page.locator("[data-bulk-outcome]")
    expect(outcome).to_have_text("Restored 2 of 2 images.")
    expect(items).to_have_count(2)
    page.keyboard.press("Control+a")
    page.get_by_role("button", name="Purge selected now").click()
    dialog = page.get_by_role("dialog", name="Purge the selected images now?")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("These 2 images cannot be restored")
    expect(dialog.get_by_role("button", name="Keep them")).to_be_focused()
    check_accessibility(page)
    screenshot(page, "trash-bulk-purge-dialog")
    dialog.get_by_role("button", name="Purge now").click()
    expect(outcome).to_have_text("Purged 2 of 2 images.")
    expect(items).to_have_count(0)
    page.goto("/trash")
    expect(page.get_by_role("heading", name="The trash is empty")).to_be_visible()
    page.goto("/library?limit=50")
    expect(page.locator("[data-bulk-item]")).to_have_count(38)
    expect(page.get_by_role("link", name=re.compile("^Frame 0[12]$"))).to_have_count(2)
