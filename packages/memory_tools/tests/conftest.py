"""Fixtures: services on a fresh database, identities with keys, in-process MCP clients."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client

from memory_db import Database, MemorySettings
from memory_db.embedding import LocalEmbedder
from memory_db.storage import InMemoryAssetObjectStore, UrlSigner
from memory_tools import MemoryServices, admin, build_memory_server


@dataclass
class Person:
    email: str
    key: str
    key_id: str


@pytest.fixture
def settings(tmp_path: Path) -> MemorySettings:
    return MemorySettings(memory_data_dir=tmp_path / "data")


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
