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

from site_services import site_services  # a sibling module: this runs as a script

from memory_db import Database
from memory_db.database import create_engine
from memory_db.logs import configure_logging
from scraper_mcp import build_aggregate_server


async def main() -> None:
    data = Path(os.environ["WALK_DATA_DIR"])
    port = int(os.environ["WALK_SITE_PORT"])
    database = Database(create_engine(os.environ["WALK_DATABASE_URL"]))
    services = site_services(database, data, port, default_api_key=os.environ["WALK_KEY"])
    fetcher = services.fetcher
    assert fetcher is not None
    try:
        await build_aggregate_server(services).run_stdio_async(show_banner=False)
    finally:
        await fetcher.aclose()
        await database.close()


if __name__ == "__main__":
    configure_logging("json")  # to stderr: stdout carries MCP
    asyncio.run(main())
