"""The duplicates page over real HTTP: its clusters, keep-one, not-duplicates, CSRF, another
owner's cluster ids refused like missing ones, and read-only access that may only look."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

import pyvips
from sqlalchemy import text

from memory_tools import MemoryServices
from memory_tools.access import Caller
from memory_tools.ingest.save import AssetSaver, SaveRequest
from memory_tools.operations.enrich import enrich_vault
from memory_tools.serving.job_worker import job_worker
from memory_tools.testing.web_app import WebApp, WebClient

USER = frozenset({"read", "write", "destructive"})
MISSING = "ast_" + "z" * 26


def _flash(answer: Any) -> str:
    """The flash message a redirect carries (its cookie), decoded."""
    for value in answer.headers.get_list("set-cookie"):
        if value.startswith("mem_flash="):
            return unquote(value.split(";", 1)[0].removeprefix("mem_flash="))
    return ""


def _photo(seed: int) -> bytes:
    """A smooth picture per seed: gradients, as a photo has, so a re-encode keeps its look.

    (The sharp stripes of ``pictures.picture`` come out of a JPEG changed enough to fall
    outside the near-duplicate distance, as a screenshot of text may.)
    """
    xyz = pyvips.Image.xyz(160, 120)
    red = ((xyz[0] * (seed % 3 + 1) + xyz[1]) % 256).cast("uchar")
    green = ((xyz[1] * 2 + seed * 40) % 256).cast("uchar")
    blue = ((xyz[0] + xyz[1] + seed * 90) % 256).cast("uchar")
    return red.bandjoin([green, blue]).copy(interpretation="srgb").pngsave_buffer()


def _reencoded(png: bytes) -> bytes:
    """The same picture as a JPEG: other bytes (no exact dedupe), the same look."""
    return pyvips.Image.new_from_buffer(png, "").jpegsave_buffer(Q=90)


async def _save(services: MemoryServices, person: Any, data: bytes, title: str) -> str:
    caller = Caller(person.email, person.key_id, USER)
    request = SaveRequest(image_base64=base64.b64encode(data).decode(), title=title)
    return (await AssetSaver(services).save(caller, request)).asset_id


async def _pair(services: MemoryServices, person: Any, seed: int, title: str) -> tuple[str, str]:
    """A picture and its re-encode, saved as ``person``: a near-duplicate pair once embedded."""
    png = _photo(seed)
    original = await _save(services, person, png, title)
    copy = await _save(services, person, _reencoded(png), f"{title} (copy)")
    return original, copy


def _groups(page: str) -> list[list[str]]:
    """The groups the page offers: each keep form's asset ids, in order."""
    forms = re.findall(r'<form method="post" action="/duplicates/keep".*?</form>', page, re.S)
    return [re.findall(r'name="asset" value="([^"]+)"', form) for form in forms]


def _decision(group: list[str], **fields: str) -> dict[str, Any]:
    return {"asset": group, "vault": "Library", "back": "/duplicates", **fields}


async def _status(webapp: WebApp, asset_id: str) -> str:
    async with webapp.services.database.engine.connect() as conn:
        found = await conn.execute(
            text("SELECT status FROM mem_assets WHERE id = :a"), {"a": asset_id}
        )
        return str(found.scalar_one())


