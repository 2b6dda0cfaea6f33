"""Attacks on the pages and their JSON endpoints from another tenant or a grantee, over real HTTP:
what each must refuse, and what it must not tell."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

from sqlalchemy import event

from memory_tools.access import authenticate
from memory_tools.operations import admin
from memory_tools.testing.web_app import WebApp, WebClient
from memory_tools.workflows import projects

from ..pictures import picture
from .pictures import save_picture


async def _upload(client: WebClient, data: bytes, **extra: Any) -> dict[str, Any]:
    started = await client.call(
        "POST",
        "/app/uploads",
        json={"contentType": "image/png", "contentLength": len(data), **extra},
    )
    assert started.status_code == 201, started.text
    ticket = started.json()
    headers = {k: v for k, v in ticket["headers"].items() if k.lower() != "content-length"}
    put = await client.http.put(ticket["url"], content=data, headers=headers)
    assert put.status_code == 200, put.text
    done = await client.call("POST", ticket["completeUrl"], json={})
    assert done.status_code == 200, done.text
    return done.json()


async def test_a_grantee_cannot_learn_what_the_owner_stores_in_a_private_vault(
    webapp: WebApp, browser_for: Callable[[], WebClient], make_person: Callable[..., Any]
) -> None:
    """Bytes are shared across the owner's vaults; a save into a shared vault must not say so.

    Otherwise a grantee of one vault learns, image by image, whether the owner stores exactly
    these bytes anywhere (their private Library included): the oracle design.md rules out.
    """
    alice = await make_person("alice@example.com")
    bob = await make_person("bob@example.com")
    database = webapp.services.database
    await admin.create_vault(database, alice.email, "Team")
    await admin.grant(database, alice.email, "Team", bob.email, "write")
    await save_picture(webapp.services, alice, 41)  # in alice's private Library
    async with browser_for() as theirs:
        await theirs.sign_in(bob.key)
        probe = await _upload(theirs, picture(41), vault="alice@example.com/Team")
        fresh = await _upload(theirs, picture(42), vault="alice@example.com/Team")
        assert probe["deduplicated"] is False
        assert probe.keys() == fresh.keys()


def _flash(answer: Any) -> str:
    for value in answer.headers.get_list("set-cookie"):
        if value.startswith("mem_flash="):
            return unquote(value.split(";", 1)[0].removeprefix("mem_flash="))
    return ""


async def test_a_grantees_purge_does_not_tell_whether_the_owner_keeps_the_bytes_elsewhere(
    webapp: WebApp, browser_for: Callable[[], WebClient], make_person: Callable[..., Any]
) -> None:
    """An admin grantee may purge; whether the bytes went must not say what else the owner has.

    "Its bytes stay (1 other image(s) use the same bytes)" after purging an image saved into the
    shared vault would say that the owner stores exactly these bytes in a vault the grantee
    cannot see. The owner is still told (their own images).
    """
    alice = await make_person("alice@example.com")
    bob = await make_person("bob@example.com")
    database = webapp.services.database
    await admin.create_vault(database, alice.email, "Team")
    await admin.grant(database, alice.email, "Team", bob.email, "admin")
    await save_picture(webapp.services, alice, 43)  # in alice's private Library
    async with browser_for() as theirs, browser_for() as mine:
        await theirs.sign_in(bob.key)
        await mine.sign_in(alice.key)
        notices: list[str] = []
        for seed in (43, 44):  # alice stores 43 elsewhere, 44 nowhere
            saved = await _upload(theirs, picture(seed), vault="alice@example.com/Team")
            deleted = await theirs.submit(f"/assets/{saved['assetId']}/delete")
            assert deleted.status_code == 303 and "trash" in _flash(deleted)
            purged = await theirs.submit(f"/trash/{saved['assetId']}/purge", {"confirmed": "yes"})
            assert purged.status_code == 303
            notices.append(_flash(purged))
        assert "Purged" in notices[0]
        assert notices[0] == notices[1]
        assert "other image" not in notices[0]
        # Alice's own purge still says why the bytes stay.
        again = await _upload(mine, picture(43))
        await mine.submit(f"/assets/{again['assetId']}/delete")
        hers = await mine.submit(f"/trash/{again['assetId']}/purge", {"confirmed": "yes"})
        assert "other image(s) use the same bytes" in _flash(hers)


async def test_the_asset_page_reads_the_vaults_folders_at_once_however_many_projects(
    webapp: WebApp, signed_in: WebClient, make_person: Callable[..., Any]
) -> None:
    """Its move menu lists every project and folder of the vault: not one query per project.

    Otherwise anyone who may create projects in a vault (a write grantee too) makes every
    asset page of that vault cost a round of queries per project, in one transaction.
    """
    alice = await make_person("alice@example.com")
    services = webapp.services
    asset_id = await save_picture(services, alice, 45)

    async def statements() -> int:
        seen: list[str] = []

        def count(*args: Any) -> None:
            seen.append(str(args[2]))

        engine = services.database.engine.sync_engine
        event.listen(engine, "before_cursor_execute", count)
        try:
            page = await signed_in.http.get(f"/assets/{asset_id}")
        finally:
            event.remove(engine, "before_cursor_execute", count)
        assert page.status_code == 200
        return len(seen)

    async def add_projects(count: int) -> None:
        async with services.database.unit_of_work() as uow:
            caller = await authenticate(uow, alice.key)
            for _ in range(count):
                project = await projects.create_project(
                    uow,
                    caller,
                    services,
                    vault="Library",
                    name=f"Project {len(made)}",
                    description=None,
                )
                made.append(project.project_id)
                await projects.create_folder(
                    uow,
                    caller,
                    services,
                    vault="Library",
                    project_id=project.project_id,
                    parent_id=None,
                    name="f",
                )

    made: list[str] = []
    await add_projects(2)
    few = await statements()
    await add_projects(20)
    many = await statements()
    page = await signed_in.http.get(f"/assets/{asset_id}")
    assert page.text.count('value="apr_') == 22 * 2  # each project, and its folder
    assert many == few


async def test_previews_load_at_whatever_address_the_app_was_opened(
    webapp: WebApp, signed_in: WebClient, make_person: Callable[..., Any]
) -> None:
    """A local store's signed link as a path: only the page's own origin passes its CSP.

    The pages' images point at the preview route (a path), which redirects to the link.

    Opened at ``localhost`` when the server names itself ``127.0.0.1`` (or the other way
    round, or through a proxy), an absolute link is another origin: img-src 'self' blocks
    every preview of the library, the asset page, its delete page and the trash.
    """
    alice = await make_person("alice@example.com")
    services = webapp.services
    kept = await save_picture(services, alice, 46)
    gone = await save_picture(services, alice, 47)
    deleted = await signed_in.submit(f"/assets/{gone}/delete")
    assert deleted.status_code == 303
    for path in ("/library", f"/assets/{kept}", f"/assets/{kept}/delete", "/trash"):
        page = await signed_in.http.get(path)
        assert page.status_code == 200, path
        sources = re.findall(r'<img[^>]* src="([^"]+)"', page.text)
        assert sources, path
        # Each image loads through the preview route, whose redirect is a path too.
        assert all(src.startswith("/app/previews/") for src in sources), (path, sources)
        for src in sources:
            redirect = await signed_in.http.get(src)
            assert redirect.status_code == 303, src
            assert redirect.headers["location"].startswith("/objects/"), (path, src)


async def test_a_grantee_over_the_owners_quota_is_not_told_the_owners_numbers(
    webapp: WebApp, browser_for: Callable[[], WebClient], make_person: Callable[..., Any]
) -> None:
    """``quota_exceeded`` says "N used + M reserved > Q" to the owner: their whole account.

    A grantee who pushes a shared vault over its owner's quota (a large upload start is
    enough) must not learn how much the owner stores across their vaults, nor their quota.
    """
    database = webapp.services.database
    await admin.create_identity(database, "alice@example.com", 200_000)
    alice = await make_person("alice@example.com")
    bob = await make_person("bob@example.com")
    await admin.create_vault(database, alice.email, "Team")
    await admin.grant(database, alice.email, "Team", bob.email, "write")
    await save_picture(webapp.services, alice, 48)
    async with browser_for() as theirs, browser_for() as mine:
        await theirs.sign_in(bob.key)
        await mine.sign_in(alice.key)
        ask = {"contentType": "image/png", "contentLength": 190_000}
        refused = await theirs.call(
            "POST", "/app/uploads", json={**ask, "vault": "alice@example.com/Team"}
        )
        assert refused.status_code >= 400, refused.text
        error = refused.json()["error"]
        assert error["code"] == "quota_exceeded"
        assert not re.search(r"\d", error["message"]), error["message"]
        # The owner is told the numbers of her own account.
        hers = await mine.call("POST", "/app/uploads", json={**ask, "vault": "Team"})
        assert hers.json()["error"]["code"] == "quota_exceeded"
        assert re.search(r"\d+ used", hers.json()["error"]["message"])
