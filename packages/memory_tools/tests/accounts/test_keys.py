"""A caller's own keys (``memory_tools.workflows.keys``): list, create, pause, resume, revoke.

The rules the web Keys page and the operator's commands share: another owner's key is not
found and nothing changes; a key never mints a stronger one nor switches itself off; pausing
twice changes nothing; a revoked key stays revoked; an operator (``admin`` scope) sees all.
What each key did (calls, searches, saves) is counted, and a paused key is told it is paused.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from fastmcp import Client
from sqlalchemy import event, text

from memory_tools import MemoryServices
from memory_tools.access import authenticate
from memory_tools.errors import Unauthenticated
from memory_tools.operations import admin
from memory_tools.workflows import keys

from ..pictures import b64, picture
from ..tool_calls import call, error
from ..workflow_calls import refused, run


async def _operations(services: MemoryServices, key_id: str) -> list[tuple[str, str]]:
    async with services.database.engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT operation, actor_identity FROM mem_provenance "
                "WHERE target_id = :key ORDER BY created_at, id"
            ),
            {"key": key_id},
        )
        return [(operation, actor) for operation, actor in rows.all()]


async def test_an_owner_creates_pauses_resumes_and_revokes_their_own_keys(
    saving: MemoryServices, alice: Any
) -> None:
    made = await run(
        saving,
        alice.key,
        keys.create_key,
        label=" claude-code@laptop ",
        note="notes",
        scopes=["read"],
    )
    assert made.secret.startswith("mk_") and made.key.scopes == ["read"]
    assert (made.key.label, made.key.note, made.key.state) == (
        "claude-code@laptop",
        "notes",
        "active",
    )
    agent = made.key.key_id

    paused = await run(saving, alice.key, keys.change_own_key, key_id=agent, change="pause")
    assert (paused.key.state, paused.changed) == ("paused", True)
    again = await run(saving, alice.key, keys.change_own_key, key_id=agent, change="pause")
    assert (again.key.state, again.changed) == ("paused", False)  # idempotent, says so
    async with saving.database.unit_of_work() as uow:
        try:
            await authenticate(uow, made.secret)
        except Unauthenticated as failure:
            assert "is paused" in failure.message
        else:
            raise AssertionError("a paused key was accepted")
    resumed = await run(saving, alice.key, keys.change_own_key, key_id=agent, change="resume")
    assert (resumed.key.state, resumed.changed) == ("active", True)
    revoked = await run(saving, alice.key, keys.change_own_key, key_id=agent, change="revoke")
    assert revoked.key.state == "revoked"
    assert (
        await refused(run(saving, alice.key, keys.change_own_key, key_id=agent, change="resume"))
        == f"conflict: key {agent} is revoked for good; create a new key instead"
    )

    listed = await run(saving, alice.key, keys.list_keys)
    assert [k.key_id for k in listed.keys] == [agent, alice.key_id]
    assert [k.current for k in listed.keys] == [False, True]
    assert not listed.operator and listed.can_change
    assert await _operations(saving, agent) == [
        ("api_key_create", "alice@example.com"),
        ("api_key_pause", "alice@example.com"),
        ("api_key_resume", "alice@example.com"),
        ("api_key_revoke", "alice@example.com"),
    ]


async def test_what_a_caller_may_not_do_with_keys_is_refused_and_changes_nothing(
    saving: MemoryServices, alice: Any, bob: Any, make_person: Any
) -> None:
    # Another owner's key id answers exactly like one that does not exist.
    for change in keys.KEY_ACTIONS:
        assert (
            await refused(
                run(saving, bob.key, keys.change_own_key, key_id=alice.key_id, change=change)
            )
            == f"not_found: no key '{alice.key_id}'"
        )
        assert (
            await refused(
                run(saving, bob.key, keys.change_own_key, key_id="akey_none", change=change)
            )
            == "not_found: no key 'akey_none'"
        )
    (mine,) = (await run(saving, alice.key, keys.list_keys)).keys
    assert mine.state == "active" and await _operations(saving, alice.key_id) == [
        ("api_key_create", "operator")
    ]
    # Bob sees only his own key.
    assert [k.key_id for k in (await run(saving, bob.key, keys.list_keys)).keys] == [bob.key_id]
    # No key switches itself off (it would end the call, or the web session, doing it).
    assert (
        await refused(
            run(saving, alice.key, keys.change_own_key, key_id=alice.key_id, change="pause")
        )
    ).startswith("forbidden: you cannot pause the key you are using")
    # No key mints a stronger one; a read-only key changes nothing.
    assert (
        await refused(
            run(saving, alice.key, keys.create_key, label="x", note=None, scopes=["admin"])
        )
    ).startswith("forbidden: a key cannot create a key with scopes it lacks: admin")
    reader = await make_person("alice@example.com", ("read",))
    assert (
        await refused(
            run(saving, reader.key, keys.create_key, label="x", note=None, scopes=["read"])
        )
        == "forbidden: this API key lacks the 'write' scope"
    )
    assert (
        await refused(
            run(saving, reader.key, keys.change_own_key, key_id=alice.key_id, change="revoke")
        )
        == "forbidden: this API key lacks the 'write' scope"
    )
    # Bad values: the bounds of a label and a note, no scopes, an unknown action.
    for label, note, scopes, message in (
        ("x" * 121, None, ["read"], "invalid_input: key label must be 1-120 characters"),
        ("ok", "n" * 501, ["read"], "invalid_input: key note must be 1-500 characters"),
        ("ok", "a\u202eb", ["read"], "invalid_input: key note must be 1-500 characters"),
        ("ok", None, [], "invalid_input: scopes: choose at least one of"),
    ):
        answer = await refused(
            run(saving, alice.key, keys.create_key, label=label, note=note, scopes=scopes)
        )
        assert answer.startswith(message), answer
    assert (
        await refused(
            run(saving, alice.key, keys.change_own_key, key_id=bob.key_id, change="delete")
        )
        == "invalid_input: action: one of pause, resume, revoke"
    )
    assert [k.key_id for k in (await run(saving, alice.key, keys.list_keys)).keys] == [
        reader.key_id,
        alice.key_id,
    ]


async def test_an_operator_key_sees_and_switches_every_owners_keys(
    saving: MemoryServices, alice: Any, bob: Any, make_person: Any
) -> None:
    operator = await make_person("ops@example.com", ("read", "write", "admin"))
    listed = await run(saving, operator.key, keys.list_keys)
    assert listed.operator
    assert {k.owner for k in listed.keys} == {
        "alice@example.com",
        "bob@example.com",
        "ops@example.com",
    }
    paused = await run(saving, operator.key, keys.change_own_key, key_id=bob.key_id, change="pause")
    assert paused.key.state == "paused"
    assert await _operations(saving, bob.key_id) == [
        ("api_key_create", "operator"),
        ("api_key_pause", "ops@example.com"),
    ]


async def test_each_key_counts_its_calls_searches_and_saves(
    saving: MemoryServices, alice: Any, make_person: Any
) -> None:
    other = await make_person("alice@example.com")
    served = replace(saving, default_api_key=alice.key)
    served.key_activity.flush_seconds = 0  # write at every call (a minute in production)
    from memory_tools import build_memory_server

    async with Client(build_memory_server(served)) as client:
        saved = await call(client, "image_asset_save", {"imageBase64": b64(picture(2))})
        await call(client, "image_asset_search", {"query": "anything"})
        await call(client, "image_asset_list", {})
        got = await call(client, "image_asset_get", {"assetId": saved["assetId"]})
        assert got["savedBy"] == {"keyId": alice.key_id, "label": None}
        mine = await call(client, "image_asset_list", {"savedBy": alice.key_id})
        assert [i["assetId"] for i in mine["items"]] == [saved["assetId"]]
        none = await call(client, "image_asset_list", {"savedBy": other.key_id})
        assert none["items"] == []
        too_long = await error(client, "image_asset_list", {"savedBy": "k" * 65})
        assert "savedBy" in too_long
    listed = {k.key_id: k for k in (await run(saving, other.key, keys.list_keys)).keys}
    counted = listed[alice.key_id]
    assert (counted.calls, counted.searches, counted.saves) == (6, 1, 1)
    assert (listed[other.key_id].calls, listed[other.key_id].saves) == (0, 0)
    # The operator's list shows the same keys with their state.
    (first, *_rest) = await admin.list_keys(saving.database, "alice@example.com")
    assert first.state == "active"


async def test_a_keys_saves_shown_are_the_assets_it_saved_without_counting_assets(
    saving: MemoryServices, alice: Any, make_person: Any
) -> None:
    """The save counter (revision 0025): right after the flush, and read without ``mem_assets``.

    A deduplicated save makes an asset and counts; a replayed idempotent save and a refused
    one make none and do not. Before the flush the saving process shows its own counts; after
    it, any process reads the same figure from the key row alone.
    """
    other = await make_person("alice@example.com")
    served = replace(saving, default_api_key=alice.key)
    served.key_activity.flush_seconds = 3600  # held until the test lets it write
    from memory_tools import build_memory_server

    async with Client(build_memory_server(served)) as client:
        await call(client, "image_asset_save", {"imageBase64": b64(picture(3))})
        for _ in range(2):  # the same bytes twice: two assets, one stored object
            await call(client, "image_asset_save", {"imageBase64": b64(picture(4))})
        for _ in range(2):  # the second is a replay of the first: no new asset
            await call(
                client,
                "image_asset_save",
                {"imageBase64": b64(picture(5)), "idempotencyKey": "once"},
            )
        await error(client, "image_asset_save", {"imageBase64": "not base64"})
        async with saving.database.engine.connect() as conn:
            saved = await conn.scalar(
                text("SELECT count(*) FROM mem_assets WHERE saved_by_key_id = :key"),
                {"key": alice.key_id},
            )
            stored = await conn.scalar(
                text("SELECT saves FROM mem_api_keys WHERE id = :key"), {"key": alice.key_id}
            )
        assert (saved, stored) == (4, 0)  # nothing written yet
        here = {k.key_id: k for k in (await run(served, other.key, keys.list_keys)).keys}
        assert here[alice.key_id].saves == 4  # the saving process shows what it gathered
        served.key_activity.flush_seconds = 0
        await call(client, "image_asset_list", {})  # this call writes the gathered counts

    sent: list[str] = []

    def record(*args: Any) -> None:
        sent.append(str(args[2]))

    # Another process (its own, empty, gathered counts) reads the written figure.
    event.listen(saving.database.engine.sync_engine, "before_cursor_execute", record)
    try:
        listed = {k.key_id: k for k in (await run(saving, other.key, keys.list_keys)).keys}
    finally:
        event.remove(saving.database.engine.sync_engine, "before_cursor_execute", record)
    assert listed[alice.key_id].saves == saved
    assert listed[other.key_id].saves == 0
    assert not [sql for sql in sent if "mem_assets" in sql], sent


async def test_a_stopping_server_writes_the_counts_it_holds(
    database_url: str, saving: MemoryServices, alice: Any, tmp_path: Any
) -> None:
    """Counts are written once a minute while a server runs, and all at once when it stops
    (``serving.bootstrap.running``), so a restart loses none of them."""
    from pydantic import SecretStr

    from memory_db import MemorySettings
    from memory_tools.serving.bootstrap import running

    settings = MemorySettings(
        memory_database_url=SecretStr(database_url),
        memory_data_dir=tmp_path / "data",
        asset_ocr="off",
    )
    async with running(settings, base_url="http://127.0.0.1:9") as (_runtime, services):
        services.key_activity.note(alice.key_id, calls=3, searches=2, saves=1)
        assert services.key_activity.take_due() == {}  # not due: held for up to a minute
        database = services.database
        async with database.engine.connect() as conn:
            held = await conn.execute(
                text("SELECT calls, searches, saves FROM mem_api_keys WHERE id = :key"),
                {"key": alice.key_id},
            )
            assert held.one() == (0, 0, 0)
    async with saving.database.engine.connect() as conn:
        written = await conn.execute(
            text("SELECT calls, searches, saves FROM mem_api_keys WHERE id = :key"),
            {"key": alice.key_id},
        )
        assert written.one() == (3, 2, 1)
