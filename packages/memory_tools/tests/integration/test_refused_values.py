"""Values PostgreSQL cannot store, loose dates and oversized base64 get coded, readable errors."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from fastmcp import Client
from sqlalchemy import text

from memory_db import Database
from memory_db.repositories import AssetFilter
from memory_db.unit_of_work import session_of
from memory_tools import MemoryServices, ToolFailure, build_memory_server
from memory_tools.errors import InvalidInputFailure, map_failures
from memory_tools.operations import admin
from memory_tools.workflows.assets import FilterFields, check_filters

Clients = Callable[[str | None], Any]
NUL = "\x00"


async def _error(client: Any, tool: str, args: dict[str, Any]) -> str:
    result = await client.call_tool(tool, args, raise_on_error=False)
    assert result.is_error, (tool, args, result.structured_content)
    return result.content[0].text


async def _count(database: Database, table: str) -> int:
    async with database.unit_of_work() as uow:
        return int(await session_of(uow).scalar(text(f"SELECT count(*) FROM {table}")) or 0)


@pytest.mark.parametrize(
    ("tool", "args", "field"),
    [
        ("image_project_list", {"vault": f"Library{NUL}"}, "vault"),
        ("image_project_create", {"name": "Trips", "vault": f"Library{NUL}"}, "vault"),
        ("image_project_create", {"name": "Trips", "description": f"a{NUL}b"}, "description"),
        ("image_folder_list", {"projectId": "apr_x", "vault": f"Library{NUL}"}, "vault"),
        ("image_asset_save", {"imageBase64": "AAAA", "vault": f"Library{NUL}"}, "vault"),
        ("image_asset_list", {"vault": f"Library{NUL}"}, "vault"),
        ("image_asset_list", {"tags": [f"a{NUL}"]}, "tags"),
        ("image_asset_list", {"sourceHost": f"a{NUL}"}, "sourceHost"),
        ("image_asset_list", {"cursor": f"a{NUL}"}, "cursor"),
        ("image_asset_search", {"query": "x", "vault": f"Library{NUL}"}, "vault"),
        ("image_asset_search", {"query": "x", "tags": [f"a{NUL}"]}, "tags"),
        ("image_asset_search", {"query": "x", "sourceHost": f"a{NUL}"}, "sourceHost"),
        ("image_asset_search", {"assetId": f"ast_{NUL}"}, "assetId"),
        ("image_asset_get", {"assetId": f"ast_{NUL}"}, "assetId"),
        ("image_asset_move", {"assetId": f"ast_{NUL}", "projectId": f"apr_{NUL}"}, "assetId"),
        ("image_folder_delete", {"projectId": "apr_x", "folderId": "afl_x", "confirm": NUL}, ""),
        ("image_asset_save", {"artifactId": f"art_{NUL}"}, "artifactId"),
        ("image_asset_update", {"assetId": f"ast_{NUL}"}, "assetId"),
        ("image_asset_update", {"assetId": "ast_x", "tags": [f"a{NUL}"]}, "tags"),
        ("image_project_update", {"projectId": "apr_x", "name": f"P{NUL}"}, "name"),
        ("image_folder_update", {"projectId": "apr_x", "folderId": "afl_x", "parentId": NUL}, ""),
        ("image_asset_save", {"imageBase64": "AAAA", "sourceRef": {"k": f"{NUL}"}}, "sourceRef"),
    ],
)
async def test_nul_characters_are_refused_naming_the_field(
    client_for: Clients, alice: Any, database: Database, tool: str, args: dict[str, Any], field: str
) -> None:
    """PostgreSQL text cannot hold NUL: every tool refuses it up front, as invalid_input."""
    before = await _count(database, "mem_asset_projects")
    async with client_for(alice.key) as client:
        message = await _error(client, tool, args)
    assert message.startswith("invalid_input: "), message
    assert "NUL" in message and field in message, message
    assert await _count(database, "mem_asset_projects") == before


@pytest.mark.parametrize(
    ("tool", "args", "field"),
    [
        ("image_project_create", {"name": "Trips\ud800"}, "name"),
        ("image_asset_save", {"imageBase64": "AAAA", "title": "x\udfff"}, "title"),
        ("image_asset_list", {"tags": ["\ud83d"]}, "tags"),
        ("image_asset_search", {"query": "cat \udc00"}, "query"),
    ],
)
async def test_unpaired_surrogates_are_refused_naming_the_field(
    client_for: Clients, alice: Any, database: Database, tool: str, args: dict[str, Any], field: str
) -> None:
    """JSON can spell a lone surrogate ("\\ud800"); no UTF-8 text can hold one."""
    before = await _count(database, "mem_asset_projects")
    async with client_for(alice.key) as client:
        message = await _error(client, tool, args)
    assert message.startswith(f"invalid_input: {field}: must be valid Unicode"), message
    assert await _count(database, "mem_asset_projects") == before


async def test_a_nul_the_database_refuses_becomes_invalid_input(
    services: MemoryServices,
) -> None:
    """Defence in depth: a NUL that slipped past validation is the caller's error, not a 500."""
    with pytest.raises(InvalidInputFailure) as refused, map_failures():
        async with services.database.unit_of_work() as uow:
            await session_of(uow).execute(text("SELECT CAST(:v AS text)"), {"v": f"a{NUL}b"})
    assert refused.value.message == ("a value contains a character the database cannot store (NUL)")
    with pytest.raises(InvalidInputFailure), map_failures():
        async with services.database.unit_of_work() as uow:
            await session_of(uow).execute(
                text("SELECT CAST(:v AS jsonb)"), {"v": '{"a": "\\u0000"}'}
            )


