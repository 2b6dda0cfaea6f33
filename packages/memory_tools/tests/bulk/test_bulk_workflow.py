"""The bulk runner (``memory_tools.workflows.bulk``) and adding/removing tags.

Each item runs as a single call would: authorised alone, in its own unit of work, recorded
alone. A refused item is answered with the single call's code and message and never stops the
rest; the whole call is refused only for its ids or its credential.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import anyio
from fastmcp import Client
from sqlalchemy import text

from memory_db import UnitOfWork
from memory_db.unit_of_work import session_of
from memory_tools import MemoryServices
from memory_tools.access import Caller
from memory_tools.errors import NotFoundFailure
from memory_tools.key_activity import KeyActivity
from memory_tools.operations import admin
from memory_tools.wire import ANSWER_ITEMS_BUDGET, WireModel
from memory_tools.workflows import bulk, changes, edits, trash
from memory_tools.workflows.bulk import Denials, run_each
from memory_tools.workflows.calls import ApiKey

from ..locks import backend_pid, until_blocked_by
from ..pictures import b64, picture
from ..tool_calls import call as _call
from ..workflow_calls import refused, run

MISSING = "ast_" + "z" * 26


async def _rows(services: MemoryServices, sql: str, **params: Any) -> list[Any]:
    async with services.database.engine.connect() as conn:
        return list((await conn.execute(text(sql), params)).all())


async def _save(client: Client[Any], seed: int, **fields: Any) -> str:
    saved = await _call(client, "image_asset_save", {"imageBase64": b64(picture(seed)), **fields})
    return saved["assetId"]


async def _placement(services: MemoryServices, asset_id: str) -> tuple[str | None, str]:
    rows = await _rows(
        services, "SELECT project_id, status FROM mem_assets WHERE id = :a", a=asset_id
    )
    return rows[0][0], rows[0][1]


async def test_a_refused_item_in_the_middle_never_stops_the_rest(
    client_as: Callable[[str], Client[Any]],
    make_person: Any,
    saving: MemoryServices,
) -> None:
    """carol moves her two images with three she may not move between them: alice's (a
    read-only grant: forbidden), bob's (not hers: not_found, exactly like a missing id) and
    a missing id. Her two move, the others stay, each refusal is the single call's."""
    alice = await make_person("alice@example.com")
    bob = await make_person("bob@example.com")
    carol = await make_person("carol@example.com")
    await admin.grant(saving.database, "alice@example.com", "Library", "carol@example.com", "read")
    async with client_as(alice.key) as client:
        alices = await _save(client, 1)
    async with client_as(bob.key) as client:
        bobs = await _save(client, 2)
    async with client_as(carol.key) as client:
        first = await _save(client, 3)
        last = await _save(client, 4)
        project = (await _call(client, "image_project_create", {"name": "Trips"}))["projectId"]

    ids = [first, alices, bobs, MISSING, last]
    heard: list[tuple[float, float | None]] = []

    async def progress(done: float, total: float | None, message: str) -> None:
        heard.append((done, total))

    answer = await run_each(
        saving,
        ApiKey(carol.key),
        changes.move_asset,
        ids,
        progress=progress,
        denials=Denials("asset_move", "image_asset_move"),
        project_id=project,
        folder_id=None,
    )
    wire = answer.model_dump(mode="json")
    assert [item["assetId"] for item in wire["items"]] == ids
    assert [item["ok"] for item in wire["items"]] == [True, False, False, False, True]
    assert (wire["succeeded"], wire["failed"]) == (2, 3)
    assert wire["items"][0] == {
        "assetId": first,
        "ok": True,
        "vault": "Library",
        "projectId": project,
        "folderId": None,
        "objectId": wire["items"][0]["objectId"],
        "moved": True,
    }
    # Each refusal is what the single call answers, code and message.
    for item in wire["items"][1:4]:
        single = await refused(
            run(
                saving,
                carol.key,
                changes.move_asset,
                asset_id=item["assetId"],
                project_id=project,
                folder_id=None,
            )
        )
        assert f"{item['error']['code']}: {item['error']['message']}" == single
        assert set(item) == {"assetId", "ok", "error"}
    assert wire["items"][1]["error"]["code"] == "forbidden"
    # Another owner's id tells nothing a missing id does not.
    assert {**wire["items"][2], "assetId": MISSING} == wire["items"][3]
    assert wire["items"][3]["error"] == {"code": "not_found", "message": "asset not found"}
    # The allowed moved; the refused stayed where they were.
    assert await _placement(saving, first) == (project, "processing")
    assert await _placement(saving, last) == (project, "processing")
    assert (await _placement(saving, alices))[0] is None
    assert (await _placement(saving, bobs))[0] is None
    # Recorded per item: two moves, and the forbidden one as a denial like a single call's.
    moves = await _rows(
        saving,
        "SELECT target_id FROM mem_provenance WHERE operation = 'asset_move' "
        "AND outcome = 'succeeded' ORDER BY created_at",
    )
    assert sorted(row[0] for row in moves) == sorted([first, last])
    denied = await _rows(
        saving,
        "SELECT actor_identity, detail FROM mem_provenance WHERE outcome = 'denied'",
    )
    assert denied == [("carol@example.com", {"tool": "image_asset_move", "code": "forbidden"})]
    assert heard == [(n, 5) for n in range(1, 6)]


