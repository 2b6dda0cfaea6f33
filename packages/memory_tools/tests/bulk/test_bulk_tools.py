"""``assetIds`` on the per-asset tools: the same tools answer item by item over MCP."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from fastmcp import Client
from jsonschema import Draft202012Validator

from memory_tools import MemoryServices, build_memory_server

from ..pictures import b64, picture
from ..tool_calls import call as _call
from ..tool_calls import error as _error

MISSING = "ast_" + "z" * 26
PER_ASSET_TOOLS = (
    "image_asset_move",
    "image_asset_update",
    "image_asset_enrich",
    "image_asset_delete",
    "image_asset_restore",
)


def _codes(answer: dict[str, Any]) -> list[str]:
    return ["ok" if item["ok"] else item["error"]["code"] for item in answer["items"]]


async def test_every_per_asset_tool_answers_item_by_item(
    alice: Any, saving: MemoryServices
) -> None:
    # OCR on, so image_asset_enrich is offered.
    ocr = replace(
        saving,
        default_api_key=alice.key,
        settings=saving.settings.model_copy(update={"asset_ocr": "all"}),
    )
    async with Client(build_memory_server(ocr)) as client:
        ids = [
            (await _call(client, "image_asset_save", {"imageBase64": b64(picture(n))}))["assetId"]
            for n in (1, 2)
        ]
        project = (await _call(client, "image_project_create", {"name": "Trips"}))["projectId"]
        asked = [ids[0], MISSING, ids[1]]
        extra: dict[str, dict[str, Any]] = {
            "image_asset_move": {"projectId": project},
            "image_asset_update": {"addTags": ["sea"]},
        }
        for tool in PER_ASSET_TOOLS:
            reports: list[tuple[float, float | None]] = []

            async def progress(
                progress: float, total: float | None, message: str | None, into: Any = reports
            ) -> None:
                into.append((progress, total))

            result = await client.call_tool(
                tool, {"assetIds": asked, **extra.get(tool, {})}, progress_handler=progress
            )
            answer = result.structured_content
            assert answer is not None and not result.is_error, tool
            assert [item["assetId"] for item in answer["items"]] == asked, tool
            assert _codes(answer) == ["ok", "not_found", "ok"], (tool, answer)
            assert answer["items"][1]["error"]["message"] == "asset not found"
            assert (answer["succeeded"], answer["failed"]) == (2, 1)
            assert reports == [(1, 3), (2, 3), (3, 3)], tool
        # What each item said is what the single call says, fields and all.
        single = await _call(client, "image_asset_get", {"assetId": ids[0]})
        assert single["projectId"] == project and single["tags"] == ["sea"]
        assert single["status"] != "deleted"  # restored by the last bulk call
        # A single call keeps its single answer.
        moved = await _call(client, "image_asset_move", {"assetId": ids[0]})
        assert moved["assetId"] == ids[0] and "items" not in moved and moved["projectId"] is None


async def test_asset_id_or_asset_ids_exactly_one_and_within_bounds(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices
) -> None:
    async with client_as(alice.key) as client:
        asset = (await _call(client, "image_asset_save", {"imageBase64": b64(picture(1))}))[
            "assetId"
        ]
        both = {"assetId": asset, "assetIds": [asset]}
        for tool in ("image_asset_move", "image_asset_delete", "image_asset_update"):
            for arguments in (both, {}):
                refused = await _error(client, tool, arguments)
                assert refused == "invalid_input: give exactly one of assetId and assetIds"
        cases: dict[str, tuple[list[str], str]] = {
            "none": ([], "invalid_input: assetIds: give 1 to 100 ids, not 0"),
            "repeated": (
                [asset, MISSING, asset],
                "invalid_input: assetIds: item 3 repeats item 1; name each id once",
            ),
            "too long": (
                [asset, "ast_" + "x" * 61],
                "invalid_input: assetIds: item 2 is not an id (1 to 64 characters)",
            ),
            "empty": ([""], "invalid_input: assetIds: item 1 is not an id (1 to 64 characters)"),
            "too many": ([f"ast_{n:026d}" for n in range(101)], "invalid_input: assetIds"),
        }
        for name, (ids, expected) in cases.items():
            refused = await _error(client, "image_asset_delete", {"assetIds": ids})
            assert refused.startswith(expected), (name, refused)
        # Input wrong for every item is each item's refusal, in the single call's words.
        answer = await _call(
            client, "image_asset_update", {"assetIds": [asset], "tags": ["a"], "addTags": ["b"]}
        )
        assert answer["items"][0]["error"] == {
            "code": "invalid_input",
            "message": "tags: give tags (replaces every tag) or addTags/removeTags, not both",
        }
        got = await _call(client, "image_asset_get", {"assetId": asset})
        assert got["status"] != "deleted" and got["tags"] == []


async def test_the_listed_output_schema_holds_both_answers(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices
) -> None:
    """One schema names a single answer's fields and a bulk answer's; both validate, and the
    answer is sent as it is (fastmcp would otherwise wrap a union in {"result": ...})."""
    async with client_as(alice.key) as client:
        listed = {tool.name: tool for tool in await client.list_tools()}
        asset = (await _call(client, "image_asset_save", {"imageBase64": b64(picture(1))}))[
            "assetId"
        ]
        for tool in ("image_asset_move", "image_asset_delete"):
            schema = listed[tool].output_schema
            assert schema is not None and "x-fastmcp-wrap-result" not in schema
            assert {"assetId", "items", "succeeded", "failed"} <= set(schema["properties"])
            validator = Draft202012Validator(schema)
            for arguments in ({"assetId": asset}, {"assetIds": [asset, MISSING]}):
                answer = await _call(client, tool, arguments)
                assert not list(validator.iter_errors(answer)), (tool, answer)
                assert ("items" in answer) == ("assetIds" in arguments), answer
