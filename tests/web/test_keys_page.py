"""The Keys page in a real browser: create a key (its secret shown once, with a copy button),
pause and resume it, see what each key did, and filter the library by the key that saved.

A paused key is refused over MCP at once and its web sessions stop; another owner's keys never
appear; the key the page is signed in with has no switch.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from fastmcp import Client
from playwright.sync_api import Page, expect

from ..e2e.test_processes import _cli, _png
from .conftest import RunningServer, check_accessibility, screenshot

pytestmark = pytest.mark.slow


def _calls(server: RunningServer, key: str, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """MCP tool calls over HTTP as ``key`` (in a thread: the browser's driver owns this one);
    each answer is the structured content, or the error's text."""

    async def run() -> list[Any]:
        async with Client(server.url + "/mcp", auth=key) as client:
            answers: list[Any] = []
            for name, arguments in calls:
                result = await client.call_tool(name, arguments, raise_on_error=False)
                answers.append(
                    result.content[0].text if result.is_error else result.structured_content  # type: ignore[union-attr]
                )
            return answers

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, run()).result()


def _refusal(server: RunningServer, key: str) -> str:
    """What the MCP endpoint says to ``key`` (raised by the client before any tool runs)."""
    try:
        _calls(server, key, [("image_asset_list", {})])
    except Exception as exc:  # the transport's 401, as the SDK raises it
        return str(exc)
    return "answered"


def test_create_a_key_see_it_once_pause_it_and_filter_the_library_by_it(
    open_page: Callable[..., Page], new_key: Callable[..., str], web_server: RunningServer
) -> None:
    owner_key = new_key("keys")
    stranger = new_key("stranger")
    page = open_page(owner_key)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.goto("/library")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Keys").click()
    page.wait_for_url("**/keys")
    rows = page.locator("table.keys-table tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("this session")
    expect(rows.first.get_by_role("button")).to_have_count(0)  # no switch for its own key

    page.get_by_label("Label (the agent or client)").fill("claude-code@laptop")
    page.get_by_label("Note (why it was made)").fill("reads and saves screenshots")
    page.get_by_label("write").uncheck()  # read only
    page.get_by_role("button", name="Create key").click()
    secret = page.locator("#new-key-secret").inner_text().strip()
    assert secret.startswith("mk_")
    expect(page).to_have_url(f"{web_server.url}/keys")  # a reload reads the list again
    page.get_by_role("button", name="Copy").click()
    expect(page.get_by_role("status").filter(has_text="Copied.")).to_be_visible()
    assert page.evaluate("navigator.clipboard.readText()") == secret
    check_accessibility(page)
    screenshot(page, "keys-created")
    agent_row = rows.filter(has_text="claude-code@laptop")
    expect(agent_row).to_contain_text("reads and saves screenshots")
    expect(agent_row).to_contain_text("active")
    agent_id = agent_row.get_attribute("data-key-id")
    assert agent_id is not None and agent_id.startswith("akey_")
    page.reload()
    expect(page.locator("#new-key-secret")).to_have_count(0)
    assert secret not in page.content()

    # The new key works over MCP at once, and is read-only as made.
    listed, refused = _calls(
        web_server,
        secret,
        [
            ("image_asset_list", {}),
            ("image_asset_save", {"imageBase64": base64.b64encode(_png(21)).decode()}),
        ],
    )
    assert listed == {"items": [], "nextCursor": None}
    assert refused.startswith("forbidden:")

    # Pause it from the page: refused over MCP on its very next call, saying so.
    agent_row.get_by_role("button", name="Pause").click()
    expect(page.get_by_role("status")).to_contain_text("Key “claude-code@laptop” paused.")
    expect(agent_row).to_contain_text("paused")
    assert "paused" in _refusal(web_server, secret)
    agent_row.get_by_role("button", name="Resume").click()
    expect(page.get_by_role("status")).to_contain_text("resumed")
    assert _calls(web_server, secret, [("image_asset_list", {})])[0]["items"] == []

    # Another owner's keys never show, and their ids cannot be switched from here.
    stranger_keys = json.loads(_cli(web_server.env, "admin", "list-identities", "--json").stdout)[
        "identities"
    ]
    assert any(i["owner"].startswith("stranger-") for i in stranger_keys)
    assert stranger not in page.content()
    expect(rows).to_have_count(2)


def test_a_paused_keys_web_session_stops_and_the_library_filters_by_saver(
    open_page: Callable[..., Page], new_key: Callable[..., str], web_server: RunningServer
) -> None:
    owner_key = new_key("saver")
    page = open_page(owner_key)
    page.goto("/keys")
    page.get_by_label("Label (the agent or client)").fill("cursor@desktop")
    page.get_by_role("button", name="Create key").click()
    agent = page.locator("#new-key-secret").inner_text().strip()
    agent_id = page.locator("tr", has_text="cursor@desktop").get_attribute("data-key-id")
    assert agent_id is not None
    (by_agent,) = _calls(
        web_server,
        agent,
        [
            (
                "image_asset_save",
                {"imageBase64": base64.b64encode(_png(22)).decode(), "title": "Agent's pier"},
            )
        ],
    )
    (by_owner,) = _calls(
        web_server,
        owner_key,
        [
            (
                "image_asset_save",
                {"imageBase64": base64.b64encode(_png(23)).decode(), "title": "Owner's pier"},
            )
        ],
    )

    # The library filters by the key that saved; the asset page names it.
    page.goto("/library")
    page.get_by_label("Saved by").select_option(label="cursor@desktop")
    page.get_by_role("button", name="Apply").click()
    cards = page.locator(".library-grid > li")
    expect(cards).to_have_count(1)
    expect(cards.first).to_contain_text("Agent's pier")
    expect(page.get_by_label("Saved by")).to_have_value(agent_id)
    page.goto(f"/assets/{by_agent['assetId']}")
    expect(page.locator("dd", has_text="cursor@desktop")).to_be_visible()
    page.goto("/keys")
    expect(
        page.locator("tr", has_text="cursor@desktop").locator("td[data-label=Saves]")
    ).to_have_text("1")
    assert by_owner["assetId"] != by_agent["assetId"]

    # A browser signed in with the agent key stops when it is paused.
    agent_page = open_page(agent)
    agent_page.goto("/library")
    expect(agent_page.locator(".library-grid > li")).to_have_count(2)
    page.locator("tr", has_text="cursor@desktop").get_by_role("button", name="Pause").click()
    expect(page.get_by_role("status")).to_contain_text("paused")
    agent_page.goto("/library")
    agent_page.wait_for_url("**/sign-in**")
