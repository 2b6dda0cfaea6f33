"""``memory-server admin ...``: the operator commands, their arguments, tables and ``--json``.

An app adds them with :func:`add_admin_parser` and runs the parsed command with
:func:`admin_command` inside ``run_command`` (so an unknown owner ends with one line on stderr
and exit status 1, a bad setting with 2). The work is in :mod:`memory_tools.admin`.

Every command prints a table (or a sentence) for people; ``--json`` prints one JSON object for
scripts instead, with the camelCase keys listed in docs/runbooks/operating.md. A key's secret
is printed only by ``create-key``, once. ``reconcile`` shows its progress on stderr: a progress
bar on a terminal, one plain line per namespace otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

from memory_db import (
    ConfigurationError,
    Database,
    MemorySettings,
    open_database,
    open_runtime,
)
from memory_tools import ConflictFailure, MemoryServices, admin
from memory_tools.reconcile import reconcile_store
from memory_tools.worker import ORPHAN_SAFETY_WINDOW

Handler = Callable[[MemorySettings, argparse.Namespace], Awaitable[None]]


# --- output ------------------------------------------------------------------------------------


def _when(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _print_json(document: dict[str, Any]) -> None:
    print(json.dumps(document, indent=2, ensure_ascii=False))


# Above this many rows a table is printed as plain aligned columns: rich lays out every cell
# of a table before printing it, which took 6 s of CPU for 10,000 identities (the query 0.1 s).
RICH_TABLE_ROWS = 1000


def _print_table(
    title: str, columns: Sequence[str], rows: Sequence[Sequence[object]], *, empty: str
) -> None:
    if not rows:
        print(_shown(empty))
        return
    cells = [["" if cell is None else _shown(str(cell)) for cell in row] for row in rows]
    if len(cells) > RICH_TABLE_ROWS:
        widths = [
            max(len(line[i]) for line in [list(columns), *cells]) for i in range(len(columns))
        ]
        print(f"{title} ({len(cells)} rows)")
        for line in [list(columns), *cells]:
            padded = (cell.ljust(width) for cell, width in zip(line, widths, strict=True))
            print("  ".join(padded).rstrip())
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    # Not a terminal (a pipe, a file): wide enough that e-mail addresses never wrap.
    console = Console(width=None if sys.stdout.isatty() else 200)
    # Text, not str: rich would read "[...]" in a key's label as markup (and fail on "[/]").
    table = Table(title=Text(_shown(title)), title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    for line in cells:
        table.add_row(*(Text(cell) for cell in line))
    console.print(table)


def _shown(value: str) -> str:
    """``value`` with control and invisible characters escaped, so it cannot drive a terminal.

    A key label stored before labels were checked may hold an escape sequence.
    """
    return "".join(
        ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in value
    )


def _bytes(value: int) -> str:
    """Exact bytes and a readable size: ``1048576 (1.0 MiB)``."""
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{value}" if unit == "B" else f"{value} ({size:.1f} {unit})"
        size /= 1024
    raise AssertionError("unreachable")


# --- progress ----------------------------------------------------------------------------------


class Progress:
    """Progress of a long command on stderr: a rich bar on a terminal, plain lines otherwise.

    Plain lines are what a log or a CI job keeps; a bar would fill them with redraws.
    """

    def __init__(self, description: str, *, terminal: bool | None = None) -> None:
        self._description = description
        self._terminal = sys.stderr.isatty() if terminal is None else terminal
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> Progress:
        if self._terminal:
            from rich.console import Console
            from rich.progress import Progress as Bar

            self._bar = Bar(console=Console(stderr=True, force_terminal=True), transient=False)
            self._bar.__enter__()
            self._task = self._bar.add_task(self._description, total=None)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)

    def advance(self, done: int, total: int, detail: str = "") -> None:
        """``done`` of ``total`` steps are finished."""
        if self._bar is not None:
            self._bar.update(self._task, completed=done, total=total)
        else:
            suffix = f" {detail}" if detail else ""
            print(f"{self._description}: {done}/{total}{suffix}", file=sys.stderr, flush=True)


# --- commands ----------------------------------------------------------------------------------


async def _with_database(
    settings: MemorySettings, action: Callable[[Database], Awaitable[None]]
) -> None:
    database, embedded = await open_database(settings, migrate=False)
    try:
        await action(database)
    finally:
        await database.close()
        if embedded is not None:
            embedded.stop()


async def _create_identity(settings: MemorySettings, args: argparse.Namespace) -> None:
    quota = args.quota_bytes
    if quota is None:
        quota = settings.memory_default_quota_bytes
    if quota < 0:
        raise ConfigurationError("--quota-bytes: must be zero or more")

    async def action(database: Database) -> None:
        owner = args.owner.strip().lower()
        try:
            record = await admin.create_identity(database, args.owner, quota)
        except ConflictFailure:
            if not args.exist_ok:
                raise
            if args.json:
                _print_json({"owner": owner, "created": False})
            else:
                print(f"identity {owner} already exists")
            return
        if args.json:
            _print_json(
                {"owner": record.owner_identity, "created": True, "quotaBytes": record.quota_bytes}
            )
        else:
            print(
                f"identity {record.owner_identity} created with vault Library "
                f"(quota {record.quota_bytes} bytes)"
            )

    await _with_database(settings, action)


async def _create_key(settings: MemorySettings, args: argparse.Namespace) -> None:
    async def action(database: Database) -> None:
        scopes = [s for s in args.scopes.split(",") if s.strip()]
        new = await admin.create_key(database, args.owner, scopes, args.label)
        if args.json:
            _print_json(
                {
                    "keyId": new.record.id,
                    "owner": new.record.owner_identity,
                    "scopes": list(new.record.scopes),
                    "label": new.record.label,
                    "key": new.secret,
                }
            )
            return
        print(f"key id: {new.record.id}")
        print(f"scopes: {','.join(new.record.scopes)}")
        if new.record.label is not None:
            print(f"label: {new.record.label}")
        print("the key is shown once, on the next line; store it safely:")
        print(new.secret)

    await _with_database(settings, action)


async def _create_vault(settings: MemorySettings, args: argparse.Namespace) -> None:
    async def action(database: Database) -> None:
        record = await admin.create_vault(database, args.owner, args.name)
        if args.json:
            _print_json(
                {"vaultId": record.id, "owner": record.owner_identity, "vault": record.handle}
            )
        else:
            print(f"vault {record.handle} created for {record.owner_identity}")

    await _with_database(settings, action)


async def _grant(settings: MemorySettings, args: argparse.Namespace) -> None:
    async def action(database: Database) -> None:
        record = await admin.grant(database, args.vault_owner, args.vault, args.to, args.permission)
        if args.json:
            _print_json(
                {
                    "grantId": record.id,
                    "owner": record.owner_identity,
                    "vault": record.physical_vault.removeprefix(f"{record.owner_identity}/"),
                    "grantee": record.grantee_identity,
                    "permission": record.permission,
                }
            )
        else:
            grantee, vault = record.grantee_identity, record.physical_vault
            print(f"{grantee} now has {record.permission} access to {vault}")

    await _with_database(settings, action)


async def _revoke_grant(settings: MemorySettings, args: argparse.Namespace) -> None:
    async def action(database: Database) -> None:
        removed = await admin.revoke_grant(database, args.vault_owner, args.vault, args.grantee)
        owner = args.vault_owner.strip().lower()
        grantee = args.grantee.strip().lower()
        if args.json:
            _print_json(
                {
                    "owner": owner,
                    "vault": args.vault,
                    "grantee": grantee,
                    "revoked": removed is not None,
                    "permission": None if removed is None else removed.permission,
                }
            )
        elif removed is None:
            print(f"nothing was granted: {grantee} has no grant on {owner}/{args.vault}")
        else:
            print(
                f"{grantee} no longer has {removed.permission} access to {removed.physical_vault}"
            )

    await _with_database(settings, action)


async def _revoke_key(settings: MemorySettings, args: argparse.Namespace) -> None:
    async def action(database: Database) -> None:
        record = await admin.revoke_key(database, args.key_id)
        if args.json:
            _print_json(
                {
                    "keyId": record.id,
                    "owner": record.owner_identity,
                    "revokedAt": _when(record.revoked_at),
                }
            )
        else:
            print(f"key {record.id} revoked")

    await _with_database(settings, action)


async def _list_identities(settings: MemorySettings, args: argparse.Namespace) -> None:
    async def action(database: Database) -> None:
        found = await admin.list_identities(database)
        if args.json:
            _print_json(
                {
                    "identities": [
                        {
                            "owner": i.owner_identity,
                            "quotaBytes": i.quota_bytes,
                            "usedBytes": i.used_bytes,
                            "reservedBytes": i.reserved_bytes,
                            "createdAt": _when(i.created_at),
                            "activeKeys": i.active_keys,
                            "revokedKeys": i.revoked_keys,
                            "vaults": i.vaults,
                        }
                        for i in found
                    ]
                }
            )
            return
        _print_table(
            "identities",
            ("owner", "quota", "used", "reserved", "keys (active/revoked)", "vaults", "created"),
            [
                (
                    i.owner_identity,
                    _bytes(i.quota_bytes),
                    _bytes(i.used_bytes),
                    _bytes(i.reserved_bytes),
                    f"{i.active_keys}/{i.revoked_keys}",
                    i.vaults,
                    _when(i.created_at),
                )
                for i in found
            ],
            empty="no identities yet: create one with `memory-server admin create-identity`",
        )

    await _with_database(settings, action)


async def _list_keys(settings: MemorySettings, args: argparse.Namespace) -> None:
    async def action(database: Database) -> None:
        keys = await admin.list_keys(database, args.owner, args.label)
        owner = args.owner.strip().lower()
        if args.json:
            _print_json(
                {
                    "owner": owner,
                    "keys": [
                        {
                            "keyId": k.id,
                            "label": k.label,
                            "scopes": list(k.scopes),
                            "state": "revoked" if k.revoked_at else "active",
                            "createdAt": _when(k.created_at),
                            "lastUsedAt": _when(k.last_used_at),
                            "revokedAt": _when(k.revoked_at),
                        }
                        for k in keys
                    ],
                }
            )
            return
        _print_table(
            f"keys of {owner}",
            ("key id", "state", "scopes", "label", "created", "last used"),
            [
                (
                    k.id,
                    "revoked" if k.revoked_at else "active",
                    ",".join(k.scopes),
                    k.label,
                    _when(k.created_at),
                    _when(k.last_used_at) or "never",
                )
                for k in keys
            ],
            empty=f"{owner} has no keys" + (f" labelled {args.label!r}" if args.label else ""),
        )

    await _with_database(settings, action)


async def _list_vaults(settings: MemorySettings, args: argparse.Namespace) -> None:
    async def action(database: Database) -> None:
        vaults = await admin.list_vaults(database, args.owner)
        owner = args.owner.strip().lower()
        if args.json:
            _print_json(
                {
                    "owner": owner,
                    "vaults": [
                        {
                            "vaultId": v.id,
                            "vault": v.handle,
                            "createdAt": _when(v.created_at),
                            "grants": v.grants,
                            "assets": v.assets,
                        }
                        for v in vaults
                    ],
                }
            )
            return
        _print_table(
            f"vaults of {owner}",
            ("vault", "images", "grants", "created", "vault id"),
            [(v.handle, v.assets, v.grants, _when(v.created_at), v.id) for v in vaults],
            empty=f"{owner} has no vaults",
        )

    await _with_database(settings, action)


async def _list_grants(settings: MemorySettings, args: argparse.Namespace) -> None:
    async def action(database: Database) -> None:
        grants = await admin.list_grants(database, args.vault_owner, args.vault)
        owner = args.vault_owner.strip().lower()
        if args.json:
            _print_json(
                {
                    "owner": owner,
                    "vault": args.vault,
                    "grants": [
                        {
                            "grantId": g.id,
                            "grantee": g.grantee_identity,
                            "permission": g.permission,
                            "createdAt": _when(g.created_at),
                        }
                        for g in grants
                    ],
                }
            )
            return
        _print_table(
            f"grants of {owner}/{args.vault}",
            ("grantee", "permission", "created"),
            [(g.grantee_identity, g.permission, _when(g.created_at)) for g in grants],
            empty=f"{owner}/{args.vault} is not shared with anyone",
        )

    await _with_database(settings, action)


async def _usage(settings: MemorySettings, args: argparse.Namespace) -> None:
    async def action(database: Database) -> None:
        report = await admin.usage(database, args.owner)
        c = report.counters
        available = max(0, c.quota_bytes - c.used_bytes - c.reserved_bytes)
        projects = [
            {
                "vault": p.vault_handle,
                "projectId": p.project_id,
                "project": p.project_name if p.project_id is not None else "Unfiled",
                "status": p.project_status,
                "assets": p.assets,
                "originalBytes": p.original_bytes,
                "previewBytes": p.preview_bytes,
                "bytes": p.original_bytes + p.preview_bytes,
            }
            for p in report.projects
        ]
        tokens = [
            {
                "month": t.month,
                "source": t.source,
                "model": t.model,
                "calls": t.calls,
                "totalTokens": t.total_tokens,
                "promptTokens": t.prompt_tokens,
                "imageTokens": t.image_tokens,
            }
            for t in report.tokens
        ]
        if args.json:
            _print_json(
                {
                    "owner": c.owner_identity,
                    "quotaBytes": c.quota_bytes,
                    "usedBytes": c.used_bytes,
                    "reservedBytes": c.reserved_bytes,
                    "availableBytes": available,
                    "projects": projects,
                    "tokensByMonth": tokens,
                }
            )
            return
        _print_table(
            f"storage of {c.owner_identity}",
            ("quota", "used", "reserved", "available"),
            [tuple(_bytes(n) for n in (c.quota_bytes, c.used_bytes, c.reserved_bytes, available))],
            empty="",
        )
        _print_table(
            "bytes by project (live images; originals and previews)",
            ("vault", "project", "status", "images", "bytes"),
            [
                (
                    p.vault_handle,
                    p.project_name if p.project_id is not None else "Unfiled",
                    p.project_status,
                    p.assets,
                    _bytes(p.original_bytes + p.preview_bytes),
                )
                for p in report.projects
            ],
            empty="no images stored",
        )
        _print_table(
            "provider tokens by month (UTC)",
            ("month", "source", "model", "calls", "total", "prompt", "image"),
            [
                (
                    t["month"],
                    t["source"],
                    t["model"],
                    t["calls"],
                    t["totalTokens"],
                    t["promptTokens"],
                    t["imageTokens"],
                )
                for t in tokens
            ],
            empty="no provider usage recorded",
        )

    await _with_database(settings, action)


async def _reconcile(settings: MemorySettings, args: argparse.Namespace) -> None:
    # The long command: a pass lists every namespace of the store, as a worker's sweep does.
    runtime = await open_runtime(settings, public_base_url="http://127.0.0.1")
    try:
        services = MemoryServices(database=runtime.database, store=runtime.store, settings=settings)
        with Progress("reconciling namespaces") as progress:
            report = await reconcile_store(
                services,
                safety_window=ORPHAN_SAFETY_WINDOW,
                progress=progress.advance,
                actor=admin.OPERATOR,
            )
    finally:
        await runtime.close()
    document = {
        "namespaces": report.namespaces,
        "listed": report.listed,
        "removed": report.removed,
        "removedBytes": report.removed_bytes,
        "waiting": report.waiting,
        "foreign": report.foreign,
    }
    if args.json:
        _print_json(document)
    else:
        _print_table(
            "reconciliation",
            ("namespaces", "keys listed", "removed", "removed bytes", "waiting", "foreign"),
            [tuple(document.values())],
            empty="",
        )


# --- arguments ---------------------------------------------------------------------------------


def add_admin_parser(commands: Any) -> argparse.ArgumentParser:
    """Add ``admin`` and its commands to an app's subcommands; each binds its handler."""
    admin_parser: argparse.ArgumentParser = commands.add_parser(
        "admin", help="identities, API keys, vaults, grants and usage"
    )
    sub = admin_parser.add_subparsers(dest="admin_command", required=True)
    output = argparse.ArgumentParser(add_help=False)
    output.add_argument(
        "--json", action="store_true", help="print one JSON object for scripts instead of a table"
    )

    def command(name: str, handler: Handler, help_text: str) -> argparse.ArgumentParser:
        parser = sub.add_parser(name, help=help_text, parents=[output])
        parser.set_defaults(admin=handler)
        return parser

    ci = command("create-identity", _create_identity, "create an owner identity")
    ci.add_argument("--owner", required=True, help="owner e-mail address")
    ci.add_argument("--quota-bytes", type=int, default=None, help="storage quota in bytes")
    ci.add_argument("--exist-ok", action="store_true", help="succeed if the identity exists")
    ck = command("create-key", _create_key, "create an API key (its secret is printed once)")
    ck.add_argument("--owner", required=True)
    ck.add_argument(
        "--scopes", default="read,write", help="comma-separated: read,write,destructive,admin"
    )
    ck.add_argument("--label", default=None, help="a name for the key (at most 120 characters)")
    cv = command("create-vault", _create_vault, "create another vault for an owner")
    cv.add_argument("--owner", required=True)
    cv.add_argument("--name", required=True)
    gr = command("grant", _grant, "share a vault with another identity")
    gr.add_argument("--vault-owner", required=True)
    gr.add_argument("--vault", required=True)
    gr.add_argument("--to", required=True)
    gr.add_argument("--permission", required=True, choices=["read", "write", "admin"])
    rg = command("revoke-grant", _revoke_grant, "stop sharing a vault with an identity")
    rg.add_argument("--vault-owner", required=True)
    rg.add_argument("--vault", required=True)
    rg.add_argument("--grantee", required=True)
    rk = command("revoke-key", _revoke_key, "revoke an API key by id")
    rk.add_argument("key_id")
    command("list-identities", _list_identities, "list identities with quota, usage and keys")
    lk = command("list-keys", _list_keys, "list an owner's keys (never the secrets)")
    lk.add_argument("--owner", required=True)
    lk.add_argument("--label", default=None, help="only the keys with exactly this label")
    lv = command("list-vaults", _list_vaults, "list an owner's vaults")
    lv.add_argument("--owner", required=True)
    lg = command("list-grants", _list_grants, "list who a vault is shared with")
    lg.add_argument("--vault-owner", required=True)
    lg.add_argument("--vault", required=True)
    us = command("usage", _usage, "quota, bytes by project and provider tokens by month")
    us.add_argument("--owner", required=True)
    command("reconcile", _reconcile, "reconcile the object store with the accounts now")
    return admin_parser


def admin_command(settings: MemorySettings, args: argparse.Namespace) -> Awaitable[None]:
    """The parsed ``admin`` command, to run inside ``run_command``."""
    handler: Handler = args.admin
    return handler(settings, args)
