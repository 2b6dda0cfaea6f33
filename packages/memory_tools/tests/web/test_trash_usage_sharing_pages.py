"""The trash, usage and sharing pages over real HTTP: what they show, their actions, CSRF, and
another owner's ids refused like missing ones."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any
from urllib.parse import unquote

import pytest
from fastmcp import Client
from sqlalchemy import text

from memory_tools import build_memory_server
from memory_tools.serving.job_worker import job_worker
from memory_tools.testing.web_app import WebApp, WebClient
from memory_tools.web.usage import QUOTA_BAR_WIDTH, quota_bar, token_chart
from memory_tools.workflows.usage import MonthTotal

from ..pictures import b64, picture
from ..tool_calls import call as _call

MISSING = "ast_" + "z" * 26


def _flash(answer: Any) -> str:
    """The flash message a redirect carries (its cookie), decoded."""
    for value in answer.headers.get_list("set-cookie"):
        if value.startswith("mem_flash="):
            return unquote(value.split(";", 1)[0].removeprefix("mem_flash="))
    return ""


def _mcp(webapp: WebApp, key: str) -> Client[Any]:
    return Client(build_memory_server(replace(webapp.services, default_api_key=key)))


async def _saved_and_deleted(webapp: WebApp, key: str, seed: int, title: str) -> dict[str, Any]:
    async with _mcp(webapp, key) as client:
        saved = await _call(
            client, "image_asset_save", {"imageBase64": b64(picture(seed)), "title": title}
        )
        await _call(client, "image_asset_delete", {"assetId": saved["assetId"]})
    return saved


async def _status(webapp: WebApp, asset_id: str) -> str:
    async with webapp.services.database.engine.connect() as conn:
        found = await conn.execute(
            text("SELECT status, purged_at IS NOT NULL FROM mem_assets WHERE id = :a"),
            {"a": asset_id},
        )
        status, purged = found.one()
    return "purged" if purged else str(status)


@pytest.fixture
async def alice_web(browser_for: Callable[[], WebClient], alice: Any) -> AsyncIterator[WebClient]:
    async with browser_for() as client:
        assert (await client.sign_in(alice.key)).status_code == 303
        yield client


async def test_the_trash_page_shows_restores_and_purges(
    webapp: WebApp, alice: Any, alice_web: WebClient
) -> None:
    kept = await _saved_and_deleted(webapp, alice.key, 1, "Harbour at dusk")
    gone = await _saved_and_deleted(webapp, alice.key, 2, "Pier in fog")
    page = await alice_web.get("/trash")
    assert page.status_code == 200
    assert "Harbour at dusk" in page.text and "Pier in fog" in page.text
    assert "Purged in" in page.text
    assert "can be restored for 7 days" in page.text  # the default window, in days
    # The preview route redirects to a signed link of the deleted image's preview, served.
    # Most recently deleted first: the pier's preview, then the harbour's.
    links = re.findall(r'<img src="([^"]+)"', page.text)
    assert links == [f"/app/previews/{gone['assetId']}", f"/app/previews/{kept['assetId']}"]
    redirect = await alice_web.http.get(links[0])
    assert redirect.status_code == 303 and "/objects/" in redirect.headers["location"]
    preview = await alice_web.http.get(redirect.headers["location"])
    assert preview.status_code == 200 and preview.headers["content-type"] == "image/webp"

    # Without the CSRF token nothing happens.
    refused = await alice_web.submit(f"/trash/{kept['assetId']}/restore", csrf=False)
    assert refused.status_code == 403
    assert await _status(webapp, kept["assetId"]) == "deleted"

    restored = await alice_web.submit(f"/trash/{kept['assetId']}/restore", {"back": "/trash"})
    assert restored.status_code == 303 and restored.headers["location"] == "/trash"
    assert "Restored where it was" in _flash(restored)
    assert await _status(webapp, kept["assetId"]) == "processing"

    refused = await alice_web.submit(f"/trash/{gone['assetId']}/purge", csrf=False)
    assert refused.status_code == 403 and await _status(webapp, gone["assetId"]) == "deleted"
    # Unconfirmed (no scripts, so no dialog): a page asks first, and nothing is purged.
    asked = await alice_web.submit(f"/trash/{gone['assetId']}/purge", {"back": "/trash"})
    assert asked.status_code == 200 and "Purge this image now?" in asked.text
    assert 'name="confirmed" value="yes"' in asked.text and 'href="/trash">Keep it' in asked.text
    assert await _status(webapp, gone["assetId"]) == "deleted"
    purged = await alice_web.submit(f"/trash/{gone['assetId']}/purge", {"confirmed": "yes"})
    assert purged.status_code == 303
    assert "the image and its bytes are gone" in _flash(purged)
    assert await _status(webapp, gone["assetId"]) == "purged"
    after = await alice_web.get("/trash")
    assert "Harbour at dusk" not in after.text and "Pier in fog" not in after.text
    assert "The trash is empty" in after.text
    # The purged image's preview died with its bytes; the restored one's still loads.
    assert (await alice_web.http.get(links[0])).status_code == 404
    assert (await alice_web.http.get(redirect.headers["location"])).status_code == 404
    restored_preview = await alice_web.http.get(links[1])
    assert restored_preview.status_code == 303
    assert (await alice_web.http.get(restored_preview.headers["location"])).status_code == 200


async def test_another_owners_trash_is_refused_like_a_missing_image(
    webapp: WebApp, alice: Any, bob: Any, browser_for: Callable[[], WebClient]
) -> None:
    hers = await _saved_and_deleted(webapp, alice.key, 3, "Alice's secret")
    async with browser_for() as client:
        await client.sign_in(bob.key)
        page = await client.get("/trash")
        assert "Alice's secret" not in page.text and "The trash is empty" in page.text
        for action in ("restore", "purge"):
            confirmed = {"confirmed": "yes"}
            theirs = await client.submit(f"/trash/{hers['assetId']}/{action}", confirmed)
            missing = await client.submit(f"/trash/{MISSING}/{action}", confirmed)
            assert theirs.status_code == missing.status_code == 303
            assert _flash(theirs) == _flash(missing) and "not_found" in _flash(theirs)
    assert await _status(webapp, hers["assetId"]) == "deleted"


async def test_the_usage_page_shows_the_callers_own_numbers(
    webapp: WebApp,
    alice: Any,
    alice_web: WebClient,
    browser_for: Callable[[], WebClient],
) -> None:
    async with _mcp(webapp, alice.key) as client:
        project = await _call(client, "image_project_create", {"name": "Coastline"})
        await _call(
            client,
            "image_asset_save",
            {"imageBase64": b64(picture(4)), "projectId": project["projectId"]},
        )
    await job_worker(webapp.services).drain()  # the local embedder meters its tokens
    page = await alice_web.get("/usage")
    assert page.status_code == 200
    assert 'role="img" aria-labelledby="usage-total"' in page.text and "Coastline" in page.text
    used = re.search(r'class="usage-quota-used" x="0" y="0" width="([0-9.]+)"', page.text)
    assert used is not None and float(used.group(1)) >= 2  # a sliver at least
    # The offline embedder counts its inputs, but they are no provider's tokens: no chart, no
    # table, not even the heading (this server's embedder has none to show).
    assert "local-hash-v1" not in page.text and "Provider tokens" not in page.text
    async with browser_for() as stranger:
        answer = await stranger.get("/usage")
        assert answer.status_code == 303 and "/sign-in" in answer.headers["location"]


async def test_sharing_grants_and_revokes_from_the_page(
    alice_web: WebClient, bob: Any, browser_for: Callable[[], WebClient]
) -> None:
    page = await alice_web.get("/sharing")
    assert page.status_code == 200 and "Not shared with anyone" in page.text

    granted = await alice_web.submit(
        "/sharing/grant", {"vault": "Library", "grantee": bob.email, "permission": "write"}
    )
    assert granted.status_code == 303 and "shared with bob@example.com" in _flash(granted)
    page = await alice_web.get("/sharing")
    assert "bob@example.com" in page.text

    # A refusal shows the page again with the message, and keeps what was typed.
    unknown = await alice_web.submit(
        "/sharing/grant",
        {"vault": "Library", "grantee": "nobody@example.com", "permission": "admin"},
    )
    assert unknown.status_code == 404
    assert "no identity nobody@example.com on this server" in unknown.text
    assert 'value="nobody@example.com"' in unknown.text
    assert '<option value="admin" selected>' in unknown.text

    # Bob sees the vault but may not manage it; a stranger's vault does not exist for him.
    async with browser_for() as client:
        await client.sign_in(bob.key)
        theirs = await client.submit(
            "/sharing/revoke", {"vault": "alice@example.com/Library", "grantee": bob.email}
        )
        assert theirs.status_code == 303 and "forbidden" in _flash(theirs)
        nowhere = await client.submit(
            "/sharing/revoke", {"vault": "carol@example.com/Library", "grantee": bob.email}
        )
        assert "not_found" in _flash(nowhere)

    refused = await alice_web.submit(
        "/sharing/revoke", {"vault": "Library", "grantee": bob.email}, csrf=False
    )
    assert refused.status_code == 403
    assert "bob@example.com" in (await alice_web.get("/sharing")).text
    revoked = await alice_web.submit("/sharing/revoke", {"vault": "Library", "grantee": bob.email})
    assert revoked.status_code == 303 and "no longer has access" in _flash(revoked)
    assert "Not shared with anyone" in (await alice_web.get("/sharing")).text


def test_the_quota_bar_and_the_token_chart_are_drawn_to_scale() -> None:
    bar = quota_bar(1000, 250, 100)
    assert (bar.used, bar.reserved, bar.share) == (250.0, 100.0, 35.0)
    tiny = quota_bar(10**12, 1, 0)
    assert (tiny.used, tiny.reserved) == (2.0, 0.0)  # visible, not mistaken for nothing
    full = quota_bar(100, 90, 50)
    assert full.used + full.reserved == QUOTA_BAR_WIDTH  # never past the track
    assert quota_bar(0, 0, 0).share == 100.0  # no quota: nothing fits
    months = [MonthTotal(month=f"2025-{m:02d}", total_tokens=m * 10, calls=1) for m in range(1, 13)]
    months.append(MonthTotal(month="2026-01", total_tokens=1, calls=1))
    chart = token_chart(months)
    assert chart.bars[0].month == "2025-02" and len(chart.bars) == 12
    highest = max(chart.bars, key=lambda b: b.tokens)
    assert highest.y + highest.height == chart.baseline and highest.y == 16
    assert chart.bars[-1].height == 2  # one token still shows
    assert token_chart([]).bars == []
