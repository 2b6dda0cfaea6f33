"""A script's change must say it came from a page of this site (docs/web.md#security).

The JSON endpoints the pages' scripts call (the bulk actions, the uploads) refuse a change
that carries the right session and CSRF token but neither an ``Origin`` nor the browser's
``Sec-Fetch-Site: same-origin``: 403, and nothing changes. Browsers send ``Origin`` on every
POST a script makes, so the pages' own script is never refused (the Chromium tests of the
bulk actions and the upload page run it); a ``Referer`` alone is not enough.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from memory_tools.testing.web_app import WebApp, WebClient

from .pictures import save_picture


@pytest.fixture
async def alice_web(browser_for: Callable[[], WebClient], alice: Any) -> AsyncIterator[WebClient]:
    async with browser_for() as client:
        assert (await client.sign_in(alice.key)).status_code == 303
        await client.get("/library")  # the page's CSRF token
        yield client


async def _post(client: WebClient, path: str, body: Any, **headers: str) -> httpx.Response:
    """A POST with the session cookie and the right CSRF token, and only ``headers`` besides."""
    return await client.http.post(path, json=body, headers={"X-CSRF-Token": client.csrf, **headers})


async def _state(webapp: WebApp, asset_id: str) -> tuple[str, list[str]]:
    async with webapp.services.database.engine.connect() as conn:
        found = await conn.execute(
            text("SELECT status, tags FROM mem_assets WHERE id = :id"), {"id": asset_id}
        )
        status, tags = found.one()
        return str(status), list(tags)


async def _reserved_and_assets(webapp: WebApp) -> tuple[int, int]:
    async with webapp.services.database.engine.connect() as conn:
        reserved = await conn.execute(
            text("SELECT coalesce(sum(reserved_bytes), 0) FROM mem_asset_namespaces")
        )
        assets = await conn.execute(text("SELECT count(*) FROM mem_assets"))
        return int(reserved.scalar_one()), int(assets.scalar_one())


async def test_a_json_change_without_an_origin_is_refused_and_changes_nothing(
    webapp: WebApp, alice: Any, alice_web: WebClient
) -> None:
    asset_id = await save_picture(webapp.services, alice, 1, title="Pier", tags=["old"])
    tag = {"action": "addTags", "assetIds": [asset_id], "tags": ["new"]}
    changes: list[tuple[str, Any]] = [
        ("/bulk/items", tag),
        ("/bulk/items", {"action": "delete", "assetIds": [asset_id]}),
        ("/app/uploads", {"contentType": "image/png", "contentLength": 1000}),
        ("/app/uploads/url", {"sourceUrl": "https://example.com/a.png"}),
        # Refused before the id is looked up: 403, not the 404 an unknown upload gets.
        ("/app/uploads/upl_" + "z" * 26 + "/complete", {}),
    ]
    before = await _reserved_and_assets(webapp)
    for path, body in changes:
        for headers in (
            {},  # neither header: no browser's script sent this
            {"Referer": f"{webapp.base_url}/library"},  # a Referer is not an Origin
            {"Sec-Fetch-Site": "cross-site"},
            {"Sec-Fetch-Site": "same-site"},  # a sibling subdomain is another site's page
            {"Origin": "null"},
        ):
            refused = await _post(alice_web, path, body, **headers)
            assert refused.status_code == 403, (path, headers, refused.text)
            error = refused.json()["error"]
            assert error["code"] == "forbidden" and "Origin" in error["message"], error
    assert await _state(webapp, asset_id) == ("processing", ["old"])
    assert await _reserved_and_assets(webapp) == before

    # What a browser's script sends: its Origin, or (where a browser left it out) the
    # Sec-Fetch-Site it always sets. Either is accepted.
    tagged = await _post(alice_web, "/bulk/items", tag, **{"Sec-Fetch-Site": "same-origin"})
    assert tagged.status_code == 200, tagged.text
    assert tagged.json()["succeeded"] == 1
    assert await _state(webapp, asset_id) == ("processing", ["old", "new"])
    remove = {"action": "removeTags", "assetIds": [asset_id], "tags": ["new"]}
    untagged = await _post(alice_web, "/bulk/items", remove, Origin=webapp.base_url)
    assert untagged.status_code == 200 and untagged.json()["succeeded"] == 1
    # A foreign Origin is refused even beside a same-origin Sec-Fetch-Site (forged by a client
    # that is no browser): the Origin decides when it is there.
    foreign = await _post(
        alice_web,
        "/bulk/items",
        tag,
        Origin="https://evil.example",
        **{"Sec-Fetch-Site": "same-origin"},
    )
    assert foreign.status_code == 403
    assert await _state(webapp, asset_id) == ("processing", ["old"])
    # Reads are not changes: the upload page's state poll needs no Origin.
    state = await alice_web.http.get(f"/app/assets/{asset_id}/state")
    assert state.status_code == 200, state.text


async def test_a_form_without_an_origin_still_needs_only_its_token(
    webapp: WebApp, alice: Any, alice_web: WebClient
) -> None:
    """Plain forms keep the documented leniency: some privacy settings drop both headers on a
    form post, so a form is refused for a foreign Origin or a wrong token, not for none."""
    asset_id = await save_picture(webapp.services, alice, 2, title="Pier", tags=["old"])
    form = {"action": "addTags", "tag": "new", "assetIds": [asset_id], "csrf": alice_web.csrf}
    posted = await alice_web.http.post("/bulk", data=form)
    assert posted.status_code == 200 and "Tagged 1 of 1" in posted.text
    assert await _state(webapp, asset_id) == ("processing", ["old", "new"])
    wrong = await alice_web.http.post("/bulk", data={**form, "csrf": "wrong", "tag": "x"})
    assert wrong.status_code == 403
    assert await _state(webapp, asset_id) == ("processing", ["old", "new"])
