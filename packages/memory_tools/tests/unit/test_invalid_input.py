"""The middleware that refuses unknown fields and NUL characters before a tool runs."""

from __future__ import annotations

from typing import Any

import pytest
from fastmcp import Client, FastMCP
from fastmcp.exceptions import ToolError

from memory_tools import text
from memory_tools.errors import InvalidInputFailure
from memory_tools.mcp.validation import InvalidInputMiddleware
from memory_tools.text import refuse_nul_anywhere


def _server() -> tuple[FastMCP, list[str]]:
    server = FastMCP("t", middleware=[InvalidInputMiddleware()])

    @server.tool
    def image_echo(include_archived: bool = False, name: str = "") -> str:
        """Echo."""
        return f"{name}:{include_archived}"

    looked_up: list[str] = []
    get_tool = server.get_tool

    async def counting(name: str, *args: Any, **kwargs: Any) -> Any:
        looked_up.append(name)
        return await get_tool(name, *args, **kwargs)

    server.get_tool = counting  # type: ignore[method-assign]
    return server, looked_up


async def test_a_tool_is_looked_up_for_its_fields_once() -> None:
    """A tool's fields are read once per server: a lookup cost 0.1-0.15 ms of every call."""
    server, looked_up = _server()
    async with Client(server) as client:
        await client.call_tool("image_echo", {"name": "a"})
        first = len(looked_up)
        for _ in range(3):
            await client.call_tool("image_echo", {"name": "a"})
    # Each call after the first is looked up by fastmcp alone, to run it.
    assert len(looked_up) - first == 3 * (first - 1)


async def test_unknown_fields_are_still_refused_with_the_known_ones() -> None:
    server, _ = _server()
    async with Client(server) as client:
        assert (await client.call_tool("image_echo", {"name": "a"})).data == "a:False"
        for _ in range(2):  # from the lookup, then from what was kept
            with pytest.raises(ToolError) as refused:
                await client.call_tool("image_echo", {"includeArchived": True})
            assert str(refused.value) == ("invalid_input: includeArchived: is not a known field")


async def test_an_unknown_tool_is_not_kept() -> None:
    server, looked_up = _server()
    async with Client(server) as client:
        for _ in range(2):
            with pytest.raises(ToolError):
                await client.call_tool("image_missing", {})
    # Ours and fastmcp's on each call: a name not found is looked up again, never kept.
    assert looked_up.count("image_missing") == 4


@pytest.mark.parametrize(
    ("arguments", "refused"),
    [
        ({"imageBase64": "QUJD" * 1000 + "\x00"}, "imageBase64: must not contain a NUL"),
        ({"tags": ["ok", "a\x00b"]}, "tags: must not contain a NUL"),
        ({"sourceRef": {"page\x00": "x"}}, "sourceRef: must not contain a NUL"),
        ({"title": "caf\u00e9\x00"}, "title: must not contain a NUL"),
        ({"title": "caf\u00e9 \ud800"}, "title: must be valid Unicode"),
        ({"sourceRef": {"n": {"deep": "\udfff"}}}, "sourceRef.n.deep: must be valid Unicode"),
    ],
)
def test_nul_and_lone_surrogates_are_refused_in_any_string(
    arguments: dict[str, Any], refused: str
) -> None:
    with pytest.raises(InvalidInputFailure, match=refused):
        refuse_nul_anywhere(arguments)


def test_an_ascii_string_is_checked_without_the_pattern(monkeypatch: pytest.MonkeyPatch) -> None:
    """27 MB of base64 took the pattern 107 ms of the event loop; a plain search takes 2."""

    class Unused:
        def search(self, value: str) -> None:
            raise AssertionError("the pattern read an ASCII string")

    monkeypatch.setattr(text, "_UNSTORABLE", Unused())
    # Passed without it (a refusal reads it to name what it found: the test above).
    refuse_nul_anywhere({"imageBase64": "QUJD" * 1000, "tags": ["a", "b"], "ref": {"k": "v"}})
