"""``scraper-mcp-server``: the aggregate MCP server over stdio or HTTP."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from memory_db import MemorySettings
from memory_server.app import add_http_routes, serve_http
from memory_server.body_limit import mcp_middleware
from memory_server.bootstrap import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    public_base_url,
    running,
    stdio_api_key,
)
from memory_server.cli import run_command
from memory_server.links import stdio_services
from memory_tools import ApiKeyVerifier
from scraper_mcp import build_aggregate_server


async def _serve(settings: MemorySettings, transport: str, host: str, port: int) -> None:
    if transport == "stdio":
        await _serve_stdio(settings)
        return
    base = public_base_url(settings, host, port)
    async with running(settings, base_url=base) as (_runtime, services):
        server = build_aggregate_server(services, auth=ApiKeyVerifier(services.database))
        add_http_routes(server, services)
        print(f"mcp-scraper: MCP over streamable HTTP at http://{host}:{port}/mcp", file=sys.stderr)
        await serve_http(server, host, port, middleware=mcp_middleware(settings))


async def _serve_stdio(settings: MemorySettings) -> None:
    async with stdio_services(settings, stdio_api_key(settings)) as (services, _links):
        await build_aggregate_server(services).run_stdio_async(show_banner=False)


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
        await _serve(settings, args.transport, args.host, args.port)

    return run_command(command)


if __name__ == "__main__":
    sys.exit(main())
