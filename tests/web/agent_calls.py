"""MCP tool calls made as an agent would, for browser tests whose subject is a page, not a save.

Saving images over MCP is much quicker than dropping them on the upload page, whose own tests
(test_upload_and_search.py, test_walk.py, test_asset_forms.py) keep the browser upload covered.
"""

from __future__ import annotations

import asyncio
import base64
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastmcp import Client


def call_tools(url: str, key: str, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """The structured answers of MCP tool ``calls`` over HTTP at ``url`` as ``key``, in order.

    They run on a thread of their own: Playwright's sync driver owns the test's event loop.
    """

    async def run() -> list[Any]:
        async with Client(url + "/mcp", auth=key) as client:
            return [
                (await client.call_tool(name, arguments)).structured_content
                for name, arguments in calls
            ]

    with ThreadPoolExecutor(1) as pool:
        # Generous: forty saves on a loaded 2-core machine take seconds, never minutes.
        return pool.submit(asyncio.run, run()).result(timeout=180)


def save_images(url: str, key: str, images: list[tuple[bytes, dict[str, Any]]]) -> list[str]:
    """Save each ``(png, arguments)`` with ``image_asset_save``; their asset ids, in order."""
    calls = [
        ("image_asset_save", {"imageBase64": base64.b64encode(png).decode(), **arguments})
        for png, arguments in images
    ]
    return [saved["assetId"] for saved in call_tools(url, key, calls)]
