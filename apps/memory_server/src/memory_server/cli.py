"""``memory-server``: serve MCP (stdio or HTTP), migrate, reconcile, and administer identities.

An operator command (``admin``, ``migrate``, ``backup`` ...) run against a running server's
database spends most of its time starting Python: importing what it runs. So the command
modules import their heavy parts (the serving runtime, the worker, the embedders, alembic)
only when their command runs; ``apps/memory_server/tests/test_startup.py`` checks what an
``admin`` command imports.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from memory_db import MemorySettings
from memory_tools.mcp.toolsets import MEMORY_TOOLSETS, ToolSelection
from memory_tools.serving import run_command
from memory_tools.serving.admin_commands import add_admin_parser, admin_command
from memory_tools.serving.arguments import (
    add_serve_parser,
    add_worker_parser,
    serve_command,
    worker_command,
)
from memory_tools.serving.models_commands import add_models_parser, models_command
from memory_tools.serving.operator_commands import (
    OPERATOR_COMMANDS,
    add_operator_parsers,
    operator_command,
)
from memory_tools.serving.reconcile_command import add_reconcile_parser, reconcile_command
from memory_tools.serving.reindex_commands import add_reindex_parsers, reindex_command

if TYPE_CHECKING:
    from fastmcp import FastMCP
    from fastmcp.server.auth import AuthProvider

    from memory_tools import MemoryServices
    from memory_tools.serving import ServerApp


def _memory_server(
    services: MemoryServices, *, name: str, auth: AuthProvider | None, tools: ToolSelection
) -> FastMCP:
    # fastmcp loads only when a server starts, so `admin` commands start quickly.
    from memory_tools.mcp import build_memory_server

    return build_memory_server(services, name=name, auth=auth, tools=tools)


def server_app() -> ServerApp:
    """What `serve` and `worker` run: the memory tools alone.

    `--processes` starts this CLI again. Built when a server starts: it loads the serving
    runtime, which the operator commands do not need.
    """
    from memory_tools.serving import ServerApp

    return ServerApp(
        name="image-memory",
        build_server=_memory_server,
        command=(sys.executable, "-m", "memory_server"),
    )


async def _migrate(settings: MemorySettings) -> None:
    from memory_db import open_database
    from memory_db.migrate import current_revision

    database, embedded = await open_database(settings, migrate=True)
    try:
        print(f"database schema at revision {await current_revision(database.engine)}")
    finally:
        await database.close()
        if embedded is not None:
            embedded.stop()


PROG = "memory-server"


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    parser = argparse.ArgumentParser(prog=PROG, description="Image memory MCP server.")
    commands = parser.add_subparsers(dest="command", required=True)
    add_serve_parser(
        commands,
        prog=PROG,
        help="serve the memory tools over MCP",
        toolsets=MEMORY_TOOLSETS,
        default_toolsets=["memory"],
    )
    add_worker_parser(commands)
    commands.add_parser("migrate", help="apply database migrations")
    add_admin_parser(commands)
    add_reindex_parsers(commands)
    add_models_parser(commands)
    add_reconcile_parser(commands)
    add_operator_parsers(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``memory-server``."""
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return serve_command(args, server_app(), prog=PROG)
    if args.command == "worker":
        return worker_command(args, server_app())

    async def command(settings: MemorySettings) -> None:
        if args.command == "migrate":
            await _migrate(settings)
        elif args.command in ("reindex", "drop-index"):
            await reindex_command(settings, args)
        elif args.command == "models":
            await models_command(settings, args)
        elif args.command == "reconcile":
            await reconcile_command(settings, args)
        elif args.command in OPERATOR_COMMANDS:
            await operator_command(settings, args)
        else:
            await admin_command(settings, args)

    return run_command(command, operator=True)


if __name__ == "__main__":
    sys.exit(main())