async def test_keep_one_trashes_the_others_and_not_duplicates_is_remembered(
    webapp: WebApp, alice: Any, browser_for: Callable[[], WebClient]
) -> None:
    harbour, harbour_copy = await _pair(webapp.services, alice, 1, "Harbour")
    pier, pier_copy = await _pair(webapp.services, alice, 30, "Pier")
    await job_worker(webapp.services).drain()  # the embedding job finds the pairs
    async with browser_for() as client:
        await client.sign_in(alice.key)
        page = await client.get("/duplicates")
        assert page.status_code == 200
        assert 'aria-current="page">Duplicates' in page.text
        for title in ("Harbour", "Harbour (copy)", "Pier", "Pier (copy)"):
            assert f'<span class="dups-member-title">{title}</span>' in page.text
        groups = _groups(page.text)
        assert sorted(map(sorted, groups)) == sorted(
            [sorted([harbour, harbour_copy]), sorted([pier, pier_copy])]
        )
        # Previews go through the session's preview route, as in the library.
        assert f'src="/app/previews/{harbour}"' in page.text
        # The asset page names what it looks like, with a link to the vault's duplicates.
        asset_page = await client.get(f"/assets/{pier}")
        assert '<h2 id="asset-looks-like-heading">Looks like</h2>' in asset_page.text
        assert f'<a href="/assets/{pier_copy}">Pier (copy)</a>' in asset_page.text
        assert 'href="/duplicates?vault=Library"' in asset_page.text
        harbours = next(g for g in groups if harbour in g)
        piers = next(g for g in groups if pier in g)

        # Without the CSRF token nothing happens.
        refused = await client.submit(
            "/duplicates/keep", _decision(harbours, keep=harbour), csrf=False
        )
        assert refused.status_code == 403
        refused = await client.submit("/duplicates/dismiss", _decision(piers), csrf=False)
        assert refused.status_code == 403
        assert await _status(webapp, harbour_copy) != "deleted"
        assert len(_groups((await client.get("/duplicates")).text)) == 2

        # Keeping an image that is not one of the group's is refused before anything changes.
        stray = await client.submit("/duplicates/keep", _decision(harbours, keep=pier))
        assert stray.status_code == 303 and "invalid_input" in _flash(stray)
        assert await _status(webapp, harbour_copy) != "deleted"

        kept = await client.submit("/duplicates/keep", _decision(harbours, keep=harbour))
        assert kept.status_code == 200
        assert "Kept one image; 1 of 1 moved to the trash" in kept.text
        assert f'href="/assets/{harbour}">Harbour</a>' in kept.text
        assert "Moved to the trash</span>\n      <span>Harbour (copy)</span>" in kept.text
        assert await _status(webapp, harbour_copy) == "deleted"
        assert await _status(webapp, harbour) != "deleted"
        assert "Harbour (copy)" in (await client.get("/trash")).text

        dismissed = await client.submit("/duplicates/dismiss", _decision(piers))
        assert dismissed.status_code == 303 and dismissed.headers["location"] == "/duplicates"
        assert "Marked as not duplicates" in _flash(dismissed)
        after = await client.get("/duplicates")
        assert _groups(after.text) == []
        assert "No near-duplicates here" in after.text
        assert "Looks like" not in (await client.get(f"/assets/{pier}")).text
        assert "memory-server enrich --what duplicates" in after.text
        assert await _status(webapp, pier) != "deleted"
        assert await _status(webapp, pier_copy) != "deleted"
        # enrich compares every image again (its pairs found again): the decision holds.
        report = await enrich_vault(webapp.services, alice.email, "Library", ["duplicates"])
        assert report.queued == 3  # Harbour and both Piers; the copy is in the trash
        await job_worker(webapp.services).drain()
        assert _groups((await client.get("/duplicates")).text) == []
        # Sent again (a second tab): nothing is left to dismiss, and the page says so.
        again = await client.submit("/duplicates/dismiss", _decision(piers))
        assert again.status_code == 303 and "not_found" in _flash(again)


