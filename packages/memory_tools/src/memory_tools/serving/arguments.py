"""The ``serve`` and ``worker`` subcommands every server app offers, parsed and run the same way.

An app lists them among its commands with :func:`server_commands`, naming the toolsets it can
serve and its default; they are declared and run as every other command is
(:mod:`memory_tools.serving.subcommands`). ``memory-server`` and ``scraper-mcp-server``
thus take the same flags: ``--transport``, ``--host``, ``--port``, ``--no-worker``,
``--processes``, ``--toolsets``, ``--read-only``; ``worker`` with ``--concurrency``,
``--batch-size``, ``--lease-seconds``.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from memory_db import ConfigurationError, MemorySettings
from memory_tools.mcp.toolsets import ToolSelection, Toolset, select
from memory_tools.serving.defaults import DEFAULT_HOST, DEFAULT_PORT, MAX_PROCESSES
from memory_tools.serving.subcommands import SETTINGS, Outcome, Subcommand

if TYPE_CHECKING:
    from memory_tools.serving.serve import ServerApp


def _toolsets_type(available: Sequence[Toolset], prog: str) -> Callable[[str], tuple[Toolset, ...]]:
    def parse(text: str) -> tuple[Toolset, ...]:
        try:
            return select(text.split(","), available, read_only=False, server=prog).toolsets
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def _serve_arguments(
    prog: str, toolsets: Sequence[Toolset], default_toolsets: Sequence[str]
) -> Callable[[argparse.ArgumentParser], None]:
    """The options of ``serve``; ``toolsets`` are those this app can offer."""

    def add(serve: argparse.ArgumentParser) -> None:
        serve.add_argument("--transport", choices=["stdio", "http"], default="stdio")
        serve.add_argument(
            "--host", default=DEFAULT_HOST, help="HTTP bind address (default 127.0.0.1)"
        )
        serve.add_argument(
            "--port", type=int, default=DEFAULT_PORT, help="HTTP port (default 8765)"
        )
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
        # Internal: a child of --processes serves the connections its parent hands over.
        serve.add_argument("--handoff-fd", type=int, default=None, help=argparse.SUPPRESS)

    return add


def _worker_arguments(worker: argparse.ArgumentParser) -> None:
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


def server_commands(
    app: Callable[[], ServerApp],
    *,
    prog: str,
    help: str,
    toolsets: Sequence[Toolset],
    default_toolsets: Sequence[str],
) -> tuple[Subcommand[MemorySettings], Subcommand[MemorySettings]]:
    """``serve`` (its ``help``, offering ``toolsets``) and ``worker``, running ``app()``.

    ``app`` is called when a server or worker starts: building it may load the serving
    runtime, which the app's other commands do not need.
    """
    serve = Subcommand(
        name="serve",
        help=help,
        opens=SETTINGS,
        arguments=_serve_arguments(prog, toolsets, default_toolsets),
        usage=_serve_usage,
        run=lambda settings, args: _serve(settings, args, app()),
        operator=False,
    )
    worker = Subcommand(
        name="worker",
        help="run an embedding worker (any number at once)",
        opens=SETTINGS,
        arguments=_worker_arguments,
        run=lambda settings, args: _worker(settings, args, app()),
        operator=False,
    )
    return serve, worker


def _serve_usage(args: argparse.Namespace) -> str | None:
    """What is wrong with ``serve``'s options together, before anything starts."""
    tools = ToolSelection(args.toolsets, read_only=args.read_only)
    if not tools.offered():
        chosen = ",".join(toolset.name for toolset in tools.toolsets)
        if tools.read_only:
            return f"--read-only: no read-only tool in --toolsets {chosen}"
        return f"--toolsets {chosen}: no tools to offer"
    if args.processes != 1:
        if args.transport != "http":
            return "--processes: only with --transport http"
        if not 1 <= args.processes <= MAX_PROCESSES:
            return f"--processes: must be between 1 and {MAX_PROCESSES}"
    return None


def _serve(settings: MemorySettings, args: argparse.Namespace, app: ServerApp) -> Outcome:
    # The serving runtime loads here, not with the parser: other commands do not need it.
    from memory_tools.serving.serve import serve_http, serve_http_processes, serve_stdio

    app = dataclasses.replace(app, tools=ToolSelection(args.toolsets, read_only=args.read_only))
    with_worker = not args.no_worker
    if args.processes != 1:
        return serve_http_processes(
            settings, app, args.host, args.port, args.processes, with_worker=with_worker
        )
    if args.transport == "stdio":
        return serve_stdio(settings, app, with_worker=with_worker)
    return serve_http(
        settings, app, args.host, args.port, with_worker=with_worker, handoff_fd=args.handoff_fd
    )


async def _worker(settings: MemorySettings, args: argparse.Namespace, app: ServerApp) -> None:
    from memory_tools.serving.serve import run_worker

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
