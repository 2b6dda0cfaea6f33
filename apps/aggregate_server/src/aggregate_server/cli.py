"""``scraper-mcp-server``: the aggregate MCP server over stdio or HTTP."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from memory_db import MemorySettings
from memory_tools.serving import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    ServerApp,
    run_command,
    serve_http,
    serve_stdio,
)
from scraper_mcp import build_aggregate_server

# The scraper tools next to the same memory tools, served as memory-server serves them.
APP = ServerApp(name="mcp-scraper", build_server=build_aggregate_server)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``scraper-mcp-server``."""
    parser = argparse.ArgumentParser(prog="scraper-mcp-server", description="Aggregate MCP server.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve scraper and memory tools over MCP")
    serve.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    serve.add_argument("--host", default=DEFAULT_HOST)
    serve.add_argument("--port", type=int, default=DEFAULT_PORT)
    args = parser.parse_args(argv)

    async def command(settings: MemorySettings) -> None:
        # As before the shared serving: the aggregate embeds nothing itself; saves it takes are
        # embedded by `memory-server serve` or `memory-server worker` on the same database.
        if args.transport == "stdio":
            await serve_stdio(settings, APP, with_worker=False)
        else:
            await serve_http(settings, APP, args.host, args.port, with_worker=False)

    return run_command(command)


if __name__ == "__main__":
    sys.exit(main())
