"""The bulk actions of the library and the trash over real HTTP: the JSON endpoint of the pages'
script and the plain form without scripts, each item authorised alone (another owner's id named
and refused, the others done), CSRF and origin checked, and the runner's limit of ids."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import pytest
from fastmcp import Client
from sqlalchemy import text

from memory_tools import build_memory_server
from memory_tools.testing.web_app import WebApp, WebClient

from ..tool_calls import call as _call
from .pictures import save_picture

MISSING = "ast_" + "z" * 26


def _mcp(webapp: WebApp, key: str) -> Client[Any]:
    return Client(build_memory_server(replace(webapp.services, default_api_key=key)))


async def _rows(webapp: WebApp, ids: list[str]) -> dict[str, tuple[str, str | None, list[str]]]:
    """Each asset's status, folder and tags, read straight from the database."""
    async with webapp.services.database.engine.connect() as conn:
        found = await conn.execute(
            text(
                "SELECT id, CASE WHEN purged_at IS NOT NULL THEN 'purged' ELSE status END,"
                " folder_id, tags FROM mem_assets WHERE id = ANY(:ids)"
            ),
            {"ids": ids},
        )
        return {row[0]: (row[1], row[2], list(row[3])) for row in found}


async def _folder(webapp: WebApp, key: str) -> tuple[str, str]:
    async with _mcp(webapp, key) as client:
        project = await _call(client, "image_project_create", {"name": "Trips"})
        folder = await _call(
            client, "image_folder_create", {"projectId": project["projectId"], "name": "Norway"}
        )
    return project["projectId"], folder["folderId"]


@pytest.fixture
async def alice_web(browser_for: Callable[[], WebClient], alice: Any) -> AsyncIterator[WebClient]:
    async with browser_for() as client:
        assert (await client.sign_in(alice.key)).status_code == 303
        await client.get("/library")  # the page's CSRF token
        yield client


async def test_a_move_runs_each_item_and_names_another_owners_id_refused(
    webapp: WebApp, alice: Any, bob: Any, alice_web: WebClient
) -> None:
    mine = [
        await save_picture(webapp.services, alice, seed, title=f"Pier {seed}") for seed in (1, 2, 3)
    ]
    theirs = await save_picture(webapp.services, bob, 4, title="Bob's")
    project_id, folder_id = await _folder(webapp, alice.key)
    ids = [mine[0], theirs, mine[1], MISSING, mine[2]]
    body = {"action": "move", "assetIds": ids, "place": f"{project_id}/{folder_id}"}

    # Without the CSRF header, or from another site, nothing happens.
    refused = await alice_web.call("POST", "/bulk/items", json=body, headers={"X-CSRF-Token": ""})
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "forbidden"
    assert "CSRF" in refused.json()["error"]["message"]
    foreign = await alice_web.call(
        "POST", "/bulk/items", json=body, headers={"Origin": "https://evil.example"}
    )
    assert foreign.status_code == 403
    assert {row[1] for row in (await _rows(webapp, mine)).values()} == {None}

    answer = await alice_web.call("POST", "/bulk/items", json=body)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "items": [
            {"assetId": mine[0], "ok": True},
            # Bob's image is refused exactly as a missing one: nothing more is said of it.
            {
                "assetId": theirs,
                "ok": False,
                "error": {"code": "not_found", "message": "asset not found"},
            },
            {"assetId": mine[1], "ok": True},
            {
                "assetId": MISSING,
                "ok": False,
                "error": {"code": "not_found", "message": "asset not found"},
            },
            {"assetId": mine[2], "ok": True},
        ],
        "succeeded": 3,
        "failed": 2,
    }
    rows = await _rows(webapp, [*mine, theirs])
    assert [rows[i][1] for i in mine] == [folder_id] * 3
    assert rows[theirs][1] is None  # untouched


async def test_more_ids_than_the_runner_takes_are_refused_whole(
    webapp: WebApp, alice: Any, alice_web: WebClient
) -> None:
    mine = await save_picture(webapp.services, alice, 5, title="Dunes")
    ids = [mine] + [f"ast_{n:026d}" for n in range(100)]  # 101 ids
    answer = await alice_web.call("POST", "/bulk/items", json={"action": "delete", "assetIds": ids})
    assert answer.status_code == 422
    assert answer.json()["error"] == {
        "code": "invalid_input",
        "message": "assetIds: give 1 to 100 ids, not 101",
    }
    # The form without scripts is refused the same way, back on the page it came from.
    form = await alice_web.submit(
        "/bulk", {"action": "delete", "assetIds": ids, "back": "/library"}
    )
    assert form.status_code == 303 and form.headers["location"] == "/library"
    shown = await alice_web.get("/library")
    assert "assetIds: give 1 to 100 ids, not 101" in shown.text
    assert (await _rows(webapp, [mine]))[mine][0] != "deleted"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"action": "rename", "assetIds": ["ast_x"]}, "action: one of move, addTags"),
        ({"action": "addTags", "assetIds": ["ast_x"], "tags": []}, "tags: type the tag"),
        ({"action": "delete", "assetIds": "ast_x"}, "assetIds: a list of asset ids"),
        ({"action": "delete", "assetIds": []}, "assetIds: give 1 to 100 ids, not 0"),
        ({"action": "move", "assetIds": ["ast_x"], "place": "a/b/c"}, "place: a project"),
        (["delete"], "the body must be a JSON object"),
    ],
)
async def test_a_malformed_request_is_refused_with_what_is_wrong(
    alice_web: WebClient, body: Any, says: str
) -> None:
    answer = await alice_web.call("POST", "/bulk/items", json=body)
    assert answer.status_code == 422
    assert answer.json()["error"]["code"] == "invalid_input"
    assert says in answer.json()["error"]["message"]


