"""ASSET_FEATURE_ENABLED and ASSET_SEARCH_ENABLED, enforced by the workflows below every adapter."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from fastmcp import Client
from sqlalchemy import text

from memory_tools import MemoryServices
from memory_tools.access import Caller
from memory_tools.errors import FeatureDisabled
from memory_tools.ingest.save import AssetSaver, SaveRequest
from memory_tools.ingest.uploads import UploadFlow
from memory_tools.operations import admin
from memory_tools.workflows import assets, changes, projects
from memory_tools.workflows.search import AssetSearcher, SearchRequest

from ..pictures import b64, picture
from ..tool_calls import call as _call
from ..tool_calls import error as _error


def switched(services: MemoryServices, **flags: bool) -> MemoryServices:
    return replace(services, settings=services.settings.model_copy(update=flags))


@pytest.fixture
async def alice(database: Any) -> Caller:
    await admin.create_identity(database, "alice@example.com", 10**9)
    return Caller("alice@example.com", "akey_a", frozenset({"read", "write", "destructive"}))


async def _rows(services: MemoryServices) -> tuple[int, int, int]:
    async with services.database.engine.connect() as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT (SELECT count(*) FROM mem_assets),"
                    " (SELECT count(*) FROM mem_asset_upload_reservations),"
                    " (SELECT count(*) FROM mem_asset_projects)"
                )
            )
        ).one()
    return int(row[0]), int(row[1]), int(row[2])


async def test_memory_switched_off_stops_every_workflow_whoever_calls_it(
    saving: MemoryServices, alice: Caller
) -> None:
    """Called directly, as an HTTP route or a CLI would: each workflow refuses by itself."""
    off = switched(saving, asset_feature_enabled=False)
    request = SaveRequest(image_base64=b64(picture(1)))
    outside_a_transaction: list[Callable[[], Any]] = [
        lambda: AssetSaver(off).save(alice, request),
        lambda: UploadFlow(AssetSaver(off)).initiate(
            alice, SaveRequest(), content_type="image/png", content_length=100
        ),
        lambda: UploadFlow(AssetSaver(off)).complete(alice, "aur_unknown", vault="Library"),
        lambda: AssetSearcher(off).search(alice, SearchRequest(query="cat")),
    ]
    for action in outside_a_transaction:
        with pytest.raises(FeatureDisabled, match="ASSET_FEATURE_ENABLED=false"):
            await action()
    async with off.database.unit_of_work() as uow:
        in_transaction: list[Callable[[], Any]] = [
            lambda: projects.create_project(
                uow, alice, off, vault="Library", name="p", description=None
            ),
            lambda: projects.list_projects(uow, alice, off, vault=None, include_archived=False),
            lambda: assets.list_assets(uow, alice, off, assets.ListRequest()),
            lambda: assets.get_asset(uow, alice, off, asset_id="ast_x", include_preview=False),
            lambda: changes.delete_asset(uow, alice, off, asset_id="ast_x"),
        ]
        for action in in_transaction:
            with pytest.raises(FeatureDisabled):
                await action()
    assert await _rows(saving) == (0, 0, 0)


# The smallest valid arguments of every tool: a new tool must be added here, and so is checked.
MINIMAL_ARGUMENTS: dict[str, dict[str, Any]] = {
    "image_project_create": {"name": "p"},
    "image_project_list": {},
    "image_vault_list": {},
    "image_project_archive": {"projectId": "apr_x"},
    "image_folder_create": {"projectId": "apr_x", "name": "f"},
    "image_folder_list": {"projectId": "apr_x"},
    "image_folder_delete": {"projectId": "apr_x", "folderId": "afl_x"},
    "image_asset_save": {"imageBase64": "AAAA"},
    "image_asset_get": {"assetId": "ast_x"},
    "image_asset_list": {},
    "image_asset_search": {"query": "cat"},
    "image_asset_move": {"assetId": "ast_x"},
    "image_asset_delete": {"assetId": "ast_x"},
    "image_asset_restore": {"assetId": "ast_x"},
    "image_asset_update": {"assetId": "ast_x", "title": "t"},
    "image_asset_enrich": {"assetId": "ast_x"},
    "image_asset_duplicates": {},
    "image_project_update": {"projectId": "apr_x", "name": "p"},
    "image_folder_update": {"projectId": "apr_x", "folderId": "afl_x", "name": "f"},
}


async def test_memory_switched_off_every_tool_answers_feature_disabled(
    saving: MemoryServices, make_person: Callable[..., Any]
) -> None:
    person = await make_person("off@example.com")
    off = switched(saving, asset_feature_enabled=False)
    async with Client(_server(off, person.key)) as client:
        names = {tool.name for tool in await client.list_tools()}
        assert names == set(MINIMAL_ARGUMENTS)
        for name in sorted(names):
            refused = await _error(client, name, MINIMAL_ARGUMENTS[name])
            assert refused.startswith("feature_disabled:"), (name, refused)
    assert await _rows(saving) == (0, 0, 0)


async def test_search_switched_off_answers_feature_disabled_and_nothing_else_changes(
    saving: MemoryServices, make_person: Callable[..., Any]
) -> None:
    person = await make_person("searcher@example.com")
    off = switched(saving, asset_search_enabled=False)
    async with Client(_server(off, person.key)) as client:
        saved = await _call(client, "image_asset_save", {"imageBase64": b64(picture(2))})
        refused = await _error(client, "image_asset_search", {"query": "anything"})
        assert (
            refused == "feature_disabled: image search is switched off (ASSET_SEARCH_ENABLED=false)"
        )
        listed = await _call(client, "image_asset_list", {})
        assert [item["assetId"] for item in listed["items"]] == [saved["assetId"]]


def _server(services: MemoryServices, key: str) -> Any:
    from memory_tools import build_memory_server

    return build_memory_server(replace(services, default_api_key=key))
