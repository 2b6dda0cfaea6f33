"""The upload page's "Save from URL" in Chromium: the button is pressed, the server fetches the
image and saves it, and the row shows it; an address the fetcher refuses is shown in its row.

The server's fetcher refuses loopback addresses, rightly. As the fetch tests do, the app is
served in-process with a resolver that maps ``img.test`` to a scripted server on 127.0.0.1 and
a policy that admits loopback for that one name only; nothing a user can configure does this.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest
import pyvips
from playwright.async_api import Page, async_playwright, expect

from memory_db import Database, MemorySettings
from memory_db.embedding import LocalEmbedder
from memory_db.storage import LocalAssetObjectStore, UrlSigner
from memory_tools import MemoryServices
from memory_tools.ingest import AddressPolicy, FetchPolicy, MappedResolver, SafeFetcher
from memory_tools.operations import admin
from memory_tools.serving.job_worker import job_worker
from memory_tools.testing.web import Reply, WebServer, serve_web
from memory_tools.testing.web_app import WebApp, serve_web_app
from scraper_mcp.chromium import find_chromium

from .conftest import ResponseLog

pytestmark = pytest.mark.slow

HOST = "img.test"


def _png() -> bytes:
    xyz = pyvips.Image.xyz(80, 60)
    red = ((xyz[0] * 3 + xyz[1]) % 256).cast("uchar")
    green = ((xyz[1] * 5) % 256).cast("uchar")
    return red.bandjoin([green, red]).copy(interpretation="srgb").pngsave_buffer()


@pytest.fixture
def images() -> Iterator[WebServer]:
    """The scripted image server on 127.0.0.1, known to the fetcher as img.test."""
    with serve_web(
        {"/photo.png": Reply(body=_png(), headers={"Content-Type": "image/png"})}
    ) as web:
        yield web


@pytest.fixture
async def fetching_app(
    database: Database, tmp_path: Path, images: WebServer
) -> AsyncIterator[WebApp]:
    """The whole HTTP app with a fetcher that may reach img.test (the scripted server) only."""
    policy = FetchPolicy(
        max_bytes=1_000_000,
        allow_http=True,
        allowed_ports=frozenset({80, 443, images.port}),
        addresses=AddressPolicy(loopback_names=frozenset({HOST})),
    )
    fetcher = SafeFetcher(policy, resolver=MappedResolver({HOST: ["127.0.0.1"]}))

    def make(base_url: str) -> MemoryServices:
        signer = UrlSigner(hashlib.sha256(b"save-from-url").digest())
        return MemoryServices(
            database=database,
            store=LocalAssetObjectStore(tmp_path / "objects", signer, base_url),
            settings=MemorySettings(memory_data_dir=tmp_path / "data", asset_ocr="off"),
            embedder=LocalEmbedder(),
            fetcher=fetcher,
            public_base_url=base_url,
        )

    async with serve_web_app(make) as app:
        yield app
    await fetcher.aclose()


async def sign_in_async(page: Page, key: str) -> None:
    """Sign in through the form (the async API's page), as ``conftest.sign_in`` does."""
    await page.goto("/sign-in")
    await page.get_by_label("API key").fill(key)
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url(lambda url: "/sign-in" not in url)


async def test_save_from_url_saves_the_image_and_a_refused_address_says_why(
    fetching_app: WebApp, images: WebServer, database: Database
) -> None:
    await admin.create_identity(database, "fetcher@example.com", 10**9)
    key = (await admin.create_key(database, "fetcher@example.com", ("read", "write"))).secret
    chromium, why = find_chromium(MemorySettings())
    if chromium is None:
        pytest.fail(f"no Chromium for the browser tests ({why}): run `make chromium`")
    log = ResponseLog()
    errors: list[str] = []

    async def press_the_buttons() -> None:
        async with async_playwright() as driver:
            browser = await driver.chromium.launch(executable_path=chromium, headless=True)
            try:
                context = await browser.new_context(base_url=fetching_app.base_url)
                page = await context.new_page()
                page.on("response", log.record)
                page.on("pageerror", lambda error: errors.append(str(error)))
                await sign_in_async(page, key)
                await page.goto("/upload")
                await page.get_by_label("Tags for these images").fill("found")
                url = images.url("/photo.png", host=HOST)
                await page.get_by_label("Image URL").fill(url)
                await page.get_by_role("button", name="Save from URL").click()

                row = page.locator(".upload-row").filter(has_text=url)
                await expect(row.locator(".status-text")).to_have_text("Ready", timeout=30_000)
                await expect(row.locator(".upload-error")).to_be_hidden()
                await expect(row.locator(".upload-size")).to_contain_text("80\u00d760")
                assert images.requested == ["/photo.png"]
                # The address box is empty again, ready for the next one.
                await expect(page.get_by_label("Image URL")).to_have_value("")

                # The same address by its loopback number is refused by the fetcher, in its row.
                log.allow(422, r"/app/uploads/url$")
                inside = images.url("/photo.png")
                await page.get_by_label("Image URL").fill(inside)
                await page.get_by_role("button", name="Save from URL").click()
                refused = page.locator(".upload-row").filter(has_text=inside)
                await expect(refused.locator(".status-text")).to_have_text("Refused")
                await expect(refused.locator(".error-code")).to_have_text("unsafe_url")
                assert images.requested == ["/photo.png"]

                # The saved image: its page shows it, its source and its tag.
                await row.get_by_role("link", name=re.compile("^Open")).click()
                await expect(page.get_by_role("link", name=url)).to_be_visible()
                await expect(page.locator(".tag", has_text="found")).to_be_visible()
                preview = page.locator(".asset-preview img")
                await expect(preview).to_have_js_property("complete", True)
                assert await preview.evaluate("(img) => img.naturalWidth") == 80
            finally:
                await browser.close()

    # The real worker embeds what is saved, so the row reaches Ready. It is cancelled only
    # after the browser part has ended, so a failure there is reported, not cancelled away.
    async with anyio.create_task_group() as worker:
        worker.start_soon(job_worker(fetching_app.services).run)
        try:
            await press_the_buttons()
        finally:
            worker.cancel_scope.cancel()
    assert not errors, errors
    assert not log.unexpected(), log.unexpected()
