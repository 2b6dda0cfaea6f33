"""The buttons a real server rarely shows on demand, pressed in Chromium: Retry of a failed
embedding, Accept and Clear of a generated description, the jobs panel's Cancel job and Retry,
the jobs toolbar, and the search page's Remove image.

They need an embedder that fails and a describer that answers, so the app is served
in-process with scripted ones (the same fakes the HTTP tests of these pages use); everything
else is real: PostgreSQL, HTTP, the pages, their scripts and Chromium. Every answer the pages
get is recorded, and any refusal the test did not provoke fails it.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import pyvips
from playwright.async_api import Page, async_playwright, expect

from memory_db import Database, MemorySettings
from memory_db.describing import ScriptedDescriber
from memory_db.embedding import LocalEmbedder, ScriptedEmbedder
from memory_db.errors import ProviderRejected
from memory_db.storage import LocalAssetObjectStore, UrlSigner
from memory_tools import MemoryServices
from memory_tools.access import Caller
from memory_tools.ingest.save import AssetSaver, SaveRequest
from memory_tools.operations import admin
from memory_tools.serving.job_worker import job_worker
from memory_tools.testing.web_app import WebApp, serve_web_app
from scraper_mcp.chromium import find_chromium

from .conftest import ResponseLog
from .test_save_from_url import sign_in_async

pytestmark = pytest.mark.slow

OWNER = "operator@example.com"
SCOPES = ("read", "write", "destructive", "admin")


def _png(seed: int) -> bytes:
    xyz = pyvips.Image.xyz(64, 48)
    red = ((xyz[0] * (seed + 2) + xyz[1]) % 256).cast("uchar")
    green = ((xyz[1] * (seed + 7)) % 256).cast("uchar")
    return red.bandjoin([green, red]).copy(interpretation="srgb").pngsave_buffer()


def _described(_request: Any) -> dict[str, Any]:
    return {
        "caption": "A heron standing in reeds",
        "visibleText": "",
        "subjects": ["heron"],
        "setting": "a marsh",
        "kind": "photo",
        "language": None,
        "safety": {"adult": False, "violence": False, "medical": False, "personalData": False},
    }


@pytest.fixture
async def app(database: Database, tmp_path: Path) -> AsyncIterator[WebApp]:
    """The whole HTTP app in-process, no worker (the test drains the queue when it means to)."""

    def make(base_url: str) -> MemoryServices:
        signer = UrlSigner(hashlib.sha256(b"page-actions").digest())
        return MemoryServices(
            database=database,
            store=LocalAssetObjectStore(tmp_path / "objects", signer, base_url),
            settings=MemorySettings(memory_data_dir=tmp_path / "data", asset_ocr="off"),
            embedder=LocalEmbedder(),
            public_base_url=base_url,
        )

    async with serve_web_app(make) as served:
        yield served


async def _save(services: MemoryServices, key_id: str, seed: int, title: str) -> str:
    caller = Caller(OWNER, key_id, frozenset(SCOPES))
    request = SaveRequest(image_base64=base64.b64encode(_png(seed)).decode(), title=title)
    return (await AssetSaver(services).save(caller, request)).asset_id


async def _status(page: Page) -> str:
    notice = page.locator("main > .flash")
    await expect(notice).to_be_visible()
    return await notice.inner_text()


async def test_retry_describe_review_jobs_and_search_buttons(
    app: WebApp, database: Database, tmp_path: Path
) -> None:
    await admin.create_identity(database, OWNER, 10**9)
    key = await admin.create_key(database, OWNER, SCOPES)
    failing = replace(
        app.services,
        embedder=ScriptedEmbedder(
            model_name="local-hash-v1",
            script=[ProviderRejected("wrong_dimensions", "no") for _ in range(4)],
        ),
    )
    stubborn = await _save(failing, key.record.id, 1, "Stubborn")
    await job_worker(failing).drain()
    describing = replace(app.services, describer=ScriptedDescriber(default=_described))
    heron = await _save(describing, key.record.id, 2, "Heron")
    await job_worker(describing).drain()

    chromium, why = find_chromium(MemorySettings())
    if chromium is None:
        pytest.fail(f"no Chromium for the browser tests ({why}): run `make chromium`")
    log = ResponseLog()
    errors: list[str] = []
    async with async_playwright() as driver:
        browser = await driver.chromium.launch(executable_path=chromium, headless=True)
        try:
            context = await browser.new_context(base_url=app.base_url)
            page = await context.new_page()
            page.on("response", log.record)
            page.on("pageerror", lambda error: errors.append(str(error)))
            await sign_in_async(page, key.secret)

            # Asset page: Retry a failed representation.
            await page.goto(f"/assets/{stubborn}")
            await expect(page.get_by_text("wrong_dimensions").first).to_be_visible()
            await page.get_by_role("button", name="Retry visual").click()
            assert "The visual embedding is queued again." in await _status(page)

            # Asset page: Accept, then Clear, the generated description.
            await page.goto(f"/assets/{heron}")
            await expect(page.get_by_text("A heron standing in reeds")).to_be_visible()
            await page.get_by_role("button", name="Accept description").click()
            assert "Description accepted." in await _status(page)
            await expect(page.get_by_role("button", name="Accept description")).to_have_count(0)
            await page.get_by_role("button", name="Clear description").click()
            assert "Description cleared." in await _status(page)
            await expect(page.get_by_text("Generated description")).to_have_count(0)

            # Jobs: the toolbar's Apply and Refresh, then Cancel job and Retry in the panel.
            await page.goto("/jobs")
            await page.get_by_label("Status").select_option("queued")
            await page.get_by_role("button", name="Apply").click()
            await expect(page).to_have_url(re.compile(r"status=queued"))
            queued = page.locator('#jobs-rows tr[data-status="queued"]')
            await expect(queued).to_have_count(1)
            await page.get_by_role("button", name="Refresh").click()
            await expect(queued).to_have_count(1)
            await queued.locator(".jobs-details-link").click()
            panel = page.get_by_role("dialog")
            await panel.get_by_label("Reason").fill("paused for maintenance")
            await panel.get_by_role("button", name="Cancel job").click()
            assert re.search(r"Job \S+ cancelled", await _status(page))
            await page.goto("/jobs?status=cancelled")
            cancelled = page.locator('#jobs-rows tr[data-status="cancelled"]')
            await expect(cancelled).to_have_count(1)
            await cancelled.locator(".jobs-details-link").click()
            await page.get_by_role("dialog").get_by_role("button", name="Retry").click()
            assert re.search(r"Job \S+ queued again", await _status(page))

            # Search: an image chosen, then removed, before searching by words.
            picked = tmp_path / "query.png"
            picked.write_bytes(_png(3))
            await page.goto("/search")
            await page.get_by_label("Image (or paste one)").set_input_files(str(picked))
            await expect(page.locator("#search-image-chosen")).to_contain_text("query.png")
            await page.get_by_role("button", name="Remove image").click()
            await expect(page.locator("#search-image-chosen")).to_have_text("")
            await expect(page.get_by_role("button", name="Remove image")).to_be_hidden()
            await page.get_by_label("Words").fill("heron")
            await page.get_by_role("button", name="Search", exact=True).click()
            await expect(page).to_have_url(re.compile(r"/search\?query=heron"))
            await expect(page.locator(".search-hit").first).to_contain_text("Heron")
        finally:
            await browser.close()
    assert not errors, errors
    assert not log.unexpected(), log.unexpected()
