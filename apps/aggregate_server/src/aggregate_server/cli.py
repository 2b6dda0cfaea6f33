"""``scraper-mcp-server``: the aggregate MCP server over stdio or HTTP, and its embedding worker.

The same ``serve`` and ``worker`` commands as ``memory-server`` (``memory_tools.serving``):
the server embeds what it saves in-process unless ``--no-worker``, takes ``--processes``,
``--toolsets`` (``memory``, ``memory-read``, ``scraper``; default ``memory,scraper``) and
``--read-only``. It only wires: the commands are declared in ``memory_tools.serving``.
"""

from __future__ import annotations

import sys

from memory_tools.serving import ServerApp
from memory_tools.serving.arguments import server_commands
from memory_tools.serving.subcommands import CommandLine
from scraper_mcp import AGGREGATE_TOOLSETS, build_aggregate_server

PROG = "scraper-mcp-server"


def server_app() -> ServerApp:
    """The scraper tools next to the same memory tools; `--processes` starts this CLI again."""
    return ServerApp(
        name="mcp-scraper",
        build_server=build_aggregate_server,
        command=(sys.executable, "-m", "aggregate_server"),
    )


COMMANDS = server_commands(
    server_app,
    prog=PROG,
    help="serve scraper and memory tools over MCP",
    toolsets=AGGREGATE_TOOLSETS,
    default_toolsets=["memory", "scraper"],
)
"""``serve`` and ``worker``."""


COMMAND_LINE = CommandLine(PROG, "Aggregate MCP server.", COMMANDS)
build_parser = COMMAND_LINE.parser
main = COMMAND_LINE.main
"""Entry point: parse the arguments, run the chosen command, return its exit status."""

if __name__ == "__main__":
    sys.exit(main())