async def test_another_owners_group_is_refused_like_a_missing_one(
    webapp: WebApp, alice: Any, bob: Any, browser_for: Callable[[], WebClient]
) -> None:
    harbour, harbour_copy = await _pair(webapp.services, alice, 2, "Alice's harbour")
    await job_worker(webapp.services).drain()
    async with browser_for() as as_alice:
        await as_alice.sign_in(alice.key)
        (hers,) = _groups((await as_alice.get("/duplicates")).text)
    async with browser_for() as client:
        await client.sign_in(bob.key)
        page = await client.get("/duplicates")
        assert "Alice's harbour" not in page.text and _groups(page.text) == []
        # In bob's own vault, alice's ids are no group, exactly like ids that never existed.
        missing = [harbour, MISSING]
        theirs = await client.submit("/duplicates/dismiss", _decision(hers))
        unknown = await client.submit("/duplicates/dismiss", _decision(missing))
        assert theirs.status_code == unknown.status_code == 303
        assert _flash(theirs) == _flash(unknown) and "not_found" in _flash(theirs)
        # Keeping one of hers: not found like an id that never existed, and nothing "kept".
        theirs = await client.submit("/duplicates/keep", _decision(hers, keep=harbour))
        unknown = await client.submit("/duplicates/keep", _decision(missing, keep=MISSING))
        assert theirs.status_code == unknown.status_code == 303
        assert _flash(theirs) == _flash(unknown) and "not_found" in _flash(theirs)
        assert "Kept" not in theirs.text
        # Naming her vault: not found, for either form.
        for path, fields in (("/duplicates/keep", {"keep": harbour}), ("/duplicates/dismiss", {})):
            named = await client.submit(
                path, _decision(hers, vault="alice@example.com/Library", **fields)
            )
            assert named.status_code == 303 and "not_found" in _flash(named)
        listing = await client.get("/duplicates?vault=alice@example.com/Library")
        assert listing.status_code == 404 and "Alice's harbour" not in listing.text
    assert await _status(webapp, harbour_copy) != "deleted"
    async with browser_for() as as_alice:
        await as_alice.sign_in(alice.key)
        assert _groups((await as_alice.get("/duplicates")).text) == [hers]


async def test_read_only_access_may_look_but_not_keep_or_dismiss(
    webapp: WebApp, make_person: Callable[..., Any], browser_for: Callable[[], WebClient]
) -> None:
    alice = await make_person("alice@example.com")
    reader = await make_person("alice@example.com", scopes=("read",))
    harbour, harbour_copy = await _pair(webapp.services, alice, 3, "Harbour")
    await job_worker(webapp.services).drain()
    async with browser_for() as client:
        await client.sign_in(reader.key)
        page = await client.get("/duplicates")
        (group,) = _groups(page.text)
        assert "needs write access" in page.text
        assert "Keep this one, trash the others" not in page.text
        assert "Not duplicates" not in page.text
        dismissed = await client.submit("/duplicates/dismiss", _decision(group))
        assert dismissed.status_code == 303 and "forbidden" in _flash(dismissed)
        kept = await client.submit("/duplicates/keep", _decision(group, keep=harbour))
        assert kept.status_code == 200 and "0 of 1 moved to the trash" in kept.text
        assert "Refused" in kept.text and "forbidden" in kept.text
        assert _groups((await client.get("/duplicates")).text) == [group]
    assert await _status(webapp, harbour_copy) != "deleted"


async def test_hostile_forms_are_refused_and_change_nothing(
    webapp: WebApp, alice: Any, browser_for: Callable[[], WebClient]
) -> None:
    harbour, harbour_copy = await _pair(webapp.services, alice, 4, "Harbour")
    await job_worker(webapp.services).drain()
    too_many = [harbour, *(f"ast_{n:026d}" for n in range(101))]
    async with browser_for() as client:
        await client.sign_in(alice.key)
        (group,) = _groups((await client.get("/duplicates")).text)
        for path, fields in (
            ("/duplicates/keep", {"asset": group}),  # nothing chosen
            ("/duplicates/keep", {"asset": [harbour_copy], "keep": harbour}),  # not in it
            ("/duplicates/keep", {"asset": too_many, "keep": harbour}),
            ("/duplicates/dismiss", {"asset": [harbour]}),  # one image is no group
            ("/duplicates/dismiss", {"asset": too_many}),
            ("/duplicates/dismiss", {"asset": [harbour, "ast_\x00" + "a" * 22]}),
            ("/duplicates/dismiss", {"asset": [harbour, "'; DROP TABLE mem_assets; --"]}),
        ):
            refused = await client.submit(path, {"vault": "Library", **fields})
            assert refused.status_code == 303, (path, fields)
            assert "invalid_input" in _flash(refused), (path, fields, _flash(refused))
        for cursor in ("nonsense", "eyJ0IjoiMjAyNi0wMS0wMSIsImkiOiJ4IiwibyI6Im5ld2VzdCJ9"):
            page = await client.get(f"/duplicates?cursor={cursor}")
            assert page.status_code == 422 and "invalid_input" in page.text
        assert _groups((await client.get("/duplicates")).text) == [group]
    assert await _status(webapp, harbour_copy) != "deleted"