async def test_tags_delete_restore_and_purge_without_scripts(
    webapp: WebApp, alice: Any, bob: Any, alice_web: WebClient
) -> None:
    mine = [
        await save_picture(webapp.services, alice, seed, title=f"Fjord {seed}") for seed in (6, 7)
    ]
    theirs = await save_picture(webapp.services, bob, 8, title="Bob's fjord")
    ids = [mine[0], theirs, mine[1]]

    # Without the CSRF field the form is refused and changes nothing.
    refused = await alice_web.submit(
        "/bulk", {"action": "addTags", "tag": "norway", "assetIds": ids}, csrf=False
    )
    assert refused.status_code == 403
    assert (await _rows(webapp, mine))[mine[0]][2] == []

    tagged = await alice_web.submit(
        "/bulk", {"action": "addTags", "tag": "norway, winter", "assetIds": ids, "back": "/library"}
    )
    assert tagged.status_code == 200
    assert "Tagged 2 of 3 images" in tagged.text
    assert f'<a href="/assets/{theirs}"><code>{theirs}</code></a>: asset not found' in tagged.text
    rows = await _rows(webapp, [*mine, theirs])
    assert [sorted(rows[i][2]) for i in mine] == [["norway", "winter"]] * 2
    assert rows[theirs][2] == []
    untagged = await alice_web.submit(
        "/bulk", {"action": "removeTags", "tag": "winter", "assetIds": mine}
    )
    assert "Untagged 2 of 2 images" in untagged.text and "None was refused" in untagged.text
    assert [rows[2] for rows in (await _rows(webapp, mine)).values()] == [["norway"]] * 2

    deleted = await alice_web.submit("/bulk", {"action": "delete", "assetIds": ids})
    assert "Moved to the trash 2 of 3 images" in deleted.text
    rows = await _rows(webapp, [*mine, theirs])
    assert [rows[i][0] for i in mine] == ["deleted"] * 2 and rows[theirs][0] != "deleted"

    restored = await alice_web.submit(
        "/bulk", {"action": "restore", "assetIds": [mine[0]], "back": "/trash"}
    )
    assert "Restored 1 of 1 image" in restored.text
    assert (await _rows(webapp, [mine[0]]))[mine[0]][0] != "deleted"

    # A purge asks first on a page of its own (no dialog without scripts); nothing is purged.
    asked = await alice_web.submit(
        "/bulk", {"action": "purge", "assetIds": [mine[1], theirs], "back": "/trash"}
    )
    assert asked.status_code == 200 and "Purge 2 images now?" in asked.text
    assert re.findall(r'name="assetIds" value="([^"]+)"', asked.text) == [mine[1], theirs]
    assert (await _rows(webapp, [mine[1]]))[mine[1]][0] == "deleted"
    purged = await alice_web.submit(
        "/bulk",
        {"action": "purge", "assetIds": [mine[1], theirs], "confirmed": "yes", "back": "/trash"},
    )
    assert "Purged 1 of 2 images" in purged.text
    assert f"<code>{theirs}</code>: asset not found" in purged.text
    assert (await _rows(webapp, [mine[1]]))[mine[1]][0] == "purged"
    assert (await _rows(webapp, [theirs]))[theirs][0] != "purged"


async def test_the_library_and_the_trash_offer_checkboxes_in_the_bulk_form(
    webapp: WebApp, alice: Any, alice_web: WebClient
) -> None:
    mine = await save_picture(webapp.services, alice, 9, title="Harbour")
    project_id, folder_id = await _folder(webapp, alice.key)
    page = await alice_web.get("/library")
    assert f'name="assetIds" value="{mine}" form="bulk-form"' in page.text
    assert '<form id="bulk-form" method="post" action="/bulk"' in page.text
    assert f'<option value="{project_id}/{folder_id}">Trips/Norway</option>' in page.text
    assert 'aria-live="polite"' in page.text and "bulk.js" in page.text
    await alice_web.call("POST", "/bulk/items", json={"action": "delete", "assetIds": [mine]})
    trash = await alice_web.get("/trash")
    assert f'name="assetIds" value="{mine}" form="bulk-form"' in trash.text
    assert 'value="restore"' in trash.text and 'value="purge"' in trash.text
