"""Tags typed in a comma-separated field, read by one rule everywhere the web app takes them.

The rule (:func:`memory_tools.web.bodies.comma_separated`) is tested once here; then each entry
point (the asset page's edit, the bulk actions' Tag field, the library's and search's tag
filter) is shown to read a field by it and to meet the limits of the validator behind it: more
than 32 tags, or a tag longer than 64 characters, is refused and changes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, SupportsIndex

from sqlalchemy import text

from memory_tools.serving.job_worker import job_worker
from memory_tools.testing.web_app import WebApp, WebClient
from memory_tools.web.bodies import comma_separated

from .pictures import save_picture

TOO_MANY = ", ".join(f"tag{n}" for n in range(33))
TOO_LONG = "x" * 65
# The same tag typed 40 times is one tag: within the limit of 32 at every entry point.
REPEATED = ", ".join(["harbour"] * 40)


def test_the_rule_for_a_comma_separated_field() -> None:
    assert comma_separated(["beach, 2026"]) == ["beach", "2026"]
    # Blank items (doubled, leading or trailing commas, spaces only) are dropped.
    assert comma_separated([",beach,, ,2026,", "  ", ""]) == ["beach", "2026"]
    # Spaces around an item go, spaces inside it stay (the validator collapses them).
    assert comma_separated(["  north   sea , \tboat\n"]) == ["north   sea", "boat"]
    # An item typed twice is kept once, where first typed, across several fields too.
    assert comma_separated(["boat, beach, boat", "beach, sea"]) == ["boat", "beach", "sea"]
    # Case is the validator's (tags are lower-cased there): here "Boat" is not "boat".
    assert comma_separated(["Boat, boat"]) == ["Boat", "boat"]
    assert comma_separated([]) == []
    assert comma_separated([REPEATED]) == ["harbour"]


class _Counted(str):
    """An item that counts how often it is compared for equality (a repeat's lookup)."""

    comparisons = 0

    def strip(self, chars: str | None = None) -> _Counted:
        return _Counted(str.strip(self, chars))

    def __eq__(self, other: object) -> bool:
        _Counted.comparisons += 1
        return str.__eq__(self, other)

    def __hash__(self) -> int:
        return str.__hash__(self)


class _Field(str):
    """A typed field whose items are :class:`_Counted`."""

    def split(self, sep: str | None = None, maxsplit: SupportsIndex = -1) -> list[str]:
        return [_Counted(part) for part in str.split(self, sep, maxsplit)]


def test_a_long_field_is_read_in_one_pass() -> None:
    # A form may carry 64 KiB: some 13,000 distinct items. Finding a repeat by comparing each
    # item with every one kept before (a list's ``in``) took ~1.2 s of the server's event loop
    # per request; a lookup by hash compares only on a hash match. Counted, not timed.
    items = [f"t{n}" for n in range(2000)]
    _Counted.comparisons = 0
    read = comma_separated([_Field(", ".join([*items, "t5", "t7"]))])
    compared = _Counted.comparisons
    assert read == items
    assert compared < 100  # a list's ``in``: some 2 million


async def _tags(webapp: WebApp, asset_id: str) -> list[str]:
    async with webapp.services.database.engine.connect() as conn:
        found = await conn.execute(
            text("SELECT tags FROM mem_assets WHERE id = :id"), {"id": asset_id}
        )
        return list(found.scalar_one())


def _flash(answer: Any) -> str:
    return " ".join(
        value for value in answer.headers.get_list("set-cookie") if value.startswith("mem_flash=")
    )


async def test_the_asset_pages_edit_reads_tags_by_the_rule_and_meets_the_limits(
    signed_in: WebClient, webapp: WebApp, make_person: Callable[..., Any]
) -> None:
    alice = await make_person("alice@example.com")
    asset_id = await save_picture(webapp.services, alice, 1, title="Pier", tags=["old"])
    edit = f"/assets/{asset_id}/edit"
    await signed_in.get(f"/assets/{asset_id}")
    for typed, wanted in ((TOO_MANY, "tags: at most 32 tags"), (TOO_LONG, "longer than 64")):
        refused = await signed_in.submit(edit, {"title": "Pier", "description": "", "tags": typed})
        assert refused.status_code == 303
        shown = await signed_in.get(f"/assets/{asset_id}")
        assert wanted in shown.text, typed
        assert await _tags(webapp, asset_id) == ["old"]
    saved = await signed_in.submit(
        edit, {"title": "Pier", "description": "", "tags": f" Red ,, boat, {REPEATED}, red,"}
    )
    assert saved.status_code == 303
    assert await _tags(webapp, asset_id) == ["red", "boat", "harbour"]


async def test_the_bulk_tag_field_reads_tags_by_the_rule_and_meets_the_limits(
    signed_in: WebClient, webapp: WebApp, make_person: Callable[..., Any]
) -> None:
    alice = await make_person("alice@example.com")
    ids = [await save_picture(webapp.services, alice, seed, tags=["old"]) for seed in (1, 2)]
    await signed_in.get("/library")
    form = {"action": "addTags", "assetIds": ids, "back": "/library"}
    for typed, wanted in ((TOO_MANY, "addTags: at most 32 tags"), (TOO_LONG, "longer than 64")):
        refused = await signed_in.submit("/bulk", {**form, "tag": typed})
        assert wanted in refused.text or wanted in _flash(refused), typed
        assert [await _tags(webapp, i) for i in ids] == [["old"], ["old"]]
    tagged = await signed_in.submit("/bulk", {**form, "tag": f" Red ,, boat, {REPEATED},"})
    assert tagged.status_code == 200 and "Tagged 2 of 2 images" in tagged.text
    assert [await _tags(webapp, i) for i in ids] == [["old", "red", "boat", "harbour"]] * 2
    # An empty field (commas and spaces only) is no tag: refused, nothing changed.
    empty = await signed_in.submit("/bulk", {**form, "tag": " , ,"})
    assert "tags: type the tag" in empty.text or "tags: type the tag" in _flash(empty)


_CARD_LINK = re.compile(r'href="/assets/(ast_[A-Za-z0-9]+)"')


async def test_the_tag_filters_read_tags_by_the_rule_and_meet_the_limits(
    signed_in: WebClient, webapp: WebApp, make_person: Callable[..., Any]
) -> None:
    alice = await make_person("alice@example.com")
    beach = await save_picture(webapp.services, alice, 1, title="Beach", tags=["beach", "2026"])
    await save_picture(webapp.services, alice, 2, title="City", tags=["city"])
    await job_worker(webapp.services).drain()  # searchable
    for path in ("/library", "/search?query=beach&"):
        sep = "&" if path.endswith("&") else "?"
        base = path.rstrip("&")
        found = await signed_in.get(f"{base}{sep}tags=,beach,,+2026+,beach,")
        assert found.status_code == 200, path
        assert _CARD_LINK.findall(found.text) == [beach], path
        many = await signed_in.get(f"{base}{sep}tags={TOO_MANY}")
        assert "tags: at most 32 values" in many.text, path
        long = await signed_in.get(f"{base}{sep}tags={TOO_LONG}")
        assert "tags: at most 64 characters" in long.text, path
        # The same tag 40 times is one filter term, within the limit.
        repeated = await signed_in.get(f"{base}{sep}tags={'beach,' * 40}")
        assert _CARD_LINK.findall(repeated.text) == [beach], path
