"""``scraper-mcp-server``: the aggregate MCP server over stdio or HTTP."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from memory_db import ConfigurationError, MemorySettings, configure_logging, load_settings
from memory_server.app import add_http_routes
from memory_server.bootstrap import DEFAULT_HOST, DEFAULT_PORT, public_base_url, running
from memory_server.cli import Terminated, install_sigterm_handler
from memory_tools import ApiKeyVerifier, ToolFailure, authenticate
from scraper_mcp import build_aggregate_server


async def _serve(settings: MemorySettings, transport: str, host: str, port: int) -> None:
    base = public_base_url(settings, host, port)
    key = settings.memory_api_key.get_secret_value() if settings.memory_api_key else None
    if transport == "stdio" and key is None:
        raise ConfigurationError("MEMORY_API_KEY: required for --transport stdio")
    async with running(settings, base_url=base, default_api_key=key) as (_runtime, services):
        if transport == "stdio":
            async with services.database.unit_of_work() as uow:
                try:
                    await authenticate(uow, key)
                except ToolFailure as failure:
                    raise ConfigurationError(f"MEMORY_API_KEY: {failure.message}") from None
            await build_aggregate_server(services).run_stdio_async(show_banner=False)
            return
        server = build_aggregate_server(services, auth=ApiKeyVerifier(services.database))
        add_http_routes(server, services)
        print(f"mcp-scraper: MCP over streamable HTTP at http://{host}:{port}/mcp", file=sys.stderr)
        await server.run_http_async(
            show_banner=False,
            host=host,
            port=port,
            path="/mcp",
            uvicorn_config={"access_log": False, "log_config": None},
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``scraper-mcp-server``."""
    parser = argparse.ArgumentParser(prog="scraper-mcp-server", description="Aggregate MCP server.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve scraper and memory tools over MCP")
    serve.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    serve.add_argument("--host", default=DEFAULT_HOST)
    serve.add_argument("--port", type=int, default=DEFAULT_PORT)
    args = parser.parse_args(argv)
    install_sigterm_handler()
    try:
        settings = load_settings()
        configure_logging(settings.memory_log_format, settings.memory_log_level)
        asyncio.run(_serve(settings, args.transport, args.host, args.port))
    except ConfigurationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Terminated:
        return 0
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
