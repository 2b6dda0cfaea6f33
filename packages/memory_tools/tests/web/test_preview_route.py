"""``GET /app/previews/{assetId}``: where every ``<img>`` of the pages loads a preview.

It answers a redirect to a fresh signed link, authorised like every page (the session's caller,
the workflows' own access rules), and cached for less than the link lives. It refuses a
browser without a session, another owner's image and an id that does not exist alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from fastmcp import Client

from memory_tools import build_memory_server
from memory_tools.testing.web_app import WebApp, WebClient

from ..tool_calls import call
from .pictures import save_picture

MISSING = "ast_" + "z" * 26


async def test_the_route_redirects_to_a_fresh_link_cached_for_half_its_life(
    signed_in: WebClient, webapp: WebApp, make_person: Callable[..., Any]
) -> None:
    alice = await make_person("alice@example.com")
    asset_id = await save_picture(webapp.services, alice, 1, title="Harbour")
    first = await signed_in.http.get(f"/app/previews/{asset_id}")
    assert first.status_code == 303
    ttl = webapp.services.settings.asset_signed_get_ttl_seconds
    assert first.headers["cache-control"] == f"private, max-age={ttl // 2}"
    link = first.headers["location"]
    assert link.startswith("/objects/") and "/preview.webp?" in link and "signature=" in link
    image = await signed_in.http.get(link)
    assert image.status_code == 200 and image.headers["content-type"] == "image/webp"
    # A deleted image's preview still shows in the trash, until it is purged.
    async with Client(
        build_memory_server(replace(webapp.services, default_api_key=alice.key))
    ) as mcp:
        await call(mcp, "image_asset_delete", {"assetId": asset_id})
        trashed = await signed_in.http.get(f"/app/previews/{asset_id}")
        assert trashed.status_code == 303
        assert (await signed_in.http.get(trashed.headers["location"])).status_code == 200
    await signed_in.get("/trash")
    purging = await signed_in.submit(f"/trash/{asset_id}/purge", {"confirmed": "yes"})
    assert purging.status_code == 303
    purged = await signed_in.http.get(f"/app/previews/{asset_id}")
    assert purged.status_code == 404 and purged.json()["error"]["code"] == "not_found"


async def test_no_session_another_owner_and_an_unknown_id_are_refused(
    signed_in: WebClient,
    webapp: WebApp,
    browser_for: Callable[[], WebClient],
    make_person: Callable[..., Any],
) -> None:
    bob = await make_person("bob@example.com")
    bobs = await save_picture(webapp.services, bob, 2, title="Bob's")
    for asset_id in (bobs, MISSING, "not-an-id", "ast_%2E%2E"):
        refused = await signed_in.http.get(f"/app/previews/{asset_id}")
        assert refused.status_code == 404, asset_id
        assert refused.json()["error"]["code"] == "not_found"
        assert "location" not in refused.headers and "signature" not in refused.text
    # An id that decodes to another path matches no route at all.
    escaped = await signed_in.http.get("/app/previews/ast_%2F..%2Fobjects")
    assert escaped.status_code == 404 and "location" not in escaped.headers
    async with browser_for() as stranger:
        anonymous = await stranger.http.get(f"/app/previews/{bobs}")
        assert anonymous.status_code == 401
        assert anonymous.json()["error"]["code"] == "unauthenticated"
        assert "location" not in anonymous.headers
    # Bob himself is shown his image.
    async with browser_for() as owner:
        await owner.sign_in(bob.key)
        assert (await owner.http.get(f"/app/previews/{bobs}")).status_code == 303
