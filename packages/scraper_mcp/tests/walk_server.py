"""The aggregate server over stdio, for the scrape → save → find walk (``test_scrape_walk``).

A real process speaking MCP on its stdin/stdout, with the services the tests use: the test's
database and object directory, the local embedder, and a fetcher whose test resolver lets only
``site.test`` reach the local site (the default policy never allows loopback). Configured by
environment: WALK_DATABASE_URL, WALK_DATA_DIR, WALK_SITE_PORT, WALK_KEY.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from memory_db import Database, MemorySettings
from memory_db.database import create_engine
from memory_db.embedding import LocalEmbedder
from memory_db.logs import configure_logging
from memory_db.storage import LocalAssetObjectStore, UrlSigner
from memory_tools import MemoryServices
from memory_tools.ingest import AddressPolicy, FetchPolicy, MappedResolver, SafeFetcher
from scraper_mcp import build_aggregate_server

HOSTS = {"site.test": ["127.0.0.1"], "intranet.test": ["10.0.0.5"]}
SAVE_LIMIT = 1024 * 1024


async def main() -> None:
    data = Path(os.environ["WALK_DATA_DIR"])
    port = int(os.environ["WALK_SITE_PORT"])
    settings = MemorySettings(memory_data_dir=data / "data", asset_max_bytes=SAVE_LIMIT)
    policy = FetchPolicy(
        max_bytes=SAVE_LIMIT,
        allow_http=True,
        allowed_ports=frozenset({80, 443, port}),
        total_timeout=5.0,
        connect_timeout=1.0,
        read_timeout=2.0,
        addresses=AddressPolicy(loopback_names=frozenset({"site.test"})),
    )
    fetcher = SafeFetcher(policy, resolver=MappedResolver(HOSTS))
    database = Database(create_engine(os.environ["WALK_DATABASE_URL"]))
    services = MemoryServices(
        database=database,
        store=LocalAssetObjectStore(data / "objects", UrlSigner(b"s" * 32), "http://127.0.0.1:9"),
        settings=settings,
        embedder=LocalEmbedder(),
        fetcher=fetcher,
        default_api_key=os.environ["WALK_KEY"],
    )
    try:
        await build_aggregate_server(services).run_stdio_async(show_banner=False)
    finally:
        await fetcher.aclose()
        await database.close()


if __name__ == "__main__":
    configure_logging("json")  # to stderr: stdout carries MCP
    asyncio.run(main())
