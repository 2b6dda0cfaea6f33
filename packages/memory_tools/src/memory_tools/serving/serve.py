"""The serve and worker commands every server app composes: stdio, HTTP, ``--processes``, worker.

An app describes itself once (:class:`ServerApp`: its name, the MCP server it builds, how to
start it again) and calls these; what is served next to ``/mcp`` (signed object and upload
routes, health), the start-up banner, the in-process worker and the stdio links are the same for
every app. The HTTP stack (fastmcp, starlette, uvicorn) loads only when a server starts, so an
app's other commands (``memory-server admin ...``) start quickly.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio

from memory_db import MemorySettings, get_logger
from memory_db.garbage_collection import settle_for_serving
from memory_tools.mcp.toolsets import MEMORY_SELECTION, ToolSelection
from memory_tools.services import MemoryServices
from memory_tools.serving.bootstrap import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    background_worker,
    bind_listening_socket,
    public_base_url,
    running,
    stdio_api_key,
    worker_config,
)
from memory_tools.serving.commands import notice, sigterm_cancels
from memory_tools.serving.framework_spans import spans_off_unless_asked
from memory_tools.serving.job_worker import job_worker

if TYPE_CHECKING:
    from memory_tools.serving.app import BuildServer

log = get_logger(__name__)


@dataclass(frozen=True)
class ServerApp:
    """What an entry point serves: the server's name, how to build it, how to run it again.

    ``name`` is the MCP server's name and the prefix of its notices (``image-memory: ...``).
    ``command`` is the argv that runs the app's own CLI, for the children of ``--processes``
    (see :mod:`memory_tools.serving.processes` for the arguments that CLI must accept); an app
    without ``--processes`` leaves it empty. ``tools``: the tools it offers (``--toolsets``,
    ``--read-only``); a read-only selection also makes its services read-only.
    """

    name: str
    build_server: BuildServer
    command: Sequence[str] = ()
    tools: ToolSelection = MEMORY_SELECTION


def offering(tools: ToolSelection) -> str:
    """What a start-up notice says of the tools: ``toolsets memory,scraper (read-only)``."""
    chosen = ",".join(toolset.name for toolset in tools.toolsets)
    return f"toolsets {chosen}" + (" (read-only: only read-only tools)" if tools.read_only else "")


def where_data_lives(settings: MemorySettings) -> str:
    """``data directory DIR (embedded PostgreSQL)``, or ``(... MEMORY_DATABASE_URL)``."""
    database = "embedded PostgreSQL" if settings.uses_embedded_database else "MEMORY_DATABASE_URL"
    return f"data directory {settings.memory_data_dir} (database: {database})"


def banner(
    settings: MemorySettings,
    name: str,
    host: str,
    port: int,
    tools: ToolSelection = MEMORY_SELECTION,
) -> str:
    """The start-up notice of an HTTP server: where it listens, its data and how to get a key."""
    shown = f"[{host}]" if ":" in host else host
    database = "embedded PostgreSQL" if settings.uses_embedded_database else "MEMORY_DATABASE_URL"
    return (
        f"{name}: MCP over streamable HTTP at http://{shown}:{port}/mcp\n"
        f"  web app: http://{shown}:{port}/ (sign in with an API key)\n"
        f"  tools: {offering(tools)}\n"
        f"  data directory: {settings.memory_data_dir}\n"
        f"  database: {database}\n"
        # No example address or "Bearer" here: in JSON mode this notice goes through the log
        # redaction, which would turn them into a digest and "[redacted]".
        "  get an API key (in another terminal, from the checkout):\n"
        "    make key OWNER=<your e-mail address>\n"
        "  or step by step:\n"
        "    .venv/bin/memory-server admin create-identity --owner <your e-mail address>\n"
        "    .venv/bin/memory-server admin create-key --owner <your e-mail address> "
        "--scopes read,write,destructive\n"
        "  then connect with that key (mk_...) in the Authorization header, scheme Bearer,\n"
        "  or sign in to the web app with it"
    )


async def serve_stdio(settings: MemorySettings, app: ServerApp, *, with_worker: bool) -> None:
    """Serve ``app`` over stdio as ``MEMORY_API_KEY``'s identity, its preview links beside it.

    Once the server is built, the process's garbage collector is tuned for serving
    (``memory_db.garbage_collection.settle_for_serving``).
    """
    from memory_tools.serving.links import stdio_services

    read_only = app.tools.read_only
    async with stdio_services(settings, stdio_api_key(settings), read_only=read_only) as (
        services,
        links,
    ):
        server = app.build_server(services, name=app.name, auth=None, tools=app.tools)
        notice(f"{app.name}: serving MCP over stdio ({offering(app.tools)})")
        # A desktop host shows only this stderr: say where the data lives (docs/runbooks).
        notice(f"{app.name}: {where_data_lives(settings)}")
        if links.listener is not None:
            notice(f"{app.name}: preview links served at {links.base_url}")
        elif links.unavailable is not None:
            notice(f"{app.name}: {links.unavailable}")
        settle_for_serving()
        spans_off_unless_asked()
        if with_worker:
            async with background_worker(services, worker_config(settings)):
                await server.run_stdio_async(show_banner=False)
        else:
            await server.run_stdio_async(show_banner=False)


async def serve_http(
    settings: MemorySettings,
    app: ServerApp,
    host: str,
    port: int,
    *,
    with_worker: bool,
    handoff_fd: int | None = None,
) -> None:
    """Serve ``app`` over streamable HTTP at ``/mcp`` with the plain routes, until shutdown.

    ``handoff_fd``: a child of ``--processes`` serves the connections its parent hands over on
    that descriptor (:mod:`memory_tools.serving.handoff`), announces itself only in the log and
    exits when the parent is gone. Once the server is built, the process's garbage collector is
    tuned for serving (``memory_db.garbage_collection.settle_for_serving``).
    """
    sock: socket.socket
    if handoff_fd is None:
        # Bind first: a taken port is reported at once, before PostgreSQL is started for
        # nothing, and the banner below is printed only once the address is ours.
        sock = bind_listening_socket(host, port)
    else:
        from memory_tools.serving.handoff import handed_connections
        from memory_tools.serving.processes import exit_when_orphaned

        sock = handed_connections(handoff_fd)
        exit_when_orphaned(os.getppid())
    try:
        base = public_base_url(settings, host, port)
        read_only = app.tools.read_only
        async with running(settings, base_url=base, read_only=read_only) as (_runtime, services):
            if with_worker:
                async with background_worker(services, worker_config(settings)):
                    await _announce_and_serve_http(settings, app, services, host, port, sock)
            else:
                quiet = handoff_fd is not None
                await _announce_and_serve_http(
                    settings, app, services, host, port, sock, quiet=quiet
                )
    finally:
        sock.close()


async def _announce_and_serve_http(
    settings: MemorySettings,
    app: ServerApp,
    services: MemoryServices,
    host: str,
    port: int,
    sock: socket.socket,
    *,
    quiet: bool = False,
) -> None:
    from memory_tools.serving.app import build_http_server, run_http
    from memory_tools.serving.body_limit import mcp_middleware
    from memory_tools.web import web_middleware

    server = build_http_server(
        services,
        name=app.name,
        build_server=app.build_server,
        tools=app.tools,
        listen_host=host,
    )
    if not quiet:  # a child of --processes says it is ready when it serves (handoff)
        notice(banner(settings, app.name, host, port, app.tools))
    middleware = [*mcp_middleware(settings), *web_middleware(services)]
    settle_for_serving()
    spans_off_unless_asked()
    await run_http(server, host, port, sockets=[sock], middleware=middleware)


def serve_http_processes(
    settings: MemorySettings,
    app: ServerApp,
    host: str,
    port: int,
    processes: int,
    *,
    with_worker: bool,
) -> int:
    """``--processes``: supervise ``processes`` HTTP children of ``app`` (and a worker)."""
    from memory_tools.serving.processes import serve_processes

    if not app.command:
        raise ValueError(f"{app.name}: no command to start --processes children with")
    return serve_processes(
        settings,
        host,
        port,
        processes,
        command=app.command,
        serve_options=app.tools.arguments(),
        with_worker=with_worker,
        announce=lambda details: notice(
            f"{banner(settings, app.name, host, port, app.tools)}\n{details}"
        ),
    )


async def run_worker(
    settings: MemorySettings,
    app: ServerApp,
    *,
    concurrency: int | None = None,
    batch_size: int | None = None,
    lease_seconds: float | None = None,
    supervised: bool = False,
    metrics_address: tuple[str, int] | None = None,
) -> None:
    """Run an embedding worker until shutdown (``supervised``: a child of ``--processes``).

    ``metrics_address``: ``(host, port)`` to serve this worker's ``/metrics`` on (a worker has
    no other HTTP server); the same access rule as the servers' applies.
    """
    if supervised:
        from memory_tools.serving.processes import exit_when_orphaned

        exit_when_orphaned(os.getppid())
    base = public_base_url(settings, DEFAULT_HOST, DEFAULT_PORT)
    if concurrency:  # the pool is sized from the worker's slots
        settings = settings.model_copy(update={"asset_embed_worker_concurrency": concurrency})
    async with sigterm_cancels(), running(settings, base_url=base) as (_runtime, services):
        config = worker_config(
            settings, concurrency, batch_size=batch_size, lease_seconds=lease_seconds
        )
        worker = job_worker(services, config)
        slots = config.concurrency
        notice(f"{app.name}: embedding worker {worker.worker_id} (concurrency {slots})")
        if metrics_address is None:
            await worker.run()
            return
        from memory_tools.serving.metrics_route import serve_metrics

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(serve_metrics, services, *metrics_address)
            await worker.run()
            tasks.cancel_scope.cancel()
