"""``memory-server connect CLIENT --owner EMAIL``: a key for one MCP client, and its configuration.

It creates a key for the client (``operations.admin.create_key``, the same as ``admin
create-key``) labelled ``CLIENT@HOST`` (``CLIENT@HOST/NAME`` for a server name other than the
default), with the scopes ``read,write`` (``--read-only``: ``read``), then prints the client's
configuration: the command line that adds it where the client has one, and the file entry
(:mod:`memory_tools.serving.client_configs`). ``--write`` merges the entry into the client's file
instead (:mod:`memory_tools.serving.config_files`): other servers kept, a backup first,
atomically; a file that cannot be merged into is refused before any key is created.

Every run makes a new key: keys are stored hashed, so an earlier one cannot be shown again. The
output names the owner's earlier keys with the same label, which still work, and
``--revoke-previous`` revokes them once the new configuration is in place; a key whose
configuration could not be written is revoked at once, so no run leaves a key nobody holds.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from memory_db import ApiKeyRecord, MemorySettings
from memory_tools.operations import admin
from memory_tools.serving.client_configs import (
    CLIENTS,
    DEFAULT_SERVER_NAME,
    SERVER_NAME,
    TRANSPORTS,
    ClientSetup,
    Connection,
    Places,
    Scope,
    Transport,
    client_setup,
    display_path,
    stdio_command_for,
    unsupported,
)
from memory_tools.serving.config_files import merged_text, read_config, write_config
from memory_tools.serving.defaults import DEFAULT_HOST, DEFAULT_PORT
from memory_tools.serving.subcommands import DATABASE, OpenedDatabase, Subcommand

LABEL_LENGTH = 120  # api_keys.label's bound
# A placeholder while checking a file before the key exists: never written anywhere.
_NO_KEY_YET = "mk_not_created_yet"


def connect_command(*, prog: str, module: str) -> Subcommand[OpenedDatabase]:
    """The ``connect`` command of the app ``prog`` (run as ``python -m module`` too).

    ``prog`` and ``module`` name the stdio command a client is told to start.
    """

    def stdio_command() -> tuple[str, ...]:
        return stdio_command_for(Path(sys.executable), module, prog)

    async def run(opened: OpenedDatabase, args: argparse.Namespace) -> None:
        await _connect(opened, args, stdio_command(), prog)

    return Subcommand(
        name="connect",
        help="create a key for an MCP client and print (or --write) its configuration",
        opens=DATABASE,
        run=run,
        arguments=_arguments,
        usage=_usage,
        check=_check_file(stdio_command),
    )


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("client", choices=CLIENTS, help="the MCP client to configure")
    parser.add_argument("--owner", required=True, help="the identity the key acts as (e-mail)")
    parser.add_argument(
        "--read-only",
        action="store_true",
        help="a key with the scope read only (default read,write)",
    )
    parser.add_argument(
        "--write",
        action="store_true",
        help="merge the entry into the client's file (a backup is written first) "
        "instead of printing it",
    )
    parser.add_argument(
        "--path", type=Path, default=None, help="the client's file, where it is not the default"
    )
    parser.add_argument(
        "--scope",
        choices=("user", "project"),
        default="user",
        help="the user's file (default) or the current project's (claude-code, cursor, "
        "vscode, codex)",
    )
    parser.add_argument(
        "--transport",
        choices=("http", "stdio"),
        default=None,
        help="how the client reaches the server: http (the default where the client has it) "
        "or stdio (the client starts the server itself)",
    )
    parser.add_argument(
        "--url",
        default=None,
        help="the server's address, e.g. https://memory.example.com (default "
        f"MEMORY_PUBLIC_BASE_URL, else http://{DEFAULT_HOST}:{DEFAULT_PORT}); /mcp is added",
    )
    parser.add_argument(
        "--name",
        default=DEFAULT_SERVER_NAME,
        help=f"the server's name in the client (default {DEFAULT_SERVER_NAME})",
    )
    parser.add_argument(
        "--revoke-previous",
        action="store_true",
        help="revoke the owner's earlier keys with this client's label",
    )


def _transport(args: argparse.Namespace) -> Transport:
    return "stdio" if (args.transport or TRANSPORTS[args.client][0]) == "stdio" else "http"


def _scope(args: argparse.Namespace) -> Scope:
    return "project" if args.scope == "project" else "user"


def _usage(args: argparse.Namespace) -> str | None:
    if not SERVER_NAME.fullmatch(args.name):
        return "--name: 1 to 64 letters, digits, '-' or '_'"
    if args.url is not None:
        problem = _url_problem(args.url)
        if problem is not None:
            return f"--url: {problem}"
    if args.client == "generic" and (args.write or args.path is not None):
        return "generic has no configuration file: it prints the facts any client needs"
    if args.path is not None and not args.write:
        return "--path names the file --write merges into; add --write"
    return unsupported(args.client, _transport(args), _scope(args))


def _url_problem(url: str) -> str | None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "an http(s) URL with a host, e.g. https://memory.example.com"
    if parts.username or parts.password:
        return "must not contain credentials (the key goes in a header)"
    if parts.query or parts.fragment:
        return "must not have a query or a fragment"
    return None


def mcp_endpoint(base_url: str) -> str:
    """The MCP endpoint of the server at ``base_url``: ``/mcp`` under it (kept if it is there)."""
    parts = urlsplit(base_url)
    path = parts.path.rstrip("/")
    if not path.endswith("/mcp"):
        path = f"{path}/mcp"
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def _places() -> Places:
    return Places(home=Path.home(), project=Path.cwd(), platform=sys.platform, environ=os.environ)


def _connection(
    args: argparse.Namespace, key: str, url: str, stdio: tuple[str, ...], env: dict[str, str]
) -> Connection:
    return Connection(
        name=args.name,
        url=url,
        key=key,
        stdio_command=stdio,
        stdio_env=env,
        transport=_transport(args),
        scope=_scope(args),
    )


def _check_file(
    stdio_command: Callable[[], tuple[str, ...]],
) -> Callable[[argparse.Namespace], None]:
    """Refuse a file ``--write`` cannot merge into before anything (a key) is created."""

    def check(args: argparse.Namespace) -> None:
        if not args.write:
            return
        setup = client_setup(
            args.client,
            _connection(args, _NO_KEY_YET, "http://x/mcp", stdio_command(), {}),
            _places(),
        )
        merged_text(setup, read_config(setup, args.path or _default_path(setup)))

    return check


def _default_path(setup: ClientSetup) -> Path:
    if setup.path is None:  # generic: refused by the usage check already
        raise ValueError(f"{setup.client} has no configuration file")
    return setup.path


def _stdio_env(settings: MemorySettings) -> dict[str, str]:
    """What a stdio server started by the client needs to open this command's database."""
    env = {"MEMORY_DATA_DIR": str(settings.memory_data_dir.resolve())}
    if settings.memory_database_url is not None:
        env["MEMORY_DATABASE_URL"] = settings.memory_database_url.get_secret_value()
    return env


