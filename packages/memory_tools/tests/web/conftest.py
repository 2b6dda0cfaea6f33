"""Fixtures: the web app served over real HTTP on a fresh database, and browser-like clients."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from memory_db import Database, MemorySettings
from memory_db.embedding import LocalEmbedder
from memory_db.storage import LocalAssetObjectStore, UrlSigner
from memory_tools import MemoryServices
from memory_tools.testing.web_app import WebApp, WebClient, serve_web_app


@pytest.fixture
def web_settings(tmp_path: Path) -> MemorySettings:
    return MemorySettings(asset_ocr="off", memory_data_dir=tmp_path / "data")


@pytest.fixture
async def webapp(
    database: Database, web_settings: MemorySettings, tmp_path: Path
) -> AsyncIterator[WebApp]:
    """The memory server's HTTP app (web app included) on 127.0.0.1, local store, no worker."""

    def make(base_url: str) -> MemoryServices:
        signer = UrlSigner(hashlib.sha256(b"web").digest())
        store = LocalAssetObjectStore(tmp_path / "objects", signer, base_url)
        return MemoryServices(
            database=database,
            store=store,
            settings=web_settings,
            embedder=LocalEmbedder(),
            public_base_url=base_url,
        )

    async with serve_web_app(make) as app:
        yield app


@pytest.fixture
def browser_for(webapp: WebApp) -> Callable[[], WebClient]:
    """A new browser-like client of the app (sign it in with ``await client.sign_in(key)``)."""
    made: list[WebClient] = []

    def make() -> WebClient:
        client = WebClient(webapp.base_url)
        made.append(client)
        return client

    return make


@pytest.fixture
async def signed_in(
    browser_for: Callable[[], WebClient], make_person: Callable[..., Any]
) -> AsyncIterator[WebClient]:
    """Alice, signed in (read, write, destructive)."""
    alice = await make_person("alice@example.com")
    async with browser_for() as client:
        answer = await client.sign_in(alice.key)
        assert answer.status_code == 303
        yield client
