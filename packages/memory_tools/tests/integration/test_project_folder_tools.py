"""The project and folder tools, called in-process through a fastmcp Client."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from importlib.metadata import version
from typing import Any

import pytest
from sqlalchemy import text

from memory_db import Database
from memory_db.unit_of_work import session_of
from memory_tools import ToolFailure, build_memory_server
from memory_tools.operations import admin

Clients = Callable[[str | None], Any]
# What a project, folder or vault name may not contain, as the refusal says it.
RULE = (
    "must not contain control characters, bidirectional overrides or other invisible "
    "characters (zero-width, soft hyphen, BOM, tags, line separators)"
)


async def _call(client: Any, tool: str, args: dict[str, Any]) -> Any:
    result = await client.call_tool(tool, args, raise_on_error=False)
    if result.is_error:
        return result.content[0].text
    return result.structured_content


async def _count(database: Database, table: str) -> int:
    async with database.unit_of_work() as uow:
        return int(await session_of(uow).scalar(text(f"SELECT count(*) FROM {table}")) or 0)


async def test_create_and_list_projects_and_folders(client_for: Clients, alice: Any) -> None:
    async with client_for(alice.key) as client:
        project = await _call(
            client, "image_project_create", {"name": "Trips", "description": "Holidays"}
        )
        assert project["projectId"].startswith("apr_") and project["vault"] == "Library"
        assert project["status"] == "active"
        pid = project["projectId"]
        root = await _call(client, "image_folder_create", {"projectId": pid, "name": "2026"})
        child = await _call(
            client,
            "image_folder_create",
            {"projectId": pid, "name": "Rome", "parentId": root["folderId"]},
        )
        assert child["path"] == "/2026/Rome" and child["depth"] == 2 and child["vault"] == "Library"
        tree = await _call(client, "image_folder_list", {"projectId": pid})
        assert [f["path"] for f in tree["folders"]] == ["/2026", "/2026/Rome"]
        listed = await _call(client, "image_project_list", {})
        assert [p["name"] for p in listed["projects"]] == ["Trips"]


async def test_other_owner_cannot_see_or_create(
    client_for: Clients, alice: Any, bob: Any, database: Database
) -> None:
    async with client_for(alice.key) as client:
        pid = (await _call(client, "image_project_create", {"name": "Private"}))["projectId"]
        fid = (await _call(client, "image_folder_create", {"projectId": pid, "name": "F"}))[
            "folderId"
        ]
    before = await _count(database, "mem_asset_folders")
    async with client_for(bob.key) as client:
        assert (await _call(client, "image_project_list", {}))["projects"] == []
        assert (
            await _call(client, "image_folder_list", {"projectId": pid})
            == "not_found: project not found"
        )
        assert (
            await _call(client, "image_folder_create", {"projectId": pid, "name": "x"})
            == "not_found: project not found"
        )
        assert (
            await _call(
                client, "image_folder_create", {"projectId": "apr_" + "a" * 26, "name": "x"}
            )
            == "not_found: project not found"
        )  # exactly the same answer as for an id that never existed
        own = (await _call(client, "image_project_create", {"name": "Mine"}))["projectId"]
        assert (
            await _call(
                client, "image_folder_create", {"projectId": own, "name": "x", "parentId": fid}
            )
            == "not_found: folder not found"
        )
        for handle in ("alice@example.com/Library", "Alice@Example.com/library"):
            assert await _call(client, "image_project_create", {"name": "x", "vault": handle}) == (
                f"not_found: vault {handle!r} not found"
            )
            assert await _call(client, "image_project_list", {"vault": handle}) == (
                f"not_found: vault {handle!r} not found"
            )
    assert await _count(database, "mem_asset_folders") == before


async def test_shared_vault_reader_and_writer(
    client_for: Clients, make_person: Any, database: Database
) -> None:
    owner = await make_person("owner@example.com")
    reader = await make_person("reader@example.com")
    writer = await make_person("writer@example.com")
    await admin.create_vault(database, owner.email, "Team")
    await admin.grant(database, owner.email, "Team", reader.email, "read")
    await admin.grant(database, owner.email, "Team", writer.email, "write")
    async with client_for(owner.key) as client:
        pid = (await _call(client, "image_project_create", {"name": "Shared", "vault": "Team"}))[
            "projectId"
        ]
    handle = "owner@example.com/Team"
    async with client_for(reader.key) as client:
        listed = await _call(client, "image_project_list", {})
        assert [(p["vault"], p["name"]) for p in listed["projects"]] == [(handle, "Shared")]
        assert (await _call(client, "image_folder_list", {"projectId": pid, "vault": handle}))[
            "folders"
        ] == []
        refused = await _call(client, "image_project_create", {"name": "Nope", "vault": handle})
        assert refused == "forbidden: you have read access to this vault; write access is needed"
        refused = await _call(
            client, "image_folder_create", {"projectId": pid, "name": "x", "vault": handle}
        )
        assert refused.startswith("forbidden:")
    async with client_for(writer.key) as client:
        folder = await _call(
            client, "image_folder_create", {"projectId": pid, "name": "W", "vault": handle}
        )
        assert folder["vault"] == handle and folder["path"] == "/W"
    async with database.unit_of_work() as uow:
        denied = await session_of(uow).scalar(
            text("SELECT count(*) FROM mem_provenance WHERE outcome = 'denied'")
        )
        created_by = await session_of(uow).scalar(
            text(
                "SELECT actor_identity FROM mem_provenance WHERE operation = 'asset_folder_create' AND outcome = 'succeeded'"
            )
        )
    assert denied == 2 and created_by == "writer@example.com"


async def test_key_scopes_are_enforced(client_for: Clients, make_person: Any) -> None:
    read_only = await make_person("ro@example.com", ("read",))
    write_only = await make_person("wo@example.com", ("write",))
    async with client_for(read_only.key) as client:
        assert (await _call(client, "image_project_list", {}))["projects"] == []
        assert await _call(client, "image_project_create", {"name": "x"}) == (
            "forbidden: this API key lacks the 'write' scope"
        )
    async with client_for(write_only.key) as client:
        assert (await _call(client, "image_project_create", {"name": "x"}))["name"] == "x"
        assert await _call(client, "image_project_list", {}) == (
            "forbidden: this API key lacks the 'read' scope"
        )


async def test_missing_unknown_and_revoked_keys(
    client_for: Clients, alice: Any, database: Database
) -> None:
    async with client_for(None) as client:
        assert (await _call(client, "image_project_list", {})).startswith("unauthenticated:")
    async with client_for("mk_" + "x" * 43) as client:
        assert await _call(client, "image_project_list", {}) == (
            "unauthenticated: the API key is unknown or revoked"
        )
    async with client_for(alice.key) as client:
        assert isinstance(await _call(client, "image_project_list", {}), dict)
        await admin.revoke_key(database, alice.key_id)
        # the very next call of the same session is refused, whichever way the tool
        # authenticates (in its transaction, or in a statement of its own before it)
        for tool, args in (
            ("image_project_create", {"name": "x"}),
            ("image_asset_search", {"query": "x"}),
            ("image_asset_save", {"imageBase64": "AAAA"}),
        ):
            assert await _call(client, tool, args) == (
                "unauthenticated: the API key is unknown or revoked"
            )


@pytest.mark.parametrize(
    ("tool", "args", "expected"),
    [
        (
            "image_project_create",
            {"name": "x" * 121},
            "invalid_input: name: String should have at most 120 characters",
        ),
        (
            "image_project_create",
            {"name": ""},
            "invalid_input: name: String should have at least 1 character",
        ),
        (
            "image_project_create",
            {"name": "   "},
            "invalid_input: project name must be 1-120 characters",
        ),
        (
            "image_project_create",
            {"name": "a\u0007b"},
            f"invalid_input: project name {RULE}",
        ),
        (
            "image_project_create",
            {"name": "a\u0085b"},  # C1: NEXT LINE
            f"invalid_input: project name {RULE}",
        ),
        (
            "image_project_create",
            {"name": "Trips\u202egpj.exe"},  # RIGHT-TO-LEFT OVERRIDE
            f"invalid_input: project name {RULE}",
        ),
        (
            "image_folder_create",
            {"projectId": "apr_" + "a" * 26, "name": "x\u2067y"},  # RIGHT-TO-LEFT ISOLATE
            f"invalid_input: folder name {RULE}",
        ),
        (
            "image_project_list",
            {"include_archived": True},
            "invalid_input: include_archived: is not a known field; did you mean "
            "`includeArchived`?",
        ),
        (
            "image_project_create",
            {"name": "ok", "ownerIdentity": "bob@example.com"},
            "invalid_input: ownerIdentity: is not a known field",
        ),
        (
            "image_project_create",
            {"name": "ok", "physicalVault": "bob@example.com/Library"},
            "invalid_input: physicalVault: is not a known field",
        ),
        ("image_project_create", {}, "invalid_input: name: is required"),
        (
            "image_project_create",
            {"name": 5},
            "invalid_input: name: Input should be a valid string",
        ),
        (
            "image_project_create",
            {"name": "ok", "description": "d" * 2001},
            "invalid_input: description: String should have at most 2000 characters",
        ),
        (
            "image_project_list",
            {"includeArchived": "yes"},
            "invalid_input: includeArchived: Input should be a valid boolean",
        ),
        (
            "image_folder_create",
            {"projectId": "apr_x", "name": "x" * 121},
            "invalid_input: name: String should have at most 120 characters",
        ),
        ("image_folder_list", {}, "invalid_input: projectId: is required"),
    ],
)
async def test_bad_input_is_refused_with_a_clear_error(
    client_for: Clients,
    alice: Any,
    database: Database,
    tool: str,
    args: dict[str, Any],
    expected: str,
) -> None:
    before = (
        await _count(database, "mem_asset_projects"),
        await _count(database, "mem_asset_folders"),
    )
    async with client_for(alice.key) as client:
        assert await _call(client, tool, args) == expected
    after = (
        await _count(database, "mem_asset_projects"),
        await _count(database, "mem_asset_folders"),
    )
    assert after == before


async def test_folder_depth_and_duplicates_change_nothing(
    client_for: Clients, alice: Any, database: Database
) -> None:
    async with client_for(alice.key) as client:
        pid = (await _call(client, "image_project_create", {"name": "Deep"}))["projectId"]
        parent = None
        for depth in range(1, 9):
            args = {"projectId": pid, "name": f"level{depth}"}
            if parent:
                args["parentId"] = parent
            folder = await _call(client, "image_folder_create", args)
            assert folder["depth"] == depth
            parent = folder["folderId"]
        before = await _count(database, "mem_asset_folders")
        too_deep = await _call(
            client, "image_folder_create", {"projectId": pid, "name": "level9", "parentId": parent}
        )
        assert too_deep == "invalid_input: folders can be nested at most 8 deep"
        duplicate = await _call(client, "image_folder_create", {"projectId": pid, "name": "LEVEL1"})
        assert duplicate == "conflict: a folder named 'LEVEL1' already exists here"
        assert await _call(client, "image_project_create", {"name": "deep"}) == (
            "conflict: a project named 'deep' already exists in this vault"
        )
        assert await _count(database, "mem_asset_folders") == before


async def test_feature_flag_switches_tools_off(
    client_for: Clients, alice: Any, services: Any
) -> None:
    object.__setattr__(services.settings, "asset_feature_enabled", False)
    async with client_for(alice.key) as client:
        assert (await _call(client, "image_project_list", {})).startswith("feature_disabled:")


# name: (read-only, destructive, idempotent, open world)
ANNOTATIONS = {
    "image_project_create": (False, False, False, False),
    "image_project_list": (True, False, True, False),
    "image_project_archive": (False, False, True, False),
    "image_vault_list": (True, False, True, False),
    "image_folder_create": (False, False, False, False),
    "image_folder_list": (True, False, True, False),
    "image_folder_delete": (False, True, True, False),
    "image_asset_save": (False, False, False, True),  # fetches URLs
    "image_asset_get": (True, False, True, False),
    "image_asset_list": (True, False, True, False),
    "image_asset_search": (True, False, True, True),  # may fetch a query image by URL
    "image_asset_move": (False, False, True, False),
    "image_asset_delete": (False, True, True, False),
    "image_asset_restore": (False, False, True, False),
    "image_asset_update": (False, False, True, False),
    "image_asset_enrich": (False, False, True, False),  # queues a job at most once
    "image_asset_duplicates": (False, False, True, False),  # a dismissal is a decision kept
    "image_project_update": (False, False, True, False),
    "image_folder_update": (False, False, True, False),
}


async def test_tool_annotations_are_truthful(client_for: Clients, alice: Any) -> None:
    async with client_for(alice.key) as client:
        tools = {tool.name: tool for tool in await client.list_tools()}
    assert set(tools) == set(ANNOTATIONS)  # every tool has its row
    for name, tool in tools.items():
        hints = tool.annotations
        assert hints is not None
        found = (
            hints.read_only_hint,
            hints.destructive_hint,
            hints.idempotent_hint,
            hints.open_world_hint,
        )
        assert found == ANNOTATIONS[name], name
        assert tool.input_schema["additionalProperties"] is False
        assert tool.output_schema is not None


async def test_the_instructions_tell_how_long_a_deleted_image_can_be_restored(
    services: Any,
) -> None:
    instructions = build_memory_server(services).instructions or ""
    hours = services.settings.asset_delete_grace_hours
    assert f"recoverable for {hours} hours: image_asset_restore" in instructions
    final = replace(
        services, settings=services.settings.model_copy(update={"asset_delete_grace_hours": 0})
    )
    assert "Deleting an image is final" in (build_memory_server(final).instructions or "")


async def test_unexpected_errors_are_masked(client_for: Clients, alice: Any, services: Any) -> None:
    async with client_for(alice.key) as client:
        await services.database.close()  # pool closed: queries now fail internally ...
        object.__setattr__(services.database, "_sessions", None)  # ... with a TypeError
        result = await client.call_tool("image_project_list", {}, raise_on_error=False)
    assert result.is_error
    message = result.content[0].text
    assert "Traceback" not in message and "NoneType" not in message


@pytest.mark.parametrize("name", ["Team\u202e", "Te\u0085am", "Te\u2066am", "Te\x00am", "A/B"])
async def test_vault_names_refuse_control_and_bidi_characters(
    make_person: Any, database: Database, name: str
) -> None:
    owner = await make_person("owner@example.com")
    with pytest.raises(ToolFailure) as refused:
        await admin.create_vault(database, owner.email, name)
    assert refused.value.code == "invalid_input"
    assert "bidirectional overrides" in refused.value.message
    assert await _count(database, "mem_vaults") == 1  # only Library


async def test_server_reports_its_own_version_and_the_time_filters_need_a_zone(
    client_for: Clients, alice: Any
) -> None:
    async with client_for(alice.key) as client:
        info = client.server_info
        tools = {tool.name: tool for tool in await client.list_tools()}
    assert info is not None and info.version == version("memory-tools") != version("fastmcp")
    for tool in ("image_asset_list", "image_asset_search"):
        properties = tools[tool].input_schema["properties"]
        for field in ("createdAfter", "createdBefore"):
            description = properties[field]["description"]
            assert "a time and a zone" in description and "Z" in description, (tool, field)
