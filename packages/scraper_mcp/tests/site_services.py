"""The services every scraper test runs with, in-process (conftest) or in a stdio process.

A local site on 127.0.0.1 is reached as ``site.test`` through the fetcher's test resolver
allowance (the default policy never allows loopback); the other names stand for private and
metadata addresses. The store is a local directory, the embedder the local one.
"""

from __future__ import annotations

from pathlib import Path

from memory_db import Database, MemorySettings
from memory_db.embedding import LocalEmbedder
from memory_db.storage import LocalAssetObjectStore, UrlSigner
from memory_tools import MemoryServices
from memory_tools.ingest import AddressPolicy, FetchPolicy, MappedResolver, SafeFetcher

# Only site.test may reach loopback; the others stand for private and metadata addresses.
HOSTS = {
    "site.test": ["127.0.0.1"],
    "intranet.test": ["10.0.0.5"],
    "metadata.test": ["169.254.169.254"],
}
SAVE_LIMIT = 1024 * 1024


def site_services(
    database: Database, data: Path, site_port: int, default_api_key: str | None = None
) -> MemoryServices:
    """Services whose fetcher reaches the local site on ``site_port`` (close ``.fetcher``)."""
    settings = MemorySettings(memory_data_dir=data / "data", asset_max_bytes=SAVE_LIMIT)
    policy = FetchPolicy(
        max_bytes=SAVE_LIMIT,
        allow_http=True,
        allowed_ports=frozenset({80, 443, site_port}),
        total_timeout=5.0,
        connect_timeout=1.0,
        read_timeout=2.0,
        addresses=AddressPolicy(loopback_names=frozenset({"site.test"})),
    )
    return MemoryServices(
        database=database,
        store=LocalAssetObjectStore(data / "objects", UrlSigner(b"s" * 32), "http://127.0.0.1:9"),
        settings=settings,
        embedder=LocalEmbedder(),
        fetcher=SafeFetcher(policy, resolver=MappedResolver(HOSTS)),
        default_api_key=default_api_key,
    )
