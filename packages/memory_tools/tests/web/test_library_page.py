"""The library page over real HTTP: tree, grid of signed previews, paging, filters, and the
project and folder forms (CSRF, refusals)."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from typing import Any

from memory_tools.operations import admin
from memory_tools.testing.web_app import WebApp, WebClient

from .pictures import save_picture

_CARD_LINK = re.compile(r'href="/assets/(ast_[A-Za-z0-9]+)"')
_IMG = re.compile(r'<img src="([^"]+)"')


def _cards(text: str) -> list[str]:
    return _CARD_LINK.findall(text)


def _link(text: str, rel: str) -> str | None:
    found = re.search(rf'<a class="button" rel="{rel}" href="([^"]+)"', text)
    return html.unescape(found.group(1)) if found else None


async def test_home_lands_on_the_library_with_a_grid_of_signed_previews(
    signed_in: WebClient, webapp: WebApp, make_person: Callable[..., Any]
) -> None:
    alice = await make_person("alice@example.com")
    saved = [
        await save_picture(webapp.services, alice, seed, title=f"Harbour {seed}")
        for seed in range(3)
    ]
    home = await signed_in.get("/")
    assert home.status_code == 303 and home.headers["location"] == "/library"
    page = await signed_in.get("/library")
    assert page.status_code == 200
    assert _cards(page.text) == list(reversed(saved))  # newest first
    assert "Harbour 2" in page.text and "48 \u00d7 48" in page.text
    assert "◔</span> Processing" in page.text  # icon and word (no worker runs here)
    images = [html.unescape(src) for src in _IMG.findall(page.text)]
    # Each image loads through the session's preview route: a fresh signed link each time.
    assert images == [f"/app/previews/{asset_id}" for asset_id in reversed(saved)]
    redirect = await signed_in.http.get(images[0])
    assert redirect.status_code == 303
    link = redirect.headers["location"]
    assert "/preview.webp?" in link and "signature=" in link and "expires=" in link
    preview = await signed_in.http.get(link)
    assert preview.status_code == 200 and preview.headers["content-type"] == "image/webp"
    # The original is never inline on the page.
    assert ".png" not in page.text
    oldest = await signed_in.get("/library?order=oldest")
    assert _cards(oldest.text) == saved


async def test_paging_goes_forward_and_back_by_the_cursor(
    signed_in: WebClient, webapp: WebApp, make_person: Callable[..., Any]
) -> None:
    alice = await make_person("alice@example.com")
    saved = [await save_picture(webapp.services, alice, seed) for seed in range(5)]
    newest = list(reversed(saved))
    first = await signed_in.get("/library?limit=2")
    assert _cards(first.text) == newest[:2]
    assert (
        _link(first.text, "prev") is None
        and 'aria-disabled="true"><span aria-hidden="true">←' in first.text
    )
    second_url = _link(first.text, "next")
    assert second_url is not None and "cursor=" in second_url and "limit=2" in second_url
    second = await signed_in.get(second_url)
    third_url = _link(second.text, "next")
    assert third_url is not None
    third = await signed_in.get(third_url)
    assert _cards(second.text) == newest[2:4] and _cards(third.text) == newest[4:]
    assert _link(third.text, "next") is None
    back_url = _link(third.text, "prev")
    assert back_url is not None and "back=1" in back_url
    back = await signed_in.get(back_url)
    assert _cards(back.text) == newest[2:4]
    start_url = _link(back.text, "prev")
    assert start_url is not None
    start = await signed_in.get(start_url)
    assert _cards(start.text) == newest[:2] and _link(start.text, "prev") is None


async def test_filters_narrow_the_grid_and_a_bad_one_shows_the_workflows_error(
    signed_in: WebClient, webapp: WebApp, make_person: Callable[..., Any]
) -> None:
    alice = await make_person("alice@example.com")
    beach = await save_picture(webapp.services, alice, 1, tags=["Beach", "2026"])
    other = await save_picture(webapp.services, alice, 2, tags=["city"])
    assert _cards((await signed_in.get("/library?tags=beach")).text) == [beach]
    assert _cards((await signed_in.get("/library?tags=beach,+2026")).text) == [beach]
    assert _cards((await signed_in.get("/library?kind=upload&mime=image/png")).text) == [
        other,
        beach,
    ]
    assert _cards((await signed_in.get("/library?kind=screenshot")).text) == []
    empty = await signed_in.get("/library?kind=screenshot")
    assert "No image matches these filters." in empty.text and "Clear filters" in empty.text
    for query, message in (
        ("mime=text/html", "mimeTypes: 'text/html' is not one of"),
        ("kind=ftp", "sourceKinds: 'ftp' is not one of"),
        ("order=sideways", "order: newest, oldest or taken"),
        ("cursor=nonsense", "cursor: not a cursor this server returned"),
        ("limit=1000", "limit: between 1 and 100"),
    ):
        refused = await signed_in.get(f"/library?{query}")
        assert refused.status_code == 422, query
        shown = html.unescape(refused.text)
        assert message in shown and "invalid_input" in shown, query
        assert 'role="alert"' in refused.text and _cards(refused.text) == []
        assert 'id="library-tree-heading"' in refused.text  # the tree is still there
    # A vault the caller cannot read: not found, as for the tool.
    missing = await signed_in.get("/library?vault=bob@example.com/Library")
    assert missing.status_code == 404


async def test_create_a_project_and_a_folder_and_browse_into_them(
    signed_in: WebClient, webapp: WebApp, make_person: Callable[..., Any]
) -> None:
    alice = await make_person("alice@example.com")
    await signed_in.get("/library")
    made = await signed_in.submit(
        "/library/projects", {"vault": "Library", "name": "Trips", "back": "/library"}
    )
    assert made.status_code == 303
    project_url = made.headers["location"]
    project_id = re.search(r"project=(apr_[A-Za-z0-9]+)", project_url)
    assert project_id is not None and "vault=Library" in project_url
    shown = await signed_in.get(project_url)
    assert "Project “Trips” created." in shown.text
    assert '<h1 id="library-heading">Trips</h1>' in shown.text
    folder = await signed_in.submit(
        "/library/folders",
        {"vault": "Library", "project": project_id.group(1), "name": "2026", "back": project_url},
    )
    assert folder.status_code == 303 and "folder=afl_" in folder.headers["location"]
    inside = await signed_in.get(folder.headers["location"])
    assert "Folder “/2026” created." in inside.text
    assert '<h1 id="library-heading">Trips/2026</h1>' in inside.text
    # An image placed in the folder is what the folder shows.
    placed = await save_picture(
        webapp.services,
        alice,
        4,
        project_id=project_id.group(1),
        folder_id=folder.headers["location"].split("folder=")[1],
    )
    await save_picture(webapp.services, alice, 5)
    assert _cards((await signed_in.get(folder.headers["location"])).text) == [placed]
    # A refused name comes back to the form's page with the workflow's words.
    again = await signed_in.submit(
        "/library/projects", {"vault": "Library", "name": "Trips", "back": project_url}
    )
    assert again.status_code == 303 and again.headers["location"] == project_url
    after = await signed_in.get(project_url)
    assert 'class="flash flash-error"' in after.text and "conflict" in after.text


async def test_changes_need_the_csrf_token_and_write_access(
    signed_in: WebClient,
    webapp: WebApp,
    browser_for: Callable[[], WebClient],
    make_person: Callable[..., Any],
) -> None:
    await signed_in.get("/library")
    refused = await signed_in.submit(
        "/library/projects", {"vault": "Library", "name": "Sneaky"}, csrf=False
    )
    assert refused.status_code == 403
    reader = await make_person("reader@example.com")
    await admin.grant(
        webapp.services.database, "alice@example.com", "Library", reader.email, "read"
    )
    async with browser_for() as client:
        await client.sign_in(reader.key)
        tree = await client.get("/library")
        assert "alice@example.com/Library" in tree.text and "read only" in tree.text
        answer = await client.submit(
            "/library/projects",
            {"vault": "alice@example.com/Library", "name": "Sneaky", "back": "/library"},
        )
        assert answer.status_code == 303
        shown = await client.get("/library")
        assert "forbidden" in shown.text and "write access is needed" in shown.text
    page = await signed_in.get("/library?vault=Library")
    assert "Sneaky" not in page.text