def key_label(client: str, name: str, host: str | None = None) -> str:
    """``CLIENT@HOST`` (``CLIENT@HOST/NAME`` for another server name), at most 120 characters."""
    suffix = "" if name == DEFAULT_SERVER_NAME else f"/{name}"
    host = (host or socket.gethostname() or "localhost")[: LABEL_LENGTH - len(client) - 66]
    return f"{client}@{host}{suffix}"


async def _connect(
    opened: OpenedDatabase, args: argparse.Namespace, stdio: tuple[str, ...], prog: str
) -> None:
    settings = opened.settings
    base_url = (
        args.url or settings.memory_public_base_url or f"http://{DEFAULT_HOST}:{DEFAULT_PORT}"
    )
    label = key_label(args.client, args.name)
    scopes = ["read"] if args.read_only else ["read", "write"]
    earlier = [
        key
        for key in await admin.list_keys(opened.database, args.owner, label=label)
        if key.revoked_at is None
    ]
    new = await admin.create_key(opened.database, args.owner, scopes, label)
    places = _places()
    connection = _connection(args, new.secret, mcp_endpoint(base_url), stdio, _stdio_env(settings))
    setup = client_setup(args.client, connection, places)
    holds_secret = setup.holds_secret or (
        connection.transport == "stdio" and "MEMORY_DATABASE_URL" in connection.stdio_env
    )
    print(
        f"key {new.record.id} created for {new.record.owner_identity}: label {label}, "
        f"scopes {','.join(new.record.scopes)}"
    )
    if args.write:
        try:
            existing = read_config(setup, args.path or _default_path(setup))
            written = write_config(
                existing, merged_text(setup, existing), holds_secret=holds_secret
            )
        except Exception:
            # Nobody holds the new key: revoke it rather than leave it working unseen.
            await admin.revoke_key(opened.database, new.record.id)
            print(f"key {new.record.id} revoked: its configuration was not written")
            raise
        shown = display_path(written.path, places)
        print(f"wrote {shown}: server {args.name!r} set, every other entry kept")
        if written.backup is not None:
            print(f"backup of the previous file: {display_path(written.backup, places)}")
        if holds_secret:
            print(f"the key is in {shown} (readable by you only) and is not shown here")
    else:
        _print_configuration(setup, places)
    _print_variables(setup)
    if connection.transport == "http":
        _warn_cleartext(connection.url)
    for note in setup.notes:
        print(note)
    if args.revoke_previous:
        for key in earlier:
            await admin.revoke_key(opened.database, key.id)
        if earlier:
            print(f"revoked the earlier keys labelled {label}: {_ids(earlier)}")
    elif earlier:
        print(
            f"earlier keys labelled {label} still work: {_ids(earlier)}; revoke them with "
            f"`{prog} admin revoke-key ID`, or run this again with --revoke-previous"
        )


def _print_configuration(setup: ClientSetup, places: Places) -> None:
    if not setup.variables and setup.client != "vscode":
        print("the key is shown once, in the configuration below; keep it there or safely")
    command = setup.command_line()
    if command is not None:
        print("\nadd it with this command:\n")
        print(f"  {command}")
    if setup.path is not None:
        where = display_path(setup.path, places)
        lead = "or put" if command is not None else "put"
        print(f"\n{lead} this in {where} (merged with what is there; --write does it):\n")
        print(setup.snippet())


def _print_variables(setup: ClientSetup) -> None:
    for name, value in setup.variables.items():
        print(f"set {name} where the client runs (the key is shown once, here):")
        print(f"  export {name}={value}")


def _warn_cleartext(url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme == "http" and parts.hostname not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"warning: {url} is plain http to another machine: the key crosses the network "
            "readable by anyone on the way; serve it behind https"
        )


def _ids(keys: list[ApiKeyRecord]) -> str:
    return ", ".join(key.id for key in keys)
