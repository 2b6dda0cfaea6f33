"""The library and an asset's page in a real browser: the grid shows its thumbnails, the keyboard
reaches an image and its actions, delete asks in a dialog first, and at phone widths the grid
and the details are labelled lists."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import anyio
import pytest
import pyvips
from fastmcp import Client
from playwright.sync_api import Page, expect

from .conftest import MOBILE, ResponseLog, RunningServer, check_accessibility, screenshot

pytestmark = pytest.mark.slow


def _png(seed: int) -> bytes:
    xyz = pyvips.Image.xyz(64, 48)
    red = ((xyz[0] * (seed + 2)) % 256).cast("uchar")
    green = ((xyz[1] * 5 + seed) % 256).cast("uchar")
    return red.bandjoin([green, red]).copy(interpretation="srgb").pngsave_buffer()


def _save(url: str, key: str, titles: list[str]) -> None:
    """Save one image per title over MCP, as an agent would."""

    async def save() -> None:
        async with Client(url + "/mcp", auth=key) as client:
            for seed, title in enumerate(titles, start=1):
                arguments = {"imageBase64": base64.b64encode(_png(seed)).decode(), "title": title}
                await client.call_tool("image_asset_save", arguments)

    # Playwright's sync API owns this thread's event loop: MCP runs on a thread of its own.
    with ThreadPoolExecutor(1) as pool:
        pool.submit(anyio.run, save).result(timeout=60)


def _thumbnails_loaded(page: Page, count: int) -> None:
    page.wait_for_function(
        """count => {
            const images = [...document.querySelectorAll('.library-grid img')];
            return images.length === count && images.every(i => i.complete && i.naturalWidth > 0);
        }""",
        arg=count,
    )


def test_grid_thumbnails_keyboard_and_delete_dialog(
    open_page: Callable[..., Page], new_key: Callable[..., str], web_server: RunningServer
) -> None:
    key = new_key("library")
    _save(web_server.url, key, ["Harbour", "Lighthouse", "Dunes"])
    page = open_page(key)
    page.goto("/")
    expect(page).to_have_url(re.compile(r"/library$"))
    cards = page.locator(".library-grid > li")
    expect(cards).to_have_count(3)
    _thumbnails_loaded(page, 3)
    expect(cards.first).to_contain_text("Dunes")  # newest first
    expect(cards.first).to_contain_text("64 \u00d7 48")
    check_accessibility(page)
    screenshot(page, "library-desktop")

    # The keyboard reaches the newest image's link and opens it.
    link = page.get_by_role("link", name="Dunes")
    link.focus()
    expect(link).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Dunes", level=1)).to_be_visible()
    page.wait_for_function("() => document.querySelector('.asset-preview img').naturalWidth > 0")
    check_accessibility(page)
    screenshot(page, "asset-desktop")

    # Delete asks first; Escape leaves everything as it was.
    delete = page.get_by_role("link", name="Delete…")
    delete.focus()
    page.keyboard.press("Enter")
    dialog = page.locator("#asset-delete-dialog")
    expect(dialog).to_be_visible()
    # Deleting is the destructive choice: Cancel has the focus (test_page_polish.py).
    expect(dialog.get_by_role("link", name="Cancel")).to_be_focused()
    check_accessibility(page)
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(page).to_have_url(re.compile(r"/assets/ast_\w+$"))
    # Asked again and confirmed by keyboard: to the trash, and the library says where it went.
    delete.focus()
    page.keyboard.press("Enter")
    page.keyboard.press("Shift+Tab")  # from Cancel back to "Move to trash"
    expect(page.get_by_role("button", name="Move to trash")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"/library$"))
    expect(page.get_by_role("status")).to_contain_text("Moved to the trash.")
    expect(page.get_by_role("link", name="Open the trash")).to_have_attribute("href", "/trash")
    expect(cards).to_have_count(2)
    expect(page.locator(".library-grid")).not_to_contain_text("Dunes")


def test_library_and_asset_page_at_phone_width(
    open_page: Callable[..., Page],
    new_key: Callable[..., str],
    web_server: RunningServer,
    response_logs: dict[Page, ResponseLog],
) -> None:
    key = new_key("phone")
    _save(web_server.url, key, ["Pier"])
    page = open_page(key, MOBILE)
    page.goto("/library")
    _thumbnails_loaded(page, 1)
    card = page.locator(".library-grid > li").first
    # Every value of a card carries its visible label.
    for label in ("Size", "Status", "Added"):
        expect(card.locator("dt", has_text=label)).to_be_visible()
    check_accessibility(page)
    screenshot(page, "library-mobile")
    page.get_by_role("link", name="Pier").click()
    expect(page.get_by_role("heading", name="Pier", level=1)).to_be_visible()
    expect(page.locator(".asset-facts dt", has_text="SHA-256")).to_be_visible()
    check_accessibility(page)
    screenshot(page, "asset-mobile")
    page.get_by_role("link", name="Delete…").click()
    dialog = page.locator("#asset-delete-dialog")
    expect(dialog).to_be_visible()
    box = dialog.bounding_box()
    assert box is not None and box["height"] >= MOBILE["height"] - 1  # the full height
    page.get_by_role("link", name="Cancel").click()
    expect(dialog).to_be_hidden()
    # The confirmation page (for a browser without scripts) and a refused filter.
    page.goto(page.url + "/delete")
    expect(page.get_by_role("button", name="Move to trash")).to_be_visible()
    check_accessibility(page)
    response_logs[page].allow(422, r"/library\?mime=text/html$")  # the filter is refused
    page.goto("/library?mime=text/html")
    expect(page.get_by_role("alert")).to_contain_text("mimeTypes")
    check_accessibility(page)
    screenshot(page, "library-refused-filter-mobile")


def _save_in_a_long_folder(url: str, key: str) -> tuple[str, str, str]:
    """A project, a folder with a long name, and one image in it: their ids."""

    async def save() -> tuple[str, str, str]:
        async with Client(url + "/mcp", auth=key) as client:
            project = (await client.call_tool("image_project_create", {"name": "Trips"})).data
            name = "Norway in winter, the long way round by every ferry on the coast"
            arguments = {"projectId": project.projectId, "name": name}
            folder = (await client.call_tool("image_folder_create", arguments)).data
            arguments = {
                "imageBase64": base64.b64encode(_png(7)).decode(),
                "title": "Fjord",
                "projectId": project.projectId,
                "folderId": folder.folderId,
            }
            saved = (await client.call_tool("image_asset_save", arguments)).data
            return project.projectId, folder.folderId, saved.assetId

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(anyio.run, save).result(timeout=60)


def test_nothing_scrolls_sideways_at_phone_width_with_a_long_folder_name(
    open_page: Callable[..., Page], new_key: Callable[..., str], web_server: RunningServer
) -> None:
    key = new_key("narrow")
    project_id, folder_id, asset_id = _save_in_a_long_folder(web_server.url, key)
    page = open_page(key, MOBILE)
    for path in (
        f"/assets/{asset_id}",  # the Move select lists the folder's path
        f"/upload?vault=Library&projectId={project_id}&folderId={folder_id}",
        "/usage",  # labelled lists in place of tables
        "/sharing",
    ):
        page.goto(path)
        widths = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
        assert widths[0] <= widths[1], f"{path} scrolls sideways at phone width: {widths}"
    page.goto(f"/assets/{asset_id}")
    page.get_by_role("link", name="Delete…").click()
    box = page.locator("#asset-delete-dialog").bounding_box()
    assert box is not None and box["width"] >= MOBILE["width"] - 1  # the full width, no more
