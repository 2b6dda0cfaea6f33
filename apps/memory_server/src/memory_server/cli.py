"""``memory-server``: serve MCP (stdio or HTTP), migrate, and administer identities and keys."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from memory_db import ConfigurationError, MemorySettings, open_database
from memory_db.migrate import current_revision
from memory_tools import MemoryServices
from memory_tools.serving import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    ServerApp,
    run_command,
    run_worker,
    serve_http,
    serve_http_processes,
    serve_stdio,
)
from memory_tools.serving.admin_commands import add_admin_parser, admin_command
from memory_tools.serving.processes import MAX_PROCESSES

if TYPE_CHECKING:
    from fastmcp import FastMCP
    from fastmcp.server.auth import AuthProvider


def _memory_server(services: MemoryServices, *, name: str, auth: AuthProvider | None) -> FastMCP:
    # fastmcp loads only when a server starts, so `admin` commands start quickly.
    from memory_tools.mcp import build_memory_server

    return build_memory_server(services, name=name, auth=auth)


# What `serve` and `worker` run: the memory tools alone; `--processes` starts this CLI again.
APP = ServerApp(
    name="image-memory",
    build_server=_memory_server,
    command=(sys.executable, "-m", "memory_server"),
)


async def _migrate(settings: MemorySettings) -> None:
    database, embedded = await open_database(settings, migrate=True)
    try:
        print(f"database schema at revision {await current_revision(database.engine)}")
    finally:
        await database.close()
        if embedded is not None:
            embedded.stop()


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    parser = argparse.ArgumentParser(prog="memory-server", description="Image memory MCP server.")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="serve the memory tools over MCP")
    serve.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    serve.add_argument("--host", default=DEFAULT_HOST, help="HTTP bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help="HTTP port (default 8765)")
    serve.add_argument(
        "--no-worker",
        action="store_true",
        help="do not embed in this process (run `memory-server worker` processes instead)",
    )
    serve.add_argument(
        "--processes",
        type=int,
        default=1,
        help="HTTP only: N server processes sharing the port, plus one embedding worker "
        "process unless --no-worker (default 1: one process that also embeds)",
    )
    # Internal: a child of --processes serves on the socket its parent bound.
    serve.add_argument("--listen-fd", type=int, default=None, help=argparse.SUPPRESS)
    worker = commands.add_parser("worker", help="run an embedding worker (any number at once)")
    worker.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="batches in flight (default ASSET_EMBED_WORKER_CONCURRENCY or 2)",
    )
    worker.add_argument("--batch-size", type=int, default=None, help="jobs per embedder call (16)")
    worker.add_argument(
        "--lease-seconds",
        type=float,
        default=None,
        help="how long a claimed job stays leased without a heartbeat (120)",
    )
    # Internal: a worker started by `serve --processes` stops when its parent is gone.
    worker.add_argument("--supervised", action="store_true", help=argparse.SUPPRESS)

    commands.add_parser("migrate", help="apply database migrations")

    add_admin_parser(commands)
    return parser


def _usage_error(message: str) -> int:
    print(f"memory-server: error: {message}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``memory-server``."""
    args = build_parser().parse_args(argv)

    if args.command == "serve" and args.processes != 1:
        if args.transport != "http":
            return _usage_error("--processes: only with --transport http")
        if not 1 <= args.processes <= MAX_PROCESSES:
            return _usage_error(f"--processes: must be between 1 and {MAX_PROCESSES}")
        return run_command(
            lambda settings: serve_http_processes(
                settings, APP, args.host, args.port, args.processes, with_worker=not args.no_worker
            )
        )

    async def command(settings: MemorySettings) -> None:
        if args.command == "serve" and args.transport == "stdio":
            await serve_stdio(settings, APP, with_worker=not args.no_worker)
        elif args.command == "serve":
            await serve_http(
                settings,
                APP,
                args.host,
                args.port,
                with_worker=not args.no_worker,
                listen_fd=args.listen_fd,
            )
        elif args.command == "worker":
            if args.concurrency is not None and not 1 <= args.concurrency <= 64:
                raise ConfigurationError("--concurrency: must be between 1 and 64")
            if args.batch_size is not None and not 1 <= args.batch_size <= 256:
                raise ConfigurationError("--batch-size: must be between 1 and 256")
            if args.lease_seconds is not None and not 1 <= args.lease_seconds <= 3600:
                raise ConfigurationError("--lease-seconds: must be between 1 and 3600")
            await run_worker(
                settings,
                APP,
                concurrency=args.concurrency,
                batch_size=args.batch_size,
                lease_seconds=args.lease_seconds,
                supervised=args.supervised,
            )
        elif args.command == "migrate":
            await _migrate(settings)
        else:
            await admin_command(settings, args)

    return run_command(command)


if __name__ == "__main__":
    sys.exit(main())