class Echo(WireModel):
    """What the test action answers."""

    asset_id: str
    seen_by: str


async def _echo(
    uow: UnitOfWork, caller: Caller, services: MemoryServices, *, asset_id: str
) -> Echo:
    del uow, services
    return Echo(asset_id=asset_id, seen_by=caller.identity)


async def test_a_hundred_ids_are_answered_and_a_hundred_and_one_refused(
    alice: Any, services: MemoryServices
) -> None:
    # Every item is a call of its key: flush each count at once to read them back.
    object.__setattr__(services, "key_activity", KeyActivity(flush_seconds=0))
    ids = [f"ast_{n:026d}" for n in range(100)]
    answer = await run_each(services, ApiKey(alice.key), _echo, ids)
    assert [item.asset_id for item in answer.items] == ids
    assert all(item.ok and item.result is not None for item in answer.items)
    assert (answer.succeeded, answer.failed) == (100, 0)
    calls = await _rows(services, "SELECT calls FROM mem_api_keys WHERE id = :k", k=alice.key_id)
    assert calls == [(100,)]

    too_many = await refused(run_each(services, ApiKey(alice.key), _echo, [*ids, MISSING]))
    assert too_many == "invalid_input: assetIds: give 1 to 100 ids, not 101"
    none = await refused(run_each(services, ApiKey(alice.key), _echo, []))
    assert none == "invalid_input: assetIds: give 1 to 100 ids, not 0"


async def test_a_repeated_id_refuses_the_call_and_changes_nothing(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices
) -> None:
    async with client_as(alice.key) as client:
        one = await _save(client, 1)
        two = await _save(client, 2)
    called: list[str] = []

    async def delete(
        uow: UnitOfWork, caller: Caller, services: MemoryServices, *, asset_id: str
    ) -> changes.DeleteResult:
        called.append(asset_id)
        return await changes.delete_asset(uow, caller, services, asset_id=asset_id)

    answer = await refused(run_each(saving, ApiKey(alice.key), delete, [one, two, one]))
    assert answer == "invalid_input: assetIds: item 3 repeats item 1; name each id once"
    assert called == []
    assert (await _placement(saving, one))[1] == "processing"


async def test_an_unknown_or_revoked_key_refuses_the_whole_call_once(
    alice: Any, make_person: Any, services: MemoryServices
) -> None:
    old = await make_person("alice@example.com")
    await admin.revoke_key(services.database, old.key_id)
    for key in (old.key, "mk_not-a-key", None):
        answer = await refused(run_each(services, ApiKey(key), _echo, [MISSING]))
        assert answer.startswith("unauthenticated: "), answer


async def test_exactly_one_of_asset_id_and_asset_ids() -> None:
    assert bulk.one_or_many("ast_1", None) == "ast_1"
    assert bulk.one_or_many(None, ["ast_1", "ast_2"]) == ["ast_1", "ast_2"]
    for both_or_neither in (("ast_1", ["ast_2"]), (None, None)):
        answer = await refused(_raising(bulk.one_or_many, *both_or_neither))
        assert answer == "invalid_input: give exactly one of assetId and assetIds"


async def _raising(function: Callable[..., Any], *args: Any) -> Any:
    return function(*args)


# --- addTags / removeTags -------------------------------------------------------------------


async def _edit(services: MemoryServices, key: str, asset_id: str, **fields: Any) -> Any:
    words: dict[str, Any] = {"title": None, "description": None, "alt_text": None, "tags": None}
    return await run(services, key, edits.update_asset, asset_id=asset_id, **(words | fields))


