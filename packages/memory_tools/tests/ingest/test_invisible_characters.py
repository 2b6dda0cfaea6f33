"""Caller text loses every character a name refuses (issue 30: C1 controls, U+202E and U+200B
survived in titles, descriptions, alt texts and tags).

The rule lives once, in ``memory_db.repositories.drop_forbidden_characters``, and
``memory_tools.ingest.inputs`` applies it to every text field; every entry point (MCP, the
HTTP upload routes, the web forms, ``memory-server import``) builds its save or edit through
those functions, so the MCP tools here and the web edit form (web/test_asset_page.py) stand for them all.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastmcp import Client

from memory_db.repositories import drop_forbidden_characters, has_forbidden_characters
from memory_tools.ingest import inputs

from ..pictures import b64, picture
from ..tool_calls import call as _call
from ..tool_calls import error as _error

# One of each kind the names' rule refuses; each must vanish from caller text.
DROPPED = {
    "C1 NEL": "\u0085",
    "C1 CSI": "\u009b",
    "C1 APC": "\u009f",
    "C0 ESC": "\x1b",
    "DEL": "\x7f",
    "right-to-left override": "\u202e",
    "left-to-right isolate": "\u2066",
    "zero-width space": "\u200b",
    "zero-width joiner": "\u200d",
    "byte order mark": "\ufeff",
    "soft hyphen": "\u00ad",
    "line separator": "\u2028",
    "tag latin small a": "\U000e0061",
}
ALL = "".join(DROPPED.values())


@pytest.mark.parametrize("char", DROPPED.values(), ids=DROPPED.keys())
def test_the_shared_rule_drops_what_names_refuse(char: str) -> None:
    assert has_forbidden_characters(f"a{char}b")
    assert drop_forbidden_characters(f"a{char}b") == "ab"
    assert inputs.clean_text(f" Har{char}bour ", "title", 240) == "Harbour"
    assert inputs.canonical_tags([f"s{char}ea"]) == ["sea"]


def test_line_breaks_and_tabs_stay_in_text_and_nul_is_still_refused() -> None:
    assert inputs.clean_text("one\n\ttwo\r\n", "description", 4000) == "one\n\ttwo"
    assert inputs.canonical_tags(["sea\tside"]) == ["sea side"]
    with pytest.raises(inputs.InvalidInputFailure, match="NUL"):
        inputs.clean_text("a\x00b", "title", 240)
    # A tag of nothing but invisible characters is no tag: refused, not saved empty.
    with pytest.raises(inputs.InvalidInputFailure, match="tags: a tag is empty"):
        inputs.canonical_tags([ALL])
    with pytest.raises(inputs.InvalidInputFailure, match="idempotencyKey"):
        inputs.idempotency_key("key\u0085")


async def test_save_and_update_drop_them_from_every_text_field(
    client_as: Callable[[str], Client[Any]], alice: Any
) -> None:
    async with client_as(alice.key) as client:
        saved = await _call(
            client,
            "image_asset_save",
            {
                "imageBase64": b64(picture(1)),
                "title": f"Har{ALL}bour",
                "description": f"Dawn{ALL} light",
                "altText": f"Boats{ALL} moored",
                "tags": [f"s{ALL}ea", f"\u202eboat{ALL}"],
            },
        )
        got = await _call(client, "image_asset_get", {"assetId": saved["assetId"]})
        assert (got["title"], got["description"], got["altText"], got["tags"]) == (
            "Harbour",
            "Dawn light",
            "Boats moored",
            ["sea", "boat"],
        )
        await _call(
            client,
            "image_asset_update",
            {
                "assetId": saved["assetId"],
                "title": f"Quay{ALL}side",
                "description": f"Dusk{ALL}",
                "altText": f"Nets{ALL}",
                "tags": [f"ne{ALL}t"],
            },
        )
        got = await _call(client, "image_asset_get", {"assetId": saved["assetId"]})
        assert (got["title"], got["description"], got["altText"], got["tags"]) == (
            "Quayside",
            "Dusk",
            "Nets",
            ["net"],
        )
        # Nothing visible left: a title cannot be emptied, a tag cannot be empty.
        refused = await _error(
            client, "image_asset_update", {"assetId": saved["assetId"], "tags": [ALL]}
        )
        assert refused == "invalid_input: tags: a tag is empty"
        again = await _call(client, "image_asset_get", {"assetId": saved["assetId"]})
        assert again["tags"] == ["net"]
