"""Tools are listed with lean schemas that hold a call to exactly what the full schemas held.

``memory_tools.mcp.lean_schemas`` rewrites what ``tools/list`` shows. Here every tool of the
aggregate server (the memory tools and the scraper tools) is listed twice, with and without that
rewriting, and each input parameter's two schemas are run against the same probe values (JSON
Schema 2020-12, as an MCP client reads them): built from the full schema's own bounds and enums,
one step inside and outside each. A lean schema that accepted a value the full one refused (a
bound lost in the rewriting) or refused one it accepted fails here, naming the tool, the
parameter and the value.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client
from fastmcp.tools import Tool
from fastmcp.utilities.json_schema import dereference_refs
from jsonschema import Draft202012Validator

from memory_db import Database, MemorySettings
from memory_db.database import create_engine
from memory_db.storage import InMemoryAssetObjectStore, UrlSigner
from memory_tools import MemoryServices
from memory_tools.mcp import registry
from memory_tools.mcp.lean_schemas import lean_input_schema, lean_output_schema
from scraper_mcp.aggregate import build_aggregate_server

# Numeric keywords whose values the probes step around.
_BOUNDS = ("minLength", "maxLength", "minItems", "maxItems", "minimum", "maximum")


@pytest.fixture
async def services(tmp_path: Path) -> AsyncIterator[MemoryServices]:
    # Listing never connects. A small ASSET_MAX_BYTES keeps the base64 bound's probes small.
    database = Database(create_engine("postgresql+asyncpg://nobody@127.0.0.1:9/none"))
    yield MemoryServices(
        database=database,
        store=InMemoryAssetObjectStore(UrlSigner(hashlib.sha256(b"x").digest())),
        settings=MemorySettings(memory_data_dir=tmp_path / "data", asset_max_bytes=3000),
    )
    await database.close()


async def _listed(services: MemoryServices) -> dict[str, dict[str, Any]]:
    async with Client(build_aggregate_server(services)) as client:
        result = await client.list_tools_mcp()
    sent = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    return {tool["name"]: tool for tool in sent["tools"]}


@pytest.fixture
async def listings(
    services: MemoryServices, monkeypatch: pytest.MonkeyPatch
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """Every tool as listed (lean), and as listed with its full schemas."""
    lean = await _listed(services)

    def full(tool: Tool) -> Tool:
        return tool

    monkeypatch.setattr(registry, "_listed_lean", full)
    return lean, await _listed(services)


def _members(schema: Any) -> Iterator[tuple[str, Any]]:
    """Every ``key: value`` of the objects in ``schema`` (at any depth)."""
    if isinstance(schema, dict):
        for key, value in schema.items():
            yield key, value
            yield from _members(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _members(value)


def _numbers(schema: Any) -> Iterator[float]:
    """Every bound in ``schema`` (at any depth)."""
    for key, value in _members(schema):
        if key in _BOUNDS and isinstance(value, int | float):
            yield value


def _enum_values(schema: Any) -> Iterator[Any]:
    for key, value in _members(schema):
        if key == "enum" and isinstance(value, list):
            yield from value
        elif key == "const":
            yield value


def _probes(schema: dict[str, Any]) -> list[Any]:
    """Values of every JSON type, at and one step beyond each bound and enum of ``schema``."""
    steps = sorted({n + d for n in _numbers(schema) for d in (-1, -0.5, 0, 0.5, 1)} | {0, 1})
    lengths = sorted({int(n) for n in steps if n >= 0 and n == int(n)})
    enums = list(_enum_values(schema))
    probes: list[Any] = [None, True, False, {}, {"pageUrl": "https://a.example"}, {"x": [1]}]
    probes += [*steps, *enums, "zzz", "2026-11-30T12:00:00Z", "2026-11-30"]
    probes += ["a" * n for n in lengths]
    probes += [["a"] * n for n in lengths] + [["a" * n] for n in lengths]
    probes += [[value] for value in enums] + [["zzz"], [1], [None], [enums[:1] * 2]]
    probes += [{"max": n} for n in steps] + [{"vault": "a" * n} for n in lengths]
    return probes


def test_every_parameter_accepts_and_refuses_what_it_did(
    listings: tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]],
) -> None:
    lean, full = listings
    assert lean.keys() == full.keys() and len(lean) >= 20
    differences: list[str] = []
    for name, tool in full.items():
        before = dereference_refs(tool["inputSchema"])
        after = lean[name]["inputSchema"]
        for keyword in ("type", "additionalProperties"):
            assert after.get(keyword) == before.get(keyword), (name, keyword)
        assert set(after.get("required", [])) == set(before.get("required", [])), name
        assert after["properties"].keys() == before["properties"].keys(), name
        for parameter, schema in before["properties"].items():
            was, now = (
                Draft202012Validator(schema),
                Draft202012Validator(after["properties"][parameter]),
            )
            for value in _probes(schema):
                if was.is_valid(value) != now.is_valid(value):
                    differences.append(f"{name}.{parameter}: {value!r:.60}")
    assert differences == []


def test_every_answer_names_the_fields_it_holds(
    listings: tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]],
) -> None:
    lean, full = listings
    for name, tool in full.items():
        before, after = dereference_refs(tool["outputSchema"]), lean[name]["outputSchema"]
        Draft202012Validator.check_schema(after)
        assert after["type"] == "object", name
        assert after["properties"].keys() == set(_answer_fields(before)), name


def _answer_fields(schema: dict[str, Any]) -> list[str]:
    """The fields an answer may hold: its own, or each answer's of a union (one or many ids)."""
    if schema.get("x-fastmcp-wrap-result"):
        members = schema["properties"]["result"]["anyOf"]
        return [field for member in members for field in member["properties"]]
    return list(schema["properties"])


