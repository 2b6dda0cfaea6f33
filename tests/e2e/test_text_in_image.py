"""The text in an image as an agent meets it (issue 30): a real ``memory-server serve`` with
OCR on (Tesseract), and the official MCP SDK over streamable HTTP.

An agent saves a PNG screenshot with text and polls ``image_asset_get`` every 50 ms, 20 times:
every ``done`` it sees carries the text. Then it waits for the text instead
(``waitFor: ["embedding", "ocr"]``), and an image without text answers ``noText``.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import pyvips
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from memory_tools.testing.keys import new_key as make_key

from .test_processes import _env, serve_http

pytestmark = pytest.mark.slow

OWNER = "ocr-agent@example.com"
POLLS = 20
POLL_SECONDS = 0.05


def _screenshot(words: str) -> bytes:
    """Dark words on a light page, like a screen capture."""
    mask = pyvips.Image.text(f"{words}\nSettings  Help  Account", font="DejaVu Sans 16", dpi=72)
    page = (pyvips.Image.black(mask.width + 60, mask.height + 50, bands=3) + [250] * 3).cast(
        "uchar"
    )
    alpha = mask.embed(30, 25, page.width, page.height) / 255.0
    inked = (page * (1 - alpha) + alpha * 20).cast("uchar").copy(interpretation="srgb")
    return inked.pngsave_buffer()


def _blank() -> bytes:
    """A PNG with nothing to read: a smooth gradient."""
    xyz = pyvips.Image.xyz(320, 200)
    grey = (xyz[0] * 0.5 + xyz[1] * 0.3 + 40).cast("uchar")
    return grey.bandjoin([grey, grey]).copy(interpretation="srgb").pngsave_buffer()


@pytest.fixture
def server(tmp_path: Path, database_url: str) -> Iterator[tuple[str, str]]:
    # A migrated database of the test's own (the template's clone): no embedded PostgreSQL to
    # start, for the key or the server.
    env = _env(tmp_path, ASSET_OCR="screenshots", MEMORY_DATABASE_URL=database_url)
    key = make_key(env, OWNER)
    with serve_http(env, capture=False) as (url, _process):
        yield url, key


async def _call(session: ClientSession, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def test_done_always_carries_the_text_and_waiting_for_it_works(
    server: tuple[str, str],
) -> None:
    url, key = server
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http,
        streamable_http_client(url + "/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        seen: list[tuple[str, str | None]] = []
        for run, words in enumerate(("Invoice due on Friday", "Harbour ferry timetable")):
            saved = await _call(
                session,
                "image_asset_save",
                {"imageBase64": base64.b64encode(_screenshot(words)).decode()},
            )
            asset_id = saved["assetId"]
            for _ in range(POLLS):
                got = await _call(session, "image_asset_get", {"assetId": asset_id})
                ocr = got["textInImage"]
                assert ocr is not None  # a PNG gets an OCR job under ASSET_OCR=screenshots
                seen.append((ocr["status"], ocr["text"]))
                if ocr["status"] == "done":
                    assert ocr["text"] and words.split()[0] in ocr["text"], (run, ocr)
                    assert ocr["noText"] is False
                await anyio.sleep(POLL_SECONDS)
            # The longest wait the tool allows: OCR on a loaded two-core machine takes seconds.
            waited = await _call(
                session,
                "image_asset_get",
                {"assetId": asset_id, "waitSeconds": 30, "waitFor": ["embedding", "ocr"]},
            )
            assert waited["embeddingStatus"] in ("ready", "partial"), waited
            assert waited["textInImage"]["status"] == "done", waited["textInImage"]
            assert words.split()[0] in waited["textInImage"]["text"]
        blank = await _call(
            session, "image_asset_save", {"imageBase64": base64.b64encode(_blank()).decode()}
        )
        nothing = await _call(
            session,
            "image_asset_get",
            {"assetId": blank["assetId"], "waitSeconds": 30, "waitFor": ["ocr"]},
        )
        refused = await session.call_tool(
            "image_asset_get",
            {"assetId": blank["assetId"], "waitSeconds": 1, "waitFor": ["describe"]},
        )
    # Every answer of the polls: done only ever with the text (checked above as they came).
    assert len(seen) == 2 * POLLS
    assert (nothing["textInImage"]["status"], nothing["textInImage"]["text"]) == ("done", "")
    assert nothing["textInImage"]["noText"] is True
    assert refused.is_error and "waitFor" in str(refused.content)
