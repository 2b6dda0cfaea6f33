"""``memory-server``: serve MCP (stdio or HTTP), migrate, reconcile, administer, connect clients.

It only wires: every command is declared in ``memory_tools.serving`` (its arguments, what it
opens, its handler) and listed here; :func:`main` parses and runs the chosen one.

An operator command (``admin``, ``migrate``, ``backup`` ...) run against a running server's
database spends most of its time starting Python: importing what it runs. So the command
modules import their heavy parts (the serving runtime, the worker, the embedders, alembic)
only when their command runs; ``apps/memory_server/tests/test_startup.py`` checks what an
``admin`` command imports.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from memory_tools.mcp.toolsets import MEMORY_TOOLSETS, ToolSelection
from memory_tools.serving.admin_commands import ADMIN
from memory_tools.serving.arguments import server_commands
from memory_tools.serving.connect_command import connect_command
from memory_tools.serving.models_commands import MODELS
from memory_tools.serving.operator_commands import MIGRATE, OPERATOR_COMMANDS
from memory_tools.serving.reconcile_command import RECONCILE
from memory_tools.serving.reindex_commands import REINDEX_COMMANDS
from memory_tools.serving.subcommands import CommandLine

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


PROG = "memory-server"

COMMANDS = (
    *server_commands(
        server_app,
        prog=PROG,
        help="serve the memory tools over MCP",
        toolsets=MEMORY_TOOLSETS,
        default_toolsets=["memory"],
    ),
    MIGRATE,
    ADMIN,
    connect_command(prog=PROG, module="memory_server"),
    *REINDEX_COMMANDS,
    MODELS,
    RECONCILE,
    *OPERATOR_COMMANDS,
)
"""Every command, in the order of ``--help``."""


COMMAND_LINE = CommandLine(PROG, "Image memory MCP server.", COMMANDS)
build_parser = COMMAND_LINE.parser
main = COMMAND_LINE.main
"""Entry point: parse the arguments, run the chosen command, return its exit status."""

if __name__ == "__main__":
    sys.exit(main())