@pytest.mark.parametrize(
    ("filters", "field"),
    [
        ({"vault": f"Library{NUL}"}, "vault"),
        ({"filters": AssetFilter(tags=("ok", f"a{NUL}"))}, "tags"),
        ({"filters": AssetFilter(source_host=f"example.com{NUL}")}, "sourceHost"),
        ({"vault": "Library", "project_id": f"apr_{NUL}"}, "projectId"),
    ],
)
def test_the_filter_workflow_refuses_nul_for_every_entry_point(
    filters: dict[str, Any], field: str
) -> None:
    """Below the MCP adapter too: the workflow refuses what the database could not hold."""
    with pytest.raises(InvalidInputFailure) as refused:
        check_filters(FilterFields(**filters))
    assert refused.value.message == f"{field}: must not contain a NUL character (\\u0000)"


@pytest.mark.parametrize("tool", ["image_asset_list", "image_asset_search"])
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0", "not an ISO 8601 instant: give a date, a time and a zone"),
        ("1", "not an ISO 8601 instant: give a date, a time and a zone"),
        ("1700000000", "not an ISO 8601 instant: give a date, a time and a zone"),
        ("2026-11-30", "not an ISO 8601 instant: give a date, a time and a zone"),
        ("2026-13-01T00:00:00Z", "not an ISO 8601 instant: give a date, a time and a zone"),
        ("yesterday", "not an ISO 8601 instant: give a date, a time and a zone"),
        (0, "give an ISO 8601 string with a date, a time and a zone"),
        (1700000000, "give an ISO 8601 string with a date, a time and a zone"),
        (1.5, "give an ISO 8601 string with a date, a time and a zone"),
        ("2026-11-30T12:00:00", "give a time zone (e.g. 2026-11-30T12:00:00Z"),
    ],
)
async def test_time_filters_take_only_an_iso_instant_with_a_zone(
    client_for: Clients, alice: Any, tool: str, value: Any, expected: str
) -> None:
    """A bare number is not read as a Unix time; a date alone or a zone-less time is refused."""
    extra = {"query": "x"} if tool == "image_asset_search" else {}
    async with client_for(alice.key) as client:
        for field in ("createdAfter", "createdBefore"):
            message = await _error(client, tool, {**extra, field: value})
            assert message.startswith(f"invalid_input: {field}: {expected}"), message


@pytest.mark.parametrize(
    "value", ["2026-11-30T12:00:00Z", "2026-11-30T13:00:00+01:00", "2026-11-30 12:00:00.25-05:00"]
)
async def test_time_filters_accept_iso_instants(
    client_for: Clients, alice: Any, value: str
) -> None:
    async with client_for(alice.key) as client:
        result = await client.call_tool("image_asset_list", {"createdAfter": value})
    assert result.structured_content == {"items": [], "nextCursor": None}


