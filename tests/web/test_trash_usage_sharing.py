"""The trash, usage and sharing pages in a real browser: restore and purge from the trash (with
its confirmation dialog), the usage bar and chart, and granting then revoking a share."""

from __future__ import annotations

import asyncio
import base64
import re
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from fastmcp import Client
from playwright.sync_api import Page, expect

from memory_tools.testing.keys import new_key as make_key

from ..e2e.test_processes import _png
from .conftest import MOBILE, ResponseLog, RunningServer, check_accessibility, screenshot

pytestmark = pytest.mark.slow


def _tools(server: RunningServer, key: str, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """Run MCP tool calls over HTTP as ``key`` (in a thread: the browser's driver owns this one)."""

    async def run() -> list[Any]:
        async with Client(server.url + "/mcp", auth=key) as client:
            return [
                (await client.call_tool(name, arguments)).structured_content
                for name, arguments in calls
            ]

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, run()).result()


def _deleted(server: RunningServer, key: str, seed: int, title: str) -> str:
    saved = _tools(
        server,
        key,
        [
            (
                "image_asset_save",
                {"imageBase64": base64.b64encode(_png(seed)).decode(), "title": title},
            )
        ],
    )[0]
    _tools(server, key, [("image_asset_delete", {"assetId": saved["assetId"]})])
    return str(saved["assetId"])


def test_restore_and_purge_from_the_trash(
    open_page: Callable[..., Page], new_key: Callable[..., str], web_server: RunningServer
) -> None:
    key = new_key("trash")
    _deleted(web_server, key, 11, "Harbour at dusk")
    _deleted(web_server, key, 12, "Pier in fog")
    page = open_page(key)
    page.goto("/trash")
    items = page.get_by_role("list", name="Deleted images").get_by_role("listitem")
    expect(items).to_have_count(2)
    expect(page.get_by_role("img", name="Pier in fog")).to_be_visible()
    check_accessibility(page)
    screenshot(page, "trash-desktop")

    page.get_by_role("button", name="Restore Harbour at dusk").click()
    expect(page.get_by_role("status")).to_contain_text("Restored where it was")
    expect(items).to_have_count(1)

    # Purging asks first; keeping it changes nothing.
    page.get_by_role("button", name="Purge now Pier in fog").click()
    dialog = page.get_by_role("dialog", name="Purge “Pier in fog” now?")
    expect(dialog).to_be_visible()
    # It cannot be undone: the safe choice has the focus, so Enter keeps the image.
    expect(dialog.get_by_role("button", name="Keep it")).to_be_focused()
    check_accessibility(page)
    dialog.get_by_role("button", name="Keep it").click()
    expect(dialog).to_be_hidden()
    expect(items).to_have_count(1)
    expect(page.get_by_role("button", name="Purge now Pier in fog")).to_be_focused()
    page.get_by_role("button", name="Purge now Pier in fog").click()
    dialog.get_by_role("button", name="Purge now").click()
    expect(page.get_by_role("status")).to_contain_text("the image and its bytes are gone")
    expect(page.get_by_role("heading", name="The trash is empty")).to_be_visible()
    page.get_by_role("link", name="Go to the library").click()
    page.wait_for_url("**/library")


def test_trash_at_mobile_width(
    open_page: Callable[..., Page], new_key: Callable[..., str], web_server: RunningServer
) -> None:
    key = new_key("trash-mobile")
    _deleted(web_server, key, 13, "Lighthouse")
    page = open_page(key, MOBILE)
    page.goto("/trash")
    page.get_by_role("button", name="Purge now Lighthouse").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    box = dialog.bounding_box()
    assert box is not None and box["height"] >= MOBILE["height"] - 2  # full height
    screenshot(page, "trash-purge-dialog-mobile")
    dialog.get_by_role("button", name="Keep it").click()
    check_accessibility(page)
    screenshot(page, "trash-mobile")


def test_usage_shows_the_bar_and_no_tokens_for_the_offline_embedder(
    open_page: Callable[..., Page], new_key: Callable[..., str], web_server: RunningServer
) -> None:
    key = new_key("usage")
    saved = _tools(
        web_server,
        key,
        [("image_asset_save", {"imageBase64": base64.b64encode(_png(14)).decode()})],
    )[0]
    # The server's worker embeds it; the local embedder counts its inputs in the ledger.
    _tools(web_server, key, [("image_asset_get", {"assetId": saved["assetId"], "waitSeconds": 20})])
    page = open_page(key)
    page.goto("/usage")
    bar = page.get_by_role("img", name=re.compile(r" of 10\.0 GiB taken"))
    expect(bar).to_be_visible()
    assert float(bar.locator(".usage-quota-used").get_attribute("width") or 0) > 0
    # No provider bills the offline embedder: no "Provider tokens" section, chart or table.
    expect(page.get_by_role("heading", name="By project")).to_be_visible()
    expect(page.get_by_text("Provider tokens")).to_have_count(0)
    expect(page.get_by_role("table")).to_have_count(1)  # by project only
    expect(page.locator("main")).not_to_contain_text("local-hash-v1")
    check_accessibility(page)
    screenshot(page, "usage-desktop")
    page.set_viewport_size(MOBILE)
    check_accessibility(page)
    screenshot(page, "usage-mobile")


def test_grant_then_revoke_a_share(
    open_page: Callable[..., Page],
    web_server: RunningServer,
    response_logs: dict[Page, ResponseLog],
) -> None:
    tag = uuid.uuid4().hex[:8]
    owner = f"owner-{tag}@example.com"
    friend = f"friend-{tag}@example.com"
    key = make_key(web_server.env, owner)
    make_key(web_server.env, friend, "read")
    page = open_page(key)
    response_logs[page].allow(404, r"/sharing/grant$")  # an address with no identity here
    page.goto("/sharing")
    expect(page.get_by_text("Not shared with anyone")).to_be_visible()
    page.get_by_label("Person's e-mail").fill("nobody-" + friend)
    page.get_by_role("button", name="Share").click()
    expect(page.get_by_role("alert")).to_contain_text("no identity nobody-")
    expect(page.get_by_label("Person's e-mail")).to_have_value("nobody-" + friend)
    page.get_by_label("Person's e-mail").fill(friend)
    page.get_by_label("Permission").select_option("write")
    page.get_by_role("button", name="Share").click()
    expect(page.get_by_role("status")).to_contain_text(f"shared with {friend} (write)")
    row = page.get_by_role("row").filter(has_text=friend)
    expect(row).to_contain_text("write")
    check_accessibility(page)
    screenshot(page, "sharing-desktop")
    page.set_viewport_size(MOBILE)
    screenshot(page, "sharing-mobile")
    page.set_viewport_size({"width": 1280, "height": 860})
    row.get_by_role("button", name=f"Revoke {friend}'s access to Library").click()
    expect(page.get_by_role("status")).to_contain_text(f"{friend} no longer has access")
    expect(page.get_by_text("Not shared with anyone")).to_be_visible()