def test_a_nullable_union_becomes_one_schema_only_when_that_is_exact() -> None:
    bounded = {"anyOf": [{"type": "string", "maxLength": 64}, {"type": "null"}], "default": None}
    assert lean_input_schema(bounded) == {"type": ["string", "null"], "maxLength": 64}
    # An enum would refuse null once merged: it stays a union.
    choice = {"anyOf": [{"type": "string", "enum": ["a", "b"]}, {"type": "null"}]}
    assert lean_input_schema(choice) == choice
    # A union of bare types is a type list; one that has several types is not merged further.
    either = {"anyOf": [{"anyOf": [{"type": "string"}, {"type": "integer"}]}, {"type": "null"}]}
    assert lean_input_schema(either) == {
        "anyOf": [{"type": ["string", "integer"]}, {"type": "null"}]
    }
    scalars = {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]}
    assert lean_input_schema(scalars) == {"type": ["string", "integer", "null"]}
    # A description on both (a parameter's, its model's docstring): the parameter's is kept.
    described = {
        "anyOf": [{"type": "object", "description": "The model."}, {"type": "null"}],
        "description": "The parameter.",
    }
    assert lean_input_schema(described) == {
        "type": ["object", "null"],
        "description": "The parameter.",
    }
    # A reference is inlined first; its object keywords hold for objects only, so it merges.
    referenced = {
        "$defs": {"Save": {"type": "object", "properties": {"max": {"type": "integer"}}}},
        "anyOf": [{"$ref": "#/$defs/Save"}, {"type": "null"}],
    }
    assert lean_input_schema(referenced) == {
        "type": ["object", "null"],
        "properties": {"max": {"type": "integer"}},
    }


def test_an_answer_lists_its_records_fields_by_name() -> None:
    page = {
        "type": "object",
        "additionalProperties": False,
        "description": "A page.",
        "properties": {
            "items": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"id": {"type": "string", "description": "Its id."}},
                    "required": ["id"],
                },
            },
            "nextCursor": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        },
        "required": ["items", "nextCursor"],
    }
    assert lean_output_schema(page) == {
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": {"properties": {"id": {}}}},
            "nextCursor": {},
        },
    }
    assert lean_output_schema(None) is None
