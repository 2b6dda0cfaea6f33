"""Calling memory tools in tests: the structured answer, or the error text."""

from __future__ import annotations

from typing import Any

from fastmcp import Client


async def call(client: Client[Any], tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The structured content of a successful call."""
    result = (await client.call_tool(tool, arguments)).structured_content
    assert result is not None
    return result


async def error(client: Client[Any], tool: str, arguments: dict[str, Any]) -> str:
    """The text of a refused call (``"<code>: <message>"``)."""
    result = await client.call_tool(tool, arguments, raise_on_error=False)
    assert result.is_error
    return result.content[0].text  # type: ignore[union-attr]