async def test_add_and_remove_tags_change_only_those(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices
) -> None:
    async with client_as(alice.key) as client:
        asset = await _save(client, 1, tags=["sea", "boat"])
    edited = await _edit(
        saving, alice.key, asset, add_tags=["Harbour ", "sea", "dusk"], remove_tags=["boat"]
    )
    assert edited.tags == ["sea", "harbour", "dusk"]
    assert edited.changed == ["tags"]
    again = await _edit(saving, alice.key, asset, add_tags=["dusk"], remove_tags=["absent"])
    assert again.changed == [] and again.tags == ["sea", "harbour", "dusk"]
    cleared = await _edit(saving, alice.key, asset, remove_tags=["sea", "harbour", "dusk"])
    assert cleared.tags == []
    updates = await _rows(
        saving,
        "SELECT detail FROM mem_provenance WHERE operation = 'asset_update' ORDER BY created_at",
    )
    assert [row[0]["changed"] for row in updates] == [["tags"], ["tags"]]


async def test_bad_tag_changes_are_refused_and_change_nothing(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices
) -> None:
    async with client_as(alice.key) as client:
        asset = await _save(client, 1, tags=[f"t{n}" for n in range(30)])
    cases = {
        "both": (
            {"tags": ["a"], "add_tags": ["b"]},
            "invalid_input: tags: give tags (replaces every tag) or addTags/removeTags, not both",
        ),
        "past the limit": (
            {"add_tags": ["x", "y", "z"]},
            "invalid_input: addTags: the image would have 33 tags; at most 32",
        ),
        "empty": ({"remove_tags": ["  "]}, "invalid_input: removeTags: a tag is empty"),
        "NUL": ({"add_tags": ["a\x00"]}, "invalid_input: addTags: must not contain a NUL"),
    }
    for name, (fields, expected) in cases.items():
        answer = await refused(_edit(saving, alice.key, asset, **fields))
        assert answer.startswith(expected), (name, answer)
    tags = await _rows(saving, "SELECT tags FROM mem_assets WHERE id = :a", a=asset)
    assert tags == [([f"t{n}" for n in range(30)],)]


async def test_two_concurrent_tag_additions_both_land(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices
) -> None:
    """The second statement waits for the first's lock, then adds to what the first wrote."""
    async with client_as(alice.key) as client:
        asset = await _save(client, 1, tags=["sea"])
    async with saving.database.unit_of_work() as uow:
        scope = (await uow.vaults.accessible("alice@example.com"))[0].scope
    held = anyio.Event()

    async def add_two() -> None:
        await held.wait()
        async with saving.database.unit_of_work() as uow:
            await uow.assets.change_tags(
                scope, asset, add=["two"], remove=[], max_tags=32, actor="test"
            )

    # The second caller's task starts outside the first's unit of work, as another caller's
    # would (a task started inside one may not open a second).
    async with anyio.create_task_group() as group:
        group.start_soon(add_two)
        async with saving.database.unit_of_work() as first:
            await first.assets.change_tags(
                scope, asset, add=["one"], remove=[], max_tags=32, actor="test"
            )
            held.set()
            await until_blocked_by(saving, await backend_pid(session_of(first)))
        # Leaving the block committed "one" while "two" waited for the row.
    tags = await _rows(saving, "SELECT tags FROM mem_assets WHERE id = :a", a=asset)
    assert tags == [(["sea", "one", "two"],)]


async def test_a_key_revoked_mid_way_is_refused_from_the_next_item_on(
    alice: Any, services: MemoryServices
) -> None:
    """Each item checks the credential again, as a single call does: nothing is authorised
    once for the whole batch."""
    ids = ["ast_" + "a" * 26, "ast_" + "b" * 26, "ast_" + "c" * 26]

    async def revoking(
        uow: UnitOfWork, caller: Caller, services: MemoryServices, *, asset_id: str
    ) -> Echo:
        if asset_id == ids[1]:
            await uow.api_keys.revoke(caller.key_id)  # commits with this item
        return await _echo(uow, caller, services, asset_id=asset_id)

    answer = await run_each(services, ApiKey(alice.key), revoking, ids)
    assert [item.ok for item in answer.items] == [True, True, False]
    error = answer.items[2].error
    assert error is not None and error.code == "unauthenticated", error


