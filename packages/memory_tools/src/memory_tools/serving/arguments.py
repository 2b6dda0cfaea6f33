"""The ``serve`` and ``worker`` subcommands every server app offers, parsed and run the same way.

An app adds them to its parser with :func:`add_serve_parser` and :func:`add_worker_parser`,
naming the toolsets it can serve and its default, and runs a parsed command with
:func:`serve_command` or :func:`worker_command`. ``memory-server`` and ``scraper-mcp-server``
thus take the same flags: ``--transport``, ``--host``, ``--port``, ``--no-worker``,
``--processes``, ``--toolsets``, ``--read-only``; ``worker`` with ``--concurrency``,
``--batch-size``, ``--lease-seconds``.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from memory_db import ConfigurationError, MemorySettings
from memory_tools.mcp.toolsets import ToolSelection, Toolset, select
from memory_tools.serving.commands import run_command
from memory_tools.serving.defaults import DEFAULT_HOST, DEFAULT_PORT, MAX_PROCESSES

if TYPE_CHECKING:
    from memory_tools.serving.serve import ServerApp

Subparsers = Any  # argparse's _SubParsersAction, which it does not export


def _toolsets_type(available: Sequence[Toolset], prog: str) -> Callable[[str], tuple[Toolset, ...]]:
    def parse(text: str) -> tuple[Toolset, ...]:
        try:
            return select(text.split(","), available, read_only=False, server=prog).toolsets
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def add_serve_parser(
    commands: Subparsers,
    *,
    prog: str,
    help: str,
    toolsets: Sequence[Toolset],
    default_toolsets: Sequence[str],
) -> argparse.ArgumentParser:
    """The ``serve`` subcommand; ``toolsets`` are those this app can offer."""
    serve: argparse.ArgumentParser = commands.add_parser("serve", help=help)
    serve.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    serve.add_argument("--host", default=DEFAULT_HOST, help="HTTP bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help="HTTP port (default 8765)")
    serve.add_argument(
        "--no-worker",
        action="store_true",
        help="do not embed in this process (run `worker` processes instead)",
    )
    serve.add_argument(
        "--processes",
        type=int,
        default=1,
        help="HTTP only: N server processes sharing the port, plus one embedding worker "
        "process unless --no-worker (default 1: one process that also embeds)",
    )
    names = ", ".join(f"{t.name} ({t.description})" for t in toolsets)
    serve.add_argument(
        "--toolsets",
        type=_toolsets_type(toolsets, prog),
        default=_toolsets_type(toolsets, prog)(",".join(default_toolsets)),
        metavar="NAME[,NAME...]",
        help=f"the tools to offer, a comma-separated list of: {names} "
        f"(default {','.join(default_toolsets)})",
    )
    serve.add_argument(
        "--read-only",
        action="store_true",
        help="offer only the read-only tools of those toolsets, and refuse direct uploads",
    )
    # Internal: a child of --processes serves on the socket its parent bound.
    serve.add_argument("--listen-fd", type=int, default=None, help=argparse.SUPPRESS)
    return serve


def add_worker_parser(commands: Subparsers) -> argparse.ArgumentParser:
    """The ``worker`` subcommand: an embedding worker process (any number at once)."""
    worker: argparse.ArgumentParser = commands.add_parser(
        "worker", help="run an embedding worker (any number at once)"
    )
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
    worker.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve this worker's Prometheus metrics at /metrics on this port (default: none)",
    )
    worker.add_argument(
        "--metrics-host",
        default=DEFAULT_HOST,
        help="address for --metrics-port (default 127.0.0.1; any other needs an admin key)",
    )
    # Internal: a worker started by `serve --processes` stops when its parent is gone.
    worker.add_argument("--supervised", action="store_true", help=argparse.SUPPRESS)
    return worker


def _usage_error(prog: str, message: str) -> int:
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


def serve_command(args: argparse.Namespace, app: ServerApp, *, prog: str) -> int:
    """Run ``serve`` as :func:`add_serve_parser` parsed it; the exit status."""
    # The serving runtime loads here, not with the parser: other commands do not need it.
    from memory_tools.serving.serve import serve_http, serve_http_processes, serve_stdio

    tools = ToolSelection(args.toolsets, read_only=args.read_only)
    if not tools.offered():
        chosen = ",".join(toolset.name for toolset in tools.toolsets)
        if tools.read_only:
            return _usage_error(prog, f"--read-only: no read-only tool in --toolsets {chosen}")
        return _usage_error(prog, f"--toolsets {chosen}: no tools to offer")
    app = dataclasses.replace(app, tools=tools)
    with_worker = not args.no_worker
    if args.processes != 1:
        if args.transport != "http":
            return _usage_error(prog, "--processes: only with --transport http")
        if not 1 <= args.processes <= MAX_PROCESSES:
            return _usage_error(prog, f"--processes: must be between 1 and {MAX_PROCESSES}")
        return run_command(
            lambda settings: serve_http_processes(
                settings, app, args.host, args.port, args.processes, with_worker=with_worker
            )
        )

    async def command(settings: MemorySettings) -> None:
        if args.transport == "stdio":
            await serve_stdio(settings, app, with_worker=with_worker)
        else:
            await serve_http(
                settings,
                app,
                args.host,
                args.port,
                with_worker=with_worker,
                listen_fd=args.listen_fd,
            )

    return run_command(command)


def worker_command(args: argparse.Namespace, app: ServerApp) -> int:
    """Run ``worker`` as :func:`add_worker_parser` parsed it; the exit status."""
    from memory_tools.serving.serve import run_worker

    async def command(settings: MemorySettings) -> None:
        if args.concurrency is not None and not 1 <= args.concurrency <= 64:
            raise ConfigurationError("--concurrency: must be between 1 and 64")
        if args.batch_size is not None and not 1 <= args.batch_size <= 256:
            raise ConfigurationError("--batch-size: must be between 1 and 256")
        if args.lease_seconds is not None and not 1 <= args.lease_seconds <= 3600:
            raise ConfigurationError("--lease-seconds: must be between 1 and 3600")
        if args.metrics_port is not None and not 1 <= args.metrics_port <= 65535:
            raise ConfigurationError("--metrics-port: must be between 1 and 65535")
        await run_worker(
            settings,
            app,
            concurrency=args.concurrency,
            batch_size=args.batch_size,
            lease_seconds=args.lease_seconds,
            supervised=args.supervised,
            metrics_address=(
                None if args.metrics_port is None else (args.metrics_host, args.metrics_port)
            ),
        )

    return run_command(command)