@pytest.mark.parametrize(
    ("tool", "length", "route_advice"),
    [
        # longer than the schema's maxLength: refused while the arguments are validated
        ("image_asset_save", 5000, "Send large images with the direct-upload route POST /uploads"),
        ("image_asset_search", 5000, "store large images with the direct-upload route POST"),
        # within maxLength, but more bytes than ASSET_MAX_BYTES once decoded
        ("image_asset_save", 4004, "Send large images with the direct-upload route POST /uploads"),
        ("image_asset_search", 4004, "store large images with the direct-upload route POST"),
    ],
)
async def test_oversized_base64_names_the_byte_limit_and_the_upload_route(
    services: MemoryServices, alice: Any, tool: str, length: int, route_advice: str
) -> None:
    small = replace(
        services,
        default_api_key=alice.key,
        settings=services.settings.model_copy(update={"asset_max_bytes": 3000}),
    )
    async with Client(build_memory_server(small)) as client:
        schema = {t.name: t for t in await client.list_tools()}[tool].input_schema
        message = await _error(client, tool, {"imageBase64": "A" * length})
    assert schema["properties"]["imageBase64"]["maxLength"] == 4204
    assert message.startswith("invalid_input: imageBase64: "), message
    assert "the ASSET_MAX_BYTES limit of 3000 bytes (0.002861 MiB)" in message, message
    assert route_advice in message, message
    assert "String should have" not in message


INVISIBLE = {
    "zero-width space": "\u200b",
    "zero-width joiner": "\u200d",
    "line separator": "\u2028",
    "paragraph separator": "\u2029",
    "byte order mark": "\ufeff",
    "soft hyphen": "\u00ad",
    "word joiner": "\u2060",
    "tag latin small a": "\U000e0061",
    "cancel tag": "\U000e007f",
    "unassigned tag U+E0000": "\U000e0000",
    "arabic letter mark": "\u061c",
    "left-to-right mark": "\u200e",
}
NAME_RULE = (
    "must not contain control characters, bidirectional overrides or other invisible "
    "characters (zero-width, soft hyphen, BOM, tags, line separators)"
)


@pytest.mark.parametrize("char", INVISIBLE.values(), ids=INVISIBLE.keys())
async def test_names_refuse_invisible_characters(
    client_for: Clients, alice: Any, database: Database, char: str
) -> None:
    """Two names that look alike must be the same name: nothing invisible in project, folder
    or vault names."""
    async with client_for(alice.key) as client:
        project = await _error(client, "image_project_create", {"name": f"Tr{char}ips"})
        pid = (
            await client.call_tool("image_project_create", {"name": "Trips"})
        ).structured_content["projectId"]
        folder = await _error(
            client, "image_folder_create", {"projectId": pid, "name": f"a{char}b"}
        )
    assert project == f"invalid_input: project name {NAME_RULE}"
    assert folder == f"invalid_input: folder name {NAME_RULE}"
    with pytest.raises(ToolFailure) as refused:
        await admin.create_vault(database, alice.email, f"Team{char}")
    assert refused.value.code == "invalid_input" and "invisible characters" in refused.value.message
    assert (await _count(database, "mem_asset_projects"), await _count(database, "mem_vaults")) == (
        1,
        1,
    )
    assert await _count(database, "mem_asset_folders") == 0


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("2026/Trips", "folder name must not contain '/' (folder paths are shown as /A/B)"),
        ("/", "folder name must not contain '/' (folder paths are shown as /A/B)"),
        (".", "folder name must not be '.'"),
        ("..", "folder name must not be '..'"),
        (" .. ", "folder name must not be '..'"),
    ],
)
async def test_folder_names_that_would_make_paths_ambiguous_are_refused(
    client_for: Clients, alice: Any, database: Database, name: str, expected: str
) -> None:
    async with client_for(alice.key) as client:
        pid = (
            await client.call_tool("image_project_create", {"name": "Trips"})
        ).structured_content["projectId"]
        message = await _error(client, "image_folder_create", {"projectId": pid, "name": name})
    assert message == f"invalid_input: {expected}"
    assert await _count(database, "mem_asset_folders") == 0


async def test_dots_inside_folder_names_and_visible_names_still_work(
    client_for: Clients, alice: Any
) -> None:
    async with client_for(alice.key) as client:
        pid = (
            await client.call_tool("image_project_create", {"name": "A/B 2026"})
        ).structured_content["projectId"]
        paths = []
        for name in ("...", "v1.2", ".hidden", "Café ☕", "עברית"):
            folder = await client.call_tool("image_folder_create", {"projectId": pid, "name": name})
            paths.append(folder.structured_content["path"])
    assert paths == ["/...", "/v1.2", "/.hidden", "/Café ☕", "/עברית"]