async def test_purging_from_the_trash_item_by_item(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices
) -> None:
    """A workflow that opens its own transactions (the purge) runs per item the same way."""
    async with client_as(alice.key) as client:
        trashed = [await _save(client, seed) for seed in (1, 2)]
        live = await _save(client, 3)
        for asset in trashed:
            await _call(client, "image_asset_delete", {"assetId": asset})
    ids = [trashed[0], live, trashed[1]]
    answer = await bulk.run_each_as_caller(saving, ApiKey(alice.key), trash.purge_asset, ids)
    wire = answer.model_dump(mode="json")
    assert [item["ok"] for item in wire["items"]] == [True, False, True]
    assert wire["items"][1]["error"] == {
        "code": "not_found",
        "message": "asset not found in the trash",
    }
    assert wire["items"][0]["bytesDeleted"] is True
    purged = await _rows(
        saving, "SELECT id FROM mem_assets WHERE purged_at IS NOT NULL ORDER BY id"
    )
    assert purged == sorted((a,) for a in trashed)


class Large(WireModel):
    """An answer as large as an edited image with every text field full."""

    asset_id: str
    words: str


async def _large(
    uow: UnitOfWork, caller: Caller, services: MemoryServices, *, asset_id: str
) -> Large:
    del uow, caller, services
    if asset_id.endswith("7"):
        raise NotFoundFailure("asset not found")
    return Large(asset_id=asset_id, words="w" * 20_000)


async def test_an_answer_past_its_budget_keeps_every_id_and_outcome(
    alice: Any, services: MemoryServices
) -> None:
    """A hundred answers of 20 kB would be 2 MB (twice over the wire): past the budget, a
    succeeded item holds its id and ok only; refusals stay whole; the answer fits."""
    ids = [f"ast_{n:026d}" for n in range(100)]
    answer = await run_each(services, ApiKey(alice.key), _large, ids)
    wire = answer.model_dump(mode="json")
    assert len(answer.model_dump_json()) <= ANSWER_ITEMS_BUDGET + 25_000
    assert [item["assetId"] for item in wire["items"]] == ids
    assert (answer.succeeded, answer.failed) == (90, 10)
    whole = [item for item in wire["items"] if "words" in item]
    brief = [item for item in wire["items"] if item["ok"] and "words" not in item]
    # The first succeeded items, whole, while they fit (about 19 of 20 kB in 384 kB).
    succeeded = [item for item in wire["items"] if item["ok"]]
    assert whole == succeeded[: len(whole)] and len(whole) == ANSWER_ITEMS_BUDGET // 20_050
    assert all(set(item) == {"assetId", "ok"} for item in brief)
    assert all(item["error"]["code"] == "not_found" for item in wire["items"] if not item["ok"])
    unbounded = await run_each(services, ApiKey(alice.key), _large, ids, answer_budget=None)
    assert sum("words" in item for item in unbounded.model_dump()["items"]) == 90


async def test_feature_switches_hold_for_every_item(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices
) -> None:
    """The workflow checks the switches per item: memory switched off, or a read-only server,
    refuses each item as it refuses the single call, and changes nothing."""
    async with client_as(alice.key) as client:
        ids = [await _save(client, seed) for seed in (1, 2)]
    off = replace(
        saving, settings=saving.settings.model_copy(update={"asset_feature_enabled": False})
    )
    read_only = replace(saving, read_only=True)
    for services, code in ((off, "feature_disabled"), (read_only, "forbidden")):
        answer = await run_each(services, ApiKey(alice.key), changes.delete_asset, ids)
        single = await refused(run(services, alice.key, changes.delete_asset, asset_id=ids[0]))
        for item in answer.items:
            assert item.error is not None and item.error.code == code
            assert f"{item.error.code}: {item.error.message}" == single
    assert [(await _placement(saving, a))[1] for a in ids] == ["processing", "processing"]


async def _quoted(
    uow: UnitOfWork, caller: Caller, services: MemoryServices, *, asset_id: str
) -> Large:
    del uow, caller, services
    return Large(asset_id=asset_id, words='"' * 10_000)


async def test_an_answer_of_quoted_words_fits_one_message(
    alice: Any, services: MemoryServices
) -> None:
    """The answer travels as structured content and again as its JSON text, a JSON string in
    the same message where every quote is escaped once more. A hundred answers of quotes
    (descriptions, tags, text read from images) still fit the SDK client's 1 MiB event."""
    ids = [f"ast_{n:026d}" for n in range(100)]
    answer = await run_each(services, ApiKey(alice.key), _quoted, ids)
    structured = answer.model_dump_json()
    text_in_message = json.dumps(structured, ensure_ascii=False)
    one_message = len(structured.encode()) + len(text_in_message.encode())
    # 16 KiB for the JSON-RPC envelope and the SSE framing around the two copies.
    assert one_message <= 1024 * 1024 - 16 * 1024, one_message
    assert [item["assetId"] for item in answer.model_dump(mode="json")["items"]] == ids
