"""Property-based test (hypothesis) of every tool's input schema, through a real MCP client.

Arbitrary JSON objects, built from the tools' own argument names and from junk, are sent to
every tool. Whatever arrives, a tool answers with its structured result or with a tool error
whose text starts with a documented stable code, never ``internal`` or a transport failure; and
values the schemas forbid (unknown fields, NUL characters) are refused, changing nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from fastmcp import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from memory_db import Database
from memory_tools.errors import CODES

from ..conftest import Person

# Field names the tools take (so generated objects often reach past the first validation).
FIELDS = [
    "assetId",
    "projectId",
    "folderId",
    "vault",
    "query",
    "imageBase64",
    "sourceUrl",
    "artifactId",
    "title",
    "description",
    "tags",
    "name",
    "limit",
    "cursor",
    "order",
    "filters",
    "imageAssetId",
    "mode",
    "includeThumbnails",
    "idempotencyKey",
    "parentFolderId",
    "archived",
    "altText",
    "sourceRef",
]
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.text(max_size=40),
    st.sampled_from(["", "\x00", "ast_" + "a" * 26, "newest", "x" * 5000, "../../etc/passwd"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=8,
)
ARGUMENTS = st.dictionaries(
    st.one_of(st.sampled_from(FIELDS), st.text(max_size=12)), VALUES, max_size=5
)
TABLES = ("mem_assets", "mem_asset_projects", "mem_asset_folders", "mem_asset_objects")


async def _counts(database: Database) -> list[int]:
    async with database.engine.connect() as conn:
        return [
            int((await conn.execute(text(f"SELECT count(*) FROM {table}"))).scalar_one())
            for table in TABLES
        ]


def _code(result: Any) -> str:
    return str(getattr(result.content[0], "text", "")).split(":", 1)[0]


@settings(
    max_examples=6,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(arguments=ARGUMENTS, junk=st.text(min_size=1, max_size=6))
async def test_arbitrary_arguments_never_crash_a_tool(
    client_for: Callable[[str | None], AbstractAsyncContextManager[Client[Any]]],
    alice: Person,
    database: Database,
    arguments: dict[str, Any],
    junk: str,
) -> None:
    json.dumps(arguments)  # what a client can send
    async with client_for(alice.key) as client:
        tools = sorted(tool.name for tool in await client.list_tools())
        for name in tools:
            result = await client.call_tool(name, arguments, raise_on_error=False)
            if result.is_error:
                assert _code(result) in CODES and _code(result) != "internal", (name, result)
            else:
                assert result.structured_content is not None, name
            # Forbidden: an unknown field, and a NUL character in any string. Nothing changes.
            before = await _counts(database)
            unknown = {**arguments, "zz" + junk: 1}
            refused = await client.call_tool(name, unknown, raise_on_error=False)
            assert refused.is_error and _code(refused) == "invalid_input", (name, refused)
            nul = {**arguments, "title": "a\x00b", "name": "a\x00b", "query": "a\x00b"}
            refused = await client.call_tool(name, nul, raise_on_error=False)
            assert refused.is_error and _code(refused) in CODES and _code(refused) != "internal"
            assert await _counts(database) == before, name
