"""Fixtures: services on a fresh database, identities with keys, in-process MCP clients, and a
scripted web server on 127.0.0.1 reachable as ``img.test`` for saves by URL."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client
from hypothesis import HealthCheck, settings

from memory_db import Database, MemorySettings
from memory_db.embedding import LocalEmbedder
from memory_db.storage import InMemoryAssetObjectStore, LocalAssetObjectStore, UrlSigner
from memory_tools import MemoryServices, build_memory_server
from memory_tools.ingest import AddressPolicy, FetchPolicy, MappedResolver, SafeFetcher
from memory_tools.operations import admin
from memory_tools.testing.web import Reply, WebServer, serve_web

from .web_routes import ALLOWED_NAMES, HOSTS, MAX_BYTES, SAVE_LIMIT, routes_for

# Property tests (hypothesis) are repeatable, a fixed derivation of examples from each test and
# no example database written into the checkout, and do not fail on a loaded machine because
# generating inputs or running one example took long: they check behaviour, never time.
settings.register_profile(
    "repo",
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("repo")


@dataclass
class Person:
    email: str
    key: str
    key_id: str


@pytest.fixture
def settings(tmp_path: Path) -> MemorySettings:
    # OCR (docs/ocr.md) is off unless a test is about it: it adds a job to PNG saves.
    return MemorySettings(memory_data_dir=tmp_path / "data", asset_ocr="off")


@pytest.fixture
def services(database: Database, settings: MemorySettings) -> MemoryServices:
    store = InMemoryAssetObjectStore(UrlSigner(hashlib.sha256(b"t").digest()))
    return MemoryServices(
        database=database, store=store, settings=settings, embedder=LocalEmbedder()
    )


@pytest.fixture
def make_person(database: Database) -> Callable[..., Any]:
    async def make(
        email: str, scopes: tuple[str, ...] = ("read", "write", "destructive")
    ) -> Person:
        with suppress(Exception):
            await admin.create_identity(database, email, 10**9)
        new = await admin.create_key(database, email, scopes)
        return Person(email, new.secret, new.record.id)

    return make


@pytest.fixture
def client_for(
    services: MemoryServices,
) -> Callable[[str | None], AbstractAsyncContextManager[Client[Any]]]:
    """An in-process MCP client acting with ``key`` (as a stdio server would)."""

    def make(key: str | None) -> Client[Any]:
        return Client(build_memory_server(replace(services, default_api_key=key)))

    return make


@pytest.fixture
async def alice(make_person: Callable[..., Any]) -> AsyncIterator[Person]:
    yield await make_person("alice@example.com")


@pytest.fixture
async def bob(make_person: Callable[..., Any]) -> AsyncIterator[Person]:
    yield await make_person("bob@example.com")


@pytest.fixture
def web() -> Iterator[WebServer]:
    with serve_web() as server:
        yield server


@pytest.fixture
def fetch_policy(web: WebServer) -> FetchPolicy:
    return FetchPolicy(
        max_bytes=MAX_BYTES,
        allow_http=True,
        allowed_ports=frozenset({80, 443, web.port}),
        total_timeout=2.0,
        connect_timeout=1.0,
        read_timeout=1.0,
        addresses=AddressPolicy(loopback_names=ALLOWED_NAMES),
    )


@pytest.fixture
def resolver() -> MappedResolver:
    return MappedResolver(HOSTS)


@pytest.fixture
def client_as(saving: MemoryServices) -> Callable[[str], Client[Any]]:
    """An in-process MCP client of the saving services, acting with ``key``."""
    return lambda key: Client(build_memory_server(replace(saving, default_api_key=key)))


@pytest.fixture
async def saving(
    services: MemoryServices, tmp_path: Path, web: WebServer
) -> AsyncIterator[MemoryServices]:
    web.routes.update(routes_for(web.port))
    web.routes["/big-length"] = Reply(body=b"x" * (SAVE_LIMIT + 1))
    web.routes["/big-stream"] = Reply(body=b"x" * (SAVE_LIMIT + 1), send_length=False)
    store = LocalAssetObjectStore(tmp_path / "objects", UrlSigner(b"s" * 32), "http://127.0.0.1:9")
    policy = FetchPolicy(
        max_bytes=SAVE_LIMIT,
        allow_http=True,
        allowed_ports=frozenset({80, 443, web.port}),
        total_timeout=2.0,
        connect_timeout=1.0,
        read_timeout=1.0,
        addresses=AddressPolicy(loopback_names=ALLOWED_NAMES),
    )
    fetcher = SafeFetcher(policy, resolver=MappedResolver(HOSTS))
    settings = services.settings.model_copy(update={"asset_max_bytes": SAVE_LIMIT})
    yield replace(services, store=store, fetcher=fetcher, settings=settings)
    await fetcher.aclose()
