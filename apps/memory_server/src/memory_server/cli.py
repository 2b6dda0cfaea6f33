"""``memory-server``: serve MCP (stdio or HTTP), migrate, and administer identities and keys."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from memory_db import (
    ConfigurationError,
    MemorySettings,
    configure_logging,
    get_logger,
    load_settings,
    open_database,
)
from memory_db.migrate import current_revision
from memory_server.bootstrap import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    background_worker,
    bind_listening_socket,
    public_base_url,
    running,
    stdio_api_key,
    worker_config,
)
from memory_server.processes import MAX_PROCESSES
from memory_tools import ConflictFailure, MemoryServices, ToolFailure, admin


class Terminated(BaseException):
    """SIGTERM arrived: unwind so the database pool and embedded server close cleanly.

    A ``BaseException`` like ``KeyboardInterrupt``: the worker's loops survive ordinary errors
    with ``except Exception``, and must not survive this.
    """


def _raise_terminated(_signum: int, _frame: object) -> None:
    raise Terminated


def install_sigterm_handler() -> None:
    """Turn SIGTERM into ``Terminated`` so shutdown unwinds through every ``finally``.

    uvicorn restores this handler after its graceful shutdown and re-raises the signal into it;
    raising (instead of dying) lets the runtime close and the embedded server stop.
    """
    signal.signal(signal.SIGTERM, _raise_terminated)


log = get_logger(__name__)
# Set once logging is configured: with the JSON renderer, notices are log events too, so stderr
# carries JSON only.
_notices_as_json = False


def _err(message: str) -> None:
    if not _notices_as_json:
        print(message, file=sys.stderr, flush=True)
    elif message.startswith("error: "):
        log.error("command_failed", message=message.removeprefix("error: "))
    else:
        log.info("command_notice", message=message)


async def _serve_stdio(settings: MemorySettings, *, with_worker: bool) -> None:
    from memory_server.links import stdio_services

    async with stdio_services(settings, stdio_api_key(settings)) as (services, links):
        from memory_tools.mcp import build_memory_server

        server = build_memory_server(services)
        _err("image-memory: serving MCP over stdio")
        if links.listener is not None:
            _err(f"image-memory: preview links served at {links.base_url}")
        elif links.unavailable is not None:
            _err(f"image-memory: {links.unavailable}")
        if with_worker:
            async with background_worker(services, worker_config(settings)):
                await server.run_stdio_async(show_banner=False)
        else:
            await server.run_stdio_async(show_banner=False)


async def _run_worker(settings: MemorySettings, args: argparse.Namespace) -> None:
    if args.supervised:
        from memory_server.processes import exit_when_orphaned

        exit_when_orphaned(os.getppid())
    base = public_base_url(settings, DEFAULT_HOST, DEFAULT_PORT)
    from memory_tools.worker import EmbeddingWorker

    if args.concurrency:  # the pool is sized from the worker's slots
        settings = settings.model_copy(update={"asset_embed_worker_concurrency": args.concurrency})
    async with running(settings, base_url=base) as (_runtime, services):
        config = worker_config(
            settings,
            args.concurrency,
            batch_size=args.batch_size,
            lease_seconds=args.lease_seconds,
        )
        worker = EmbeddingWorker(services, config)
        _err(
            f"image-memory: embedding worker {worker.worker_id} (concurrency {config.concurrency})"
        )
        await worker.run()


async def _serve_http(
    settings: MemorySettings,
    host: str,
    port: int,
    *,
    with_worker: bool,
    listen_fd: int | None = None,
) -> None:
    if listen_fd is None:
        # Bind first: a taken port is reported at once, before PostgreSQL is started for
        # nothing, and the banner below is printed only once the address is ours.
        sock = bind_listening_socket(host, port)
    else:
        # A child of `--processes`: the parent bound the socket and is watched for.
        from memory_server.processes import exit_when_orphaned

        sock = socket.socket(fileno=listen_fd)
        exit_when_orphaned(os.getppid())
    try:
        base = public_base_url(settings, host, port)
        async with running(settings, base_url=base) as (_runtime, services):
            if with_worker:
                async with background_worker(services, worker_config(settings)):
                    await _announce_and_serve_http(settings, services, host, port, sock)
            else:
                quiet = listen_fd is not None
                await _announce_and_serve_http(settings, services, host, port, sock, quiet=quiet)
    finally:
        sock.close()


def _serve_http_processes(
    settings: MemorySettings, host: str, port: int, processes: int, *, with_worker: bool
) -> int:
    from memory_server.processes import serve_processes

    return serve_processes(
        settings,
        host,
        port,
        processes,
        with_worker=with_worker,
        announce=lambda details: _err(f"{_banner(settings, host, port)}\n{details}"),
    )


def _banner(settings: MemorySettings, host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    database = "embedded PostgreSQL" if settings.uses_embedded_database else "MEMORY_DATABASE_URL"
    return (
        f"image-memory: MCP over streamable HTTP at http://{shown}:{port}/mcp\n"
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
        "  then connect with that key (mk_...) in the Authorization header, scheme Bearer"
    )


async def _announce_and_serve_http(
    settings: MemorySettings,
    services: MemoryServices,
    host: str,
    port: int,
    sock: socket.socket,
    *,
    quiet: bool = False,
) -> None:
    from memory_server.app import build_http_server, serve_http
    from memory_server.body_limit import mcp_middleware

    server = build_http_server(services)
    if quiet:
        log.info("server_process_ready", pid=os.getpid())
    else:
        _err(_banner(settings, host, port))
    await serve_http(server, host, port, sockets=[sock], middleware=mcp_middleware(settings))


async def _migrate(settings: MemorySettings) -> None:
    database, embedded = await open_database(settings, migrate=True)
    try:
        print(f"database schema at revision {await current_revision(database.engine)}")
    finally:
        await database.close()
        if embedded is not None:
            embedded.stop()


async def _with_database(
    settings: MemorySettings, action: Callable[[Any], Awaitable[None]]
) -> None:
    database, embedded = await open_database(settings, migrate=False)
    try:
        await action(database)
    finally:
        await database.close()
        if embedded is not None:
            embedded.stop()


def _admin(settings: MemorySettings, args: argparse.Namespace) -> Callable[[Any], Awaitable[None]]:
    async def create_identity(database: Any) -> None:
        quota = (
            args.quota_bytes
            if args.quota_bytes is not None
            else settings.memory_default_quota_bytes
        )
        try:
            record = await admin.create_identity(database, args.owner, quota)
        except ConflictFailure:
            if not args.exist_ok:
                raise
            print(f"identity {args.owner.strip().lower()} already exists")
            return
        print(
            f"identity {record.owner_identity} created with vault Library "
            f"(quota {record.quota_bytes} bytes)"
        )

    async def create_key(database: Any) -> None:
        scopes = [s for s in args.scopes.split(",") if s.strip()]
        new = await admin.create_key(database, args.owner, scopes, args.label)
        print(f"key id: {new.record.id}")
        print(f"scopes: {','.join(new.record.scopes)}")
        print("the key is shown once, on the next line; store it safely:")
        print(new.secret)

    async def create_vault(database: Any) -> None:
        record = await admin.create_vault(database, args.owner, args.name)
        print(f"vault {record.handle} created for {record.owner_identity}")

    async def grant(database: Any) -> None:
        record = await admin.grant(database, args.vault_owner, args.vault, args.to, args.permission)
        grantee, vault = record.grantee_identity, record.physical_vault
        print(f"{grantee} now has {record.permission} access to {vault}")

    async def revoke_key(database: Any) -> None:
        record = await admin.revoke_key(database, args.key_id)
        print(f"key {record.id} revoked")

    async def list_keys(database: Any) -> None:
        async with database.unit_of_work() as uow:
            for key in await uow.api_keys.list_for(args.owner):
                state = "revoked" if key.revoked_at else "active"
                used = key.last_used_at.isoformat() if key.last_used_at else "never"
                scopes = ",".join(key.scopes)
                print(f"{key.id}\t{state}\t{scopes}\tlast used {used}\t{key.label or ''}")

    return {
        "create-identity": create_identity,
        "create-key": create_key,
        "create-vault": create_vault,
        "grant": grant,
        "revoke-key": revoke_key,
        "list-keys": list_keys,
    }[args.admin_command]


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

    admin_parser = commands.add_parser("admin", help="identities, API keys, vaults and grants")
    admin_commands = admin_parser.add_subparsers(dest="admin_command", required=True)
    ci = admin_commands.add_parser("create-identity", help="create an owner identity")
    ci.add_argument("--owner", required=True, help="owner e-mail address")
    ci.add_argument("--quota-bytes", type=int, default=None, help="storage quota in bytes")
    ci.add_argument("--exist-ok", action="store_true", help="succeed if the identity exists")
    ck = admin_commands.add_parser("create-key", help="create an API key (printed once)")
    ck.add_argument("--owner", required=True)
    ck.add_argument(
        "--scopes", default="read,write", help="comma-separated: read,write,destructive,admin"
    )
    ck.add_argument("--label", default=None)
    cv = admin_commands.add_parser("create-vault", help="create another vault for an owner")
    cv.add_argument("--owner", required=True)
    cv.add_argument("--name", required=True)
    gr = admin_commands.add_parser("grant", help="share a vault with another identity")
    gr.add_argument("--vault-owner", required=True)
    gr.add_argument("--vault", required=True)
    gr.add_argument("--to", required=True)
    gr.add_argument("--permission", required=True, choices=["read", "write", "admin"])
    rk = admin_commands.add_parser("revoke-key", help="revoke an API key by id")
    rk.add_argument("key_id")
    lk = admin_commands.add_parser("list-keys", help="list an owner's keys (never the secrets)")
    lk.add_argument("--owner", required=True)
    return parser


def run_command(command: Callable[[MemorySettings], Coroutine[Any, Any, None] | int]) -> int:
    """Load settings, configure logging, run ``command``; map failures to exit codes.

    0 success (and SIGTERM), 1 a refused operation, 2 invalid configuration, 130 Ctrl+C.
    A ``command`` that runs no event loop (the ``--processes`` parent) returns its status.
    """
    install_sigterm_handler()
    try:
        settings = load_settings()
        global _notices_as_json
        _notices_as_json = configure_logging(settings.memory_log_format, settings.memory_log_level)
        outcome = command(settings)
        if isinstance(outcome, int):
            return outcome
        asyncio.run(outcome)
    except ConfigurationError as exc:
        _err(f"error: {exc}")
        return 2
    except ToolFailure as failure:
        _err(f"error: {failure}")
        return 1
    except Terminated:
        return 0
    except KeyboardInterrupt:
        return 130
    except BaseExceptionGroup as group:
        # The in-process worker runs in a task group, which wraps what ends the server.
        if group.subgroup(Terminated) is not None and group.subgroup(_unexpected) is None:
            return 0
        if group.subgroup(KeyboardInterrupt) is not None and group.subgroup(_unexpected) is None:
            return 130
        raise
    return 0


def _unexpected(exc: BaseException) -> bool:
    # subgroup() also asks about the groups themselves: judge only the leaves.
    if isinstance(exc, BaseExceptionGroup):
        return False
    return not isinstance(exc, Terminated | KeyboardInterrupt | asyncio.CancelledError)


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
            lambda settings: _serve_http_processes(
                settings, args.host, args.port, args.processes, with_worker=not args.no_worker
            )
        )

    async def command(settings: MemorySettings) -> None:
        if args.command == "serve" and args.transport == "stdio":
            await _serve_stdio(settings, with_worker=not args.no_worker)
        elif args.command == "serve":
            await _serve_http(
                settings,
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
            await _run_worker(settings, args)
        elif args.command == "migrate":
            await _migrate(settings)
        else:
            await _with_database(settings, _admin(settings, args))

    return run_command(command)


if __name__ == "__main__":
    sys.exit(main())
