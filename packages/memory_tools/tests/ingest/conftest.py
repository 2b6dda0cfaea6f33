"""Fetch fixtures: a scripted web server on 127.0.0.1 reachable as ``img.test``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client

from memory_db.storage import LocalAssetObjectStore, UrlSigner
from memory_tools import MemoryServices, build_memory_server
from memory_tools.ingest import AddressPolicy, FetchPolicy, MappedResolver, SafeFetcher
from memory_tools.testing.web import Reply, WebServer, serve_web

# Names the tests resolve themselves; only img.test may reach loopback (the test allowance).
HOSTS = {
    "img.test": ["127.0.0.1"],
    "cdn.img.test": ["127.0.0.1"],
    "loopback-alias.test": ["127.0.0.1"],
    "intranet.test": ["10.0.0.5"],
    "mixed.test": ["93.184.216.34", "10.0.0.5"],
    "metadata.test": ["169.254.169.254"],
    "169.254.169.254.nip.io": ["169.254.169.254"],
    "aws6.test": ["fd00:ec2::254"],
    "mapped.test": ["::ffff:127.0.0.1"],
    "nat64.test": ["64:ff9b::a9fe:a9fe"],
    "sixtofour.test": ["2002:7f00:1::1"],
    "teredo.test": ["2001:0:4136:e378:8000:63bf:3fff:fdd2"],
    "cgnat.test": ["100.64.1.1"],
    "bench.test": ["198.18.0.1"],
    "mcast.test": ["224.0.0.1"],
    "bcast.test": ["255.255.255.255"],
    "zero.test": ["0.0.0.0"],
    "linklocal6.test": ["fe80::1"],
    "ula.test": ["fc00::1"],
}
ALLOWED_NAMES = frozenset({"img.test", "cdn.img.test"})
MAX_BYTES = 4096
SAVE_LIMIT = 65536


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
    from .test_fetch import _routes

    web.routes.update(_routes(web.port))
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
