"""The asset page over real HTTP: what it shows, each action, and what it refuses (another
owner's image, a read-only grant, a form without its CSRF token)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from memory_db.describing import ScriptedDescriber
from memory_db.embedding import ScriptedEmbedder
from memory_db.errors import ProviderRejected
from memory_tools.access import Caller
from memory_tools.operations import admin
from memory_tools.serving.job_worker import job_worker
from memory_tools.testing.web_app import WebApp, WebClient
from memory_tools.workflows import browsing

from ..pictures import picture
from .pictures import USER, save_picture

MISSING = "ast_" + "z" * 26


async def _detail(webapp: WebApp, person: Any, asset_id: str) -> browsing.AssetDetail:
    async with webapp.services.database.unit_of_work() as uow:
        caller = Caller(person.email, person.key_id, USER)
        return await browsing.asset_detail(uow, caller, webapp.services, asset_id=asset_id)


async def test_the_page_shows_metadata_source_context_and_embedding_state(
    signed_in: WebClient, webapp: WebApp, make_person: Callable[..., Any]
) -> None:
    alice = await make_person("alice@example.com")
    asset_id = await save_picture(
        webapp.services,
        alice,
        1,
        title="Lighthouse <b>at</b> dusk",
        description="Taken from the pier",
        alt_text="A <script>lighthouse</script>",
        tags=["Coast", "2026"],
        source_ref={
            "pageUrl": "https://example.com/gallery?id=7",
            "pageTitle": "Coast <i>gallery</i>",
            "imageUrl": "javascript:alert(1)",
        },
    )
    page = await signed_in.get(f"/assets/{asset_id}")
    assert page.status_code == 200
    text = page.text
    assert "Lighthouse &lt;b&gt;at&lt;/b&gt; dusk" in text and "<b>at</b>" not in text
    assert "A &lt;script&gt;lighthouse&lt;/script&gt;" in text
    assert "Coast &lt;i&gt;gallery&lt;/i&gt;" in text
    assert "48 \u00d7 48 px" in text and "image/png" in text
    sha = hashlib.sha256(picture(1)).hexdigest()
    assert f'title="{sha}">{sha[:12]}…' in text
    assert '<a class="tag" href="/library?vault=Library&amp;tags=coast">coast</a>' in text
    # A web link is a link without referrer or follow; anything else is shown as text only.
    assert '<a href="https://example.com/gallery?id=7" rel="noopener noreferrer nofollow"' in text
    assert 'href="javascript:' not in text and "javascript:alert(1)</dd>" in text
    # The preview through the preview route; the original only through the download route.
    assert f'<img src="/app/previews/{asset_id}"' in text
    assert f'href="/assets/{asset_id}/original"' in text
    # Embedding per representation (no worker here: both are queued).
    assert text.count("◷</span> Queued") == 2
    assert 'method="post" action="/assets/' in text and 'name="csrf"' in text


async def test_another_owners_image_is_not_found_on_every_route(
    signed_in: WebClient, webapp: WebApp, make_person: Callable[..., Any]
) -> None:
    bob = await make_person("bob@example.com")
    bobs = await save_picture(webapp.services, bob, 2, title="Bob's")
    await signed_in.get("/library")
    for asset_id in (bobs, MISSING):
        for path in ("", "/original", "/delete"):
            answer = await signed_in.get(f"/assets/{asset_id}{path}")
            assert answer.status_code == 404, path
            assert "asset not found" in answer.text and "Bob&#39;s" not in answer.text
        for path, form in (
            ("/edit", {"title": "Mine now", "description": "", "tags": ""}),
            ("/move", {"place": ""}),
            ("/delete", {}),
            ("/retry", {"representation": "visual"}),
        ):
            # As the page's forms do: "back" is the asset page.
            form["back"] = f"/assets/{asset_id}"
            answer = await signed_in.submit(f"/assets/{asset_id}{path}", form)
            assert answer.status_code == 303, path
            shown = await signed_in.get(answer.headers["location"])
            assert shown.status_code == 404 and "asset not found" in shown.text, path
    after = await _detail(webapp, bob, bobs)
    assert after.asset.title == "Bob's" and after.asset.status != "deleted"


async def test_edit_saves_and_a_refusal_keeps_what_was_typed(
    signed_in: WebClient, webapp: WebApp, make_person: Callable[..., Any]
) -> None:
    alice = await make_person("alice@example.com")
    asset_id = await save_picture(webapp.services, alice, 3, title="Old title")
    await signed_in.get(f"/assets/{asset_id}")
    saved = await signed_in.submit(
        f"/assets/{asset_id}/edit",
        {"title": "New title", "description": "Now described", "tags": "Red, boat"},
    )
    assert saved.status_code == 303 and saved.headers["location"] == f"/assets/{asset_id}"
    shown = await signed_in.get(f"/assets/{asset_id}")
    assert "Saved." in shown.text and '<h1 id="asset-title">New title</h1>' in shown.text
    detail = await _detail(webapp, alice, asset_id)
    assert (detail.asset.title, detail.asset.description, detail.asset.tags) == (
        "New title",
        "Now described",
        ["red", "boat"],
    )
    refused = await signed_in.submit(
        f"/assets/{asset_id}/edit",
        {"title": "   ", "description": "typed but refused", "tags": "kept"},
    )
    # Post-redirect-get: back to the asset page at the message, which sits beside the form
    # (not in the layout's banner), focused, with what was typed.
    assert refused.status_code == 303
    assert refused.headers["location"] == f"/assets/{asset_id}#asset-edit-error"
    shown = await signed_in.get(f"/assets/{asset_id}")
    assert shown.status_code == 200
    assert "title: cannot be empty" in shown.text and "invalid_input" in shown.text
    assert '<div id="asset-edit-error" class="flash flash-error" role="alert"' in shown.text
    assert shown.text.count('role="alert"') == 1
    assert "typed but refused</textarea>" in shown.text and 'value="kept"' in shown.text
    assert (await _detail(webapp, alice, asset_id)).asset.title == "New title"
    # Shown once: a reload shows the saved values and no message.
    again = await signed_in.get(f"/assets/{asset_id}")
    assert "cannot be empty" not in again.text and "typed but refused" not in again.text
    # The action's address, reloaded or bookmarked, is the asset page, never a 405.
    for action in ("edit", "move", "retry", "context"):
        reloaded = await signed_in.get(f"/assets/{asset_id}/{action}")
        assert reloaded.status_code == 303, action
        assert reloaded.headers["location"] == f"/assets/{asset_id}", action
    # Without its CSRF token the form changes nothing.
    forged = await signed_in.submit(
        f"/assets/{asset_id}/edit",
        {"title": "Forged", "description": "", "tags": ""},
        csrf=False,
    )
    assert forged.status_code == 403
    assert (await _detail(webapp, alice, asset_id)).asset.title == "New title"


async def test_move_to_a_folder_and_out_of_any_project(
    signed_in: WebClient, webapp: WebApp, make_person: Callable[..., Any]
) -> None:
    alice = await make_person("alice@example.com")
    asset_id = await save_picture(webapp.services, alice, 4)
    await signed_in.get("/library")
    made = await signed_in.submit("/library/projects", {"vault": "Library", "name": "Trips"})
    project_id = made.headers["location"].split("project=")[1]
    folder = await signed_in.submit(
        "/library/folders", {"vault": "Library", "project": project_id, "name": "Sea"}
    )
    folder_id = folder.headers["location"].split("folder=")[1]
    page = await signed_in.get(f"/assets/{asset_id}")
    assert f'<option value="{project_id}/{folder_id}">Trips/Sea</option>' in page.text
    assert '<option value="" selected>No project</option>' in page.text
    moved = await signed_in.submit(
        f"/assets/{asset_id}/move", {"place": f"{project_id}/{folder_id}"}
    )
    assert moved.status_code == 303
    page = await signed_in.get(f"/assets/{asset_id}")
    assert "Moved." in page.text
    assert f'<option value="{project_id}/{folder_id}" selected>Trips/Sea</option>' in page.text
    detail = await _detail(webapp, alice, asset_id)
    assert (detail.asset.project_id, detail.asset.folder_id) == (project_id, folder_id)
    await signed_in.submit(f"/assets/{asset_id}/move", {"place": ""})
    detail = await _detail(webapp, alice, asset_id)
    assert (detail.asset.project_id, detail.asset.folder_id) == (None, None)


async def test_download_redirects_to_a_fresh_signed_original_and_changes_nothing(
    signed_in: WebClient, webapp: WebApp, make_person: Callable[..., Any]
) -> None:
    alice = await make_person("alice@example.com")
    asset_id = await save_picture(webapp.services, alice, 5, title="Keep")
    before = await _detail(webapp, alice, asset_id)
    answer = await signed_in.get(f"/assets/{asset_id}/original")
    assert answer.status_code == 303
    link = answer.headers["location"]
    assert "signature=" in link and link.startswith(webapp.base_url)
    again = await signed_in.get(f"/assets/{asset_id}/original")
    assert again.headers["location"] != link or "expires=" in link
    original = await signed_in.http.get(link)
    assert original.status_code == 200 and original.content == picture(5)
    assert original.headers["content-disposition"].startswith("attachment")
    after = await _detail(webapp, alice, asset_id)
    assert after.asset.updated_at == before.asset.updated_at


async def test_delete_asks_first_then_moves_to_the_trash(
    signed_in: WebClient, webapp: WebApp, make_person: Callable[..., Any]
) -> None:
    alice = await make_person("alice@example.com")
    asset_id = await save_picture(webapp.services, alice, 6, title="Goodbye")
    page = await signed_in.get(f"/assets/{asset_id}")
    # The page's link opens the confirmation page without scripts, a dialog with them.
    assert f'href="/assets/{asset_id}/delete" data-delete-dialog="asset-delete-dialog"' in page.text
    assert '<dialog id="asset-delete-dialog"' in page.text
    assert '<h2 id="asset-delete-dialog-title">Delete “Goodbye”?</h2>' in page.text
    confirm = await signed_in.get(f"/assets/{asset_id}/delete")
    assert confirm.status_code == 200 and "Delete “Goodbye”?" in confirm.text
    # The confirmation page is a page of its own: its question is its level-one heading.
    assert '<h1 id="asset-delete-dialog-title">Delete “Goodbye”?</h1>' in confirm.text
    assert f'action="/assets/{asset_id}/delete"' in confirm.text
    assert (await _detail(webapp, alice, asset_id)).asset.title == "Goodbye"  # GET changed nothing
    forged = await signed_in.submit(f"/assets/{asset_id}/delete", {}, csrf=False)
    assert forged.status_code == 403
    assert (await signed_in.get(f"/assets/{asset_id}")).status_code == 200
    deleted = await signed_in.submit(f"/assets/{asset_id}/delete", {})
    assert deleted.status_code == 303 and deleted.headers["location"] == "/library"
    library = await signed_in.get("/library")
    assert "Moved to the trash." in library.text
    assert '<a href="/trash">Open the trash</a>' in library.text
    assert asset_id not in library.text
    assert (await signed_in.get(f"/assets/{asset_id}")).status_code == 404


async def test_a_read_only_grant_sees_the_page_and_changes_nothing(
    webapp: WebApp, browser_for: Callable[[], WebClient], make_person: Callable[..., Any]
) -> None:
    alice = await make_person("alice@example.com")
    reader = await make_person("reader@example.com")
    await admin.grant(webapp.services.database, alice.email, "Library", reader.email, "read")
    asset_id = await save_picture(webapp.services, alice, 7, title="Shared")
    async with browser_for() as client:
        await client.sign_in(reader.key)
        page = await client.get(f"/assets/{asset_id}")
        assert page.status_code == 200 and "Read only" in page.text
        assert f'action="/assets/{asset_id}/edit"' not in page.text
        edit = await client.submit(
            f"/assets/{asset_id}/edit", {"title": "Taken", "description": "", "tags": ""}
        )
        assert edit.status_code == 303
        refused = await client.get(edit.headers["location"])
        assert "write access is needed" in refused.text and "forbidden" in refused.text
        for path, form in (("/move", {"place": ""}), ("/delete", {})):
            form["back"] = f"/assets/{asset_id}"
            answer = await client.submit(f"/assets/{asset_id}{path}", form)
            assert answer.status_code == 303 and answer.headers["location"] == f"/assets/{asset_id}"
            shown = await client.get(answer.headers["location"])
            assert "forbidden" in shown.text and "write access is needed" in shown.text
        download = await client.get(f"/assets/{asset_id}/original")
        assert download.status_code == 303  # a reader may download what it may read
    after = await _detail(webapp, alice, asset_id)
    assert after.asset.title == "Shared" and after.asset.status != "deleted"


async def test_a_failed_representation_shows_its_reason_and_retries(
    signed_in: WebClient, webapp: WebApp, make_person: Callable[..., Any]
) -> None:
    alice = await make_person("alice@example.com")
    failing = replace(
        webapp.services,
        embedder=ScriptedEmbedder(
            # Every call fails: the batch, then each job alone.
            model_name="local-hash-v1",
            script=[ProviderRejected("wrong_dimensions", "no") for _ in range(4)],
        ),
    )
    asset_id = await save_picture(failing, alice, 8, title="Stubborn")
    await job_worker(failing).drain()
    page = await signed_in.get(f"/assets/{asset_id}")
    assert "✕</span> Failed" in page.text and "wrong_dimensions" in page.text
    retry = re.search(r'name="representation" value="(\w+)">\s*<button[^>]*>Retry', page.text)
    assert retry is not None
    representation = retry.group(1)
    answer = await signed_in.submit(f"/assets/{asset_id}/retry", {"representation": representation})
    assert answer.status_code == 303
    shown = await signed_in.get(answer.headers["location"])
    assert f"The {representation} embedding is queued again." in shown.text
    states = {
        r.representation: r.status
        for r in (await _detail(webapp, alice, asset_id)).asset.representations
    }
    assert states[representation] == "queued"
    # Nothing failed any more: the workflow's conflict is shown, nothing changes.
    again = await signed_in.submit(f"/assets/{asset_id}/retry", {"representation": representation})
    shown = await signed_in.get(again.headers["location"])
    assert "conflict" in shown.text and "nothing to retry" in shown.text


async def test_a_retry_without_a_representation_is_invalid_input_before_any_access_check(
    signed_in: WebClient, webapp: WebApp, make_person: Callable[..., Any]
) -> None:
    alice = await make_person("alice@example.com")
    bob = await make_person("bob@example.com")
    mine = await save_picture(webapp.services, alice, 5, title="Mine")
    bobs = await save_picture(webapp.services, bob, 6, title="Bob's")
    await signed_in.get(f"/assets/{mine}")
    # Missing, empty and unknown: each is the caller's mistake, whoever owns the image.
    for asset_id in (mine, bobs, MISSING):
        for form in ({}, {"representation": ""}, {"representation": "sideways"}):
            form = {**form, "back": f"/assets/{mine}"}
            answer = await signed_in.submit(f"/assets/{asset_id}/retry", form)
            assert answer.status_code == 303, (asset_id, form)
            shown = await signed_in.get(answer.headers["location"])
            assert "invalid_input" in shown.text and "representation" in shown.text, form
            assert "internal" not in shown.text, form
    states = {r.status for r in (await _detail(webapp, alice, mine)).asset.representations}
    assert states == {"queued"}  # nothing changed


async def test_a_flash_link_is_only_ever_a_local_path(signed_in: WebClient, webapp: WebApp) -> None:
    for link, shown in (("/trash", True), ("https://evil.example/", False), ("//evil", False)):
        flash = json.dumps({"kind": "ok", "message": "Note.", "link": link, "linkText": "Go"})
        signed_in.http.cookies.set("mem_flash", flash, domain="127.0.0.1", path="/")
        page = await signed_in.get("/library")
        assert "Note." in page.text
        assert (f'<a href="{link}">Go</a>' in page.text) is shown, link
        assert "evil" not in page.text


async def test_the_generated_description_is_shown_and_a_person_accepts_or_clears_it(
    signed_in: WebClient, webapp: WebApp, make_person: Callable[..., Any]
) -> None:
    alice = await make_person("alice@example.com")
    model = ScriptedDescriber(
        default=lambda request: {
            "caption": "A <b>heron</b> standing in reeds",
            "visibleText": "",
            "subjects": ["heron"],
            "setting": "a marsh",
            "kind": "photo",
            "language": None,
            "safety": {"adult": False, "violence": False, "medical": False, "personalData": False},
        }
    )
    describing = replace(webapp.services, describer=model)
    asset_id = await save_picture(describing, alice, 9, title="IMG_9.png")
    await job_worker(describing).drain()
    page = await signed_in.get(f"/assets/{asset_id}")
    assert "Generated description" in page.text and "Not reviewed" in page.text
    assert "A &lt;b&gt;heron&lt;/b&gt; standing in reeds" in page.text  # escaped, as any text
    assert "scripted-vision-1" in page.text
    accepted = await signed_in.submit(f"/assets/{asset_id}/context", {"decision": "accept"})
    shown = await signed_in.get(accepted.headers["location"])
    assert "Description accepted." in shown.text and "Accept description" not in shown.text
    cleared = await signed_in.submit(f"/assets/{asset_id}/context", {"decision": "clear"})
    shown = await signed_in.get(cleared.headers["location"])
    assert "Description cleared." in shown.text and "Generated description" not in shown.text
    assert (await _detail(webapp, alice, asset_id)).asset.generated_context is None
    # Nothing left to clear: the workflow's refusal is shown, nothing changes.
    again = await signed_in.submit(f"/assets/{asset_id}/context", {"decision": "clear"})
    shown = await signed_in.get(again.headers["location"])
    assert "no generated context" in shown.text


# Each kind the names' rule refuses: C1 NEL, RLO, zero-width space, BOM, soft hyphen, a tag.
INVISIBLE = "\u0085\u009b\u202e\u2066\u200b\u200d\ufeff\u00ad\u2028\U000e0061"


async def test_the_edit_form_drops_invisible_characters_from_caller_text(
    signed_in: WebClient, webapp: WebApp, make_person: Callable[..., Any]
) -> None:
    alice = await make_person("alice@example.com")
    asset_id = await save_picture(webapp.services, alice, 3, title="Old")
    await signed_in.get(f"/assets/{asset_id}")
    answer = await signed_in.submit(
        f"/assets/{asset_id}/edit",
        {
            "title": f"Ne\u0085w{INVISIBLE}",
            "description": f"D\u202eesc{INVISIBLE}",
            "tags": f"re\u200bd, b{INVISIBLE}oat",
        },
    )
    assert answer.status_code == 303
    page = (await signed_in.get(f"/assets/{asset_id}")).text
    assert '<h1 id="asset-title">New</h1>' in page
    assert not any(char in page for char in INVISIBLE)
    assert ">red</a>" in page and ">boat</a>" in page
