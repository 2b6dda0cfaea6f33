"""``scraper-mcp-server``: the aggregate MCP server over stdio or HTTP, and its embedding worker.

The same ``serve`` and ``worker`` commands as ``memory-server`` (``memory_tools.serving``):
the server embeds what it saves in-process unless ``--no-worker``, takes ``--processes``,
``--toolsets`` (``memory``, ``memory-read``, ``scraper``; default ``memory,scraper``) and
``--read-only``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from memory_tools.serving import ServerApp
from memory_tools.serving.arguments import (
    add_serve_parser,
    add_worker_parser,
    serve_command,
    worker_command,
)
from scraper_mcp import AGGREGATE_TOOLSETS, build_aggregate_server

PROG = "scraper-mcp-server"

# The scraper tools next to the same memory tools; `--processes` starts this CLI again.
APP = ServerApp(
    name="mcp-scraper",
    build_server=build_aggregate_server,
    command=(sys.executable, "-m", "aggregate_server"),
)


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    parser = argparse.ArgumentParser(prog=PROG, description="Aggregate MCP server.")
    commands = parser.add_subparsers(dest="command", required=True)
    add_serve_parser(
        commands,
        prog=PROG,
        help="serve scraper and memory tools over MCP",
        toolsets=AGGREGATE_TOOLSETS,
        default_toolsets=["memory", "scraper"],
    )
    add_worker_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``scraper-mcp-server``."""
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return serve_command(args, APP, prog=PROG)
    return worker_command(args, APP)


if __name__ == "__main__":
    sys.exit(main())
