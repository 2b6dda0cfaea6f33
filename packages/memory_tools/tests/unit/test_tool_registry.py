"""Tools are declared once: each is complete, and its audited operation is a real one."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from fastmcp import Client
from fastmcp.exceptions import ToolError
from fastmcp.tools import Tool
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from memory_db import Database, MemorySettings
from memory_db.database import create_engine
from memory_db.schema import PROVENANCE_OPERATIONS
from memory_db.storage import InMemoryAssetObjectStore, UrlSigner
from memory_tools import MemoryServices, build_memory_server, build_memory_tools
from memory_tools.errors import NotFoundFailure
from memory_tools.mcp.registry import Spread, ToolRegistry
from memory_tools.mcp.tools import tools as memory_registry
from memory_tools.workflows.filters import FilterParameters
from memory_tools.workflows.projects import ProjectView


@pytest.fixture
async def services(tmp_path: Path) -> AsyncIterator[MemoryServices]:
    # Building and listing tools never touches the database: an unconnected engine is enough.
    database = Database(create_engine("postgresql+asyncpg://nobody@127.0.0.1:9/none"))
    yield MemoryServices(
        database=database,
        store=InMemoryAssetObjectStore(UrlSigner(hashlib.sha256(b"x").digest())),
        settings=MemorySettings(memory_data_dir=tmp_path / "data"),
    )
    await database.close()


def _defects(tool: Tool) -> list[str]:
    """What a tool lacks of: a description, a title, all four hints, an output schema."""
    defects: list[str] = []
    if not (tool.description or "").strip():
        defects.append("description")
    if not tool.title:
        defects.append("title")
    hints = tool.annotations
    if hints is None:
        defects.append("annotations")
    else:
        for hint in ("read_only_hint", "destructive_hint", "idempotent_hint", "open_world_hint"):
            if getattr(hints, hint) is None:
                defects.append(hint)
    if not tool.output_schema:
        defects.append("output schema")
    return defects


def test_every_tool_is_complete(services: MemoryServices) -> None:
    built = build_memory_tools(services)
    assert {tool.name: _defects(tool) for tool in built} == {tool.name: [] for tool in built}
    # Every declared tool is built (default settings offer them all), in declaration order.
    assert [tool.name for tool in built] == [spec.name for spec in memory_registry.specs]


def test_an_incomplete_tool_is_reported(services: MemoryServices) -> None:
    registry = ToolRegistry()

    class Broken:
        def __init__(self, services: MemoryServices) -> None:
            self.services = services

        @registry.tool("Bare", read_only=True, idempotent=True)
        async def bare(self, name: str):  # no return type: no output schema
            return {"name": name}

    (tool,) = registry.bind(Broken(services))
    assert _defects(tool) == ["description", "output schema"]
    no_hints = tool.model_copy(update={"annotations": None, "title": None})
    assert _defects(no_hints) == ["description", "title", "annotations", "output schema"]


def test_audited_operations_are_provenance_operations() -> None:
    audited = {spec.name: spec.audited for spec in memory_registry.specs if spec.audited}
    assert set(audited.values()) <= set(PROVENANCE_OPERATIONS)
    # Every tool that changes something, and search, audits its denials.
    writing = {spec.name for spec in memory_registry.specs if not spec.read_only}
    assert writing | {"image_asset_search"} == set(audited)


def test_an_unknown_audited_operation_is_refused_at_declaration() -> None:
    registry = ToolRegistry()
    with pytest.raises(ValueError, match="'asset_saved' is not a provenance operation"):

        @registry.tool("Save", read_only=False, idempotent=False, audited="asset_saved")
        async def image_asset_save(self: object) -> ProjectView:  # pragma: no cover
            raise AssertionError

    assert registry.specs == ()


def test_a_tool_is_declared_once() -> None:
    registry = ToolRegistry()

    @registry.tool("One", read_only=True, idempotent=True)
    async def image_thing(self: object) -> ProjectView:  # pragma: no cover
        raise AssertionError

    with pytest.raises(ValueError, match="image_thing is declared twice"):
        registry.tool("Two", read_only=True, idempotent=True)(image_thing)


def test_the_base64_bound_follows_the_bound_servers_settings(tmp_path: Path) -> None:
    database = Database(create_engine("postgresql+asyncpg://nobody@127.0.0.1:9/none"))
    store = InMemoryAssetObjectStore(UrlSigner(hashlib.sha256(b"x").digest()))

    def base64_schema(max_bytes: int) -> dict[str, Any]:
        # One engine for both bindings; never connected, so nothing to close.
        settings = MemorySettings(memory_data_dir=tmp_path / "data", asset_max_bytes=max_bytes)
        built = build_memory_tools(MemoryServices(database, store, settings))
        save = next(tool for tool in built if tool.name == "image_asset_save")
        return save.parameters["properties"]["imageBase64"]

    small, large = base64_schema(3000), base64_schema(6000)
    assert small["maxLength"] < large["maxLength"]
    assert "3000 bytes" in small["description"]


def test_list_and_search_declare_every_filter_alike(services: MemoryServices) -> None:
    """Both tools take the filter parameters spread from the one model, with one schema each.

    Every field of ``FilterParameters`` (where to look and every exact filter) must be a
    parameter of both tools, under its camelCase name, with the same schema.
    """
    built = {tool.name: tool.parameters for tool in build_memory_tools(services)}
    listing, search = built["image_asset_list"], built["image_asset_search"]
    names = [info.alias for info in FilterParameters.model_fields.values()]
    assert "untagged" in names and "createdBefore" in names and "vault" in names
    for name in names:
        assert name in listing["properties"] and name in search["properties"], name
        assert listing["properties"][name] == search["properties"][name], name
    assert listing.get("$defs") == search.get("$defs")


class _Window(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, validate_by_name=True)

    first_row: Annotated[int, Field(ge=0)] = 0
    row_count: int = 10


async def test_a_spread_model_is_shown_as_its_fields_and_received_whole(
    services: MemoryServices,
) -> None:
    registry = ToolRegistry()
    received: list[_Window] = []

    class Paged:
        def __init__(self, services: MemoryServices) -> None:
            self.services = services

        @registry.tool("Paged", read_only=True, idempotent=True)
        async def image_paged(
            self,
            query: str,
            window: Annotated[_Window, Spread()] = _Window(),  # noqa: B008 - frozen default
            verbose: bool = False,
        ) -> ProjectView:
            """Page through nothing."""
            received.append(window)
            raise NotFoundFailure("nothing here")

    (tool,) = registry.bind(Paged(services))
    assert list(tool.parameters["properties"]) == ["query", "firstRow", "rowCount", "verbose"]
    assert tool.parameters["properties"]["firstRow"]["minimum"] == 0
    with pytest.raises(ToolError, match="not_found"):
        await tool.run({"query": "x", "firstRow": 3})
    assert received == [_Window(first_row=3, row_count=10)]


async def test_each_binding_runs_its_own_toolset_and_the_method_is_parsed_once(
    services: MemoryServices, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = ToolRegistry()

    class Named:
        def __init__(self, services: MemoryServices, name: str) -> None:
            self.services = services
            self.name = name

        @registry.tool("Who", read_only=True, idempotent=True)
        async def image_who(self, greeting: str = "hello") -> ProjectView:
            """Say who answers."""
            raise NotFoundFailure(f"{greeting} from {self.name}")

    parsed: list[str] = []
    from_function = Tool.from_function

    def counting(fn: Any, **kwargs: Any) -> Any:
        parsed.append(fn.__name__)
        return from_function(fn, **kwargs)

    monkeypatch.setattr(Tool, "from_function", counting)
    (first,) = registry.bind(Named(services, "first"))
    (second,) = registry.bind(Named(services, "second"))
    # Parsing the signature is the cost of building a server: once per method and process.
    assert parsed == ["image_who"]
    assert first.parameters == second.parameters
    assert first.output_schema == second.output_schema
    # Each copy calls its own toolset: nothing of one binding leaks into the other.
    with pytest.raises(ToolError, match="hi from second"):
        await second.run({"greeting": "hi"})
    with pytest.raises(ToolError, match="hello from first"):
        await first.run({})


# The output schemas as tools/list shows them: lean (memory_tools.mcp.lean_schemas), naming each
# answer's fields and its listed records' fields. A change here changes what clients read and
# validate answers against: update the file only on purpose, e.g. with
#   json.dumps({t.name: t.output_schema for t in tools}, indent=1, sort_keys=True)
# over the tools of `Client(build_memory_server(services)).list_tools()`.
OUTPUT_SCHEMAS = Path(__file__).with_name("tool_output_schemas.json")


async def test_output_schemas_are_unchanged(services: MemoryServices) -> None:
    async with Client(build_memory_server(services)) as client:
        listed = await client.list_tools()
    current = {tool.name: tool.output_schema for tool in listed}
    assert current == json.loads(OUTPUT_SCHEMAS.read_text())
