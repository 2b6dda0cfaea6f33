"""``memory-server admin ...``: the operator commands, their arguments, tables and ``--json``.

An app lists :data:`ADMIN` among its commands; each runs inside ``run_command`` (so an unknown
owner ends with one line on stderr and exit status 1, a bad setting with 2). The work is in
:mod:`memory_tools.operations.admin`.

Every command prints a table (or a sentence) for people; ``--json`` prints one JSON object for
scripts instead, with the camelCase keys listed in docs/runbooks/operating.md. A key's secret
is printed only by ``create-key``, once. ``reconcile`` is ``memory-server reconcile``
(:mod:`memory_tools.serving.reconcile_command`) under its older name. Printing is in
``admin_output``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from memory_tools import ConflictFailure
from memory_tools.operations import admin
from memory_tools.serving.admin_output import (
    human_bytes,
    print_json,
    print_table,
    when,
)
from memory_tools.serving.key_commands import key_id_arguments, pause_key, resume_key
from memory_tools.serving.reconcile_command import add_reconcile_arguments, reconcile
from memory_tools.serving.subcommands import (
    DATABASE,
    RUNTIME,
    CommandGroup,
    OpenedDatabase,
    Outcome,
    Subcommand,
    add_json_option,
)

# Every command needs the database only but `reconcile`, which opens the whole runtime (the
# store too).


# --- commands ----------------------------------------------------------------------------------


async def _create_identity(opened: OpenedDatabase, args: argparse.Namespace) -> None:
    quota = args.quota_bytes
    if quota is None:
        quota = opened.settings.memory_default_quota_bytes
    owner = args.owner.strip().lower()
    try:
        record = await admin.create_identity(opened.database, args.owner, quota)
    except ConflictFailure:
        if not args.exist_ok:
            raise
        if args.json:
            print_json({"owner": owner, "created": False})
        else:
            print(f"identity {owner} already exists")
        return
    if args.json:
        print_json(
            {"owner": record.owner_identity, "created": True, "quotaBytes": record.quota_bytes}
        )
    else:
        print(
            f"identity {record.owner_identity} created with vault Library "
            f"(quota {record.quota_bytes} bytes)"
        )


async def _create_key(opened: OpenedDatabase, args: argparse.Namespace) -> None:
    scopes = [s for s in args.scopes.split(",") if s.strip()]
    new = await admin.create_key(opened.database, args.owner, scopes, args.label, note=args.note)
    if args.json:
        print_json(
            {
                "keyId": new.record.id,
                "owner": new.record.owner_identity,
                "scopes": list(new.record.scopes),
                "label": new.record.label,
                "note": new.record.note,
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


async def _create_vault(opened: OpenedDatabase, args: argparse.Namespace) -> None:
    record = await admin.create_vault(opened.database, args.owner, args.name)
    if args.json:
        print_json({"vaultId": record.id, "owner": record.owner_identity, "vault": record.handle})
    else:
        print(f"vault {record.handle} created for {record.owner_identity}")


async def _grant(opened: OpenedDatabase, args: argparse.Namespace) -> None:
    record = await admin.grant(
        opened.database, args.vault_owner, args.vault, args.to, args.permission
    )
    if args.json:
        print_json(
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


async def _revoke_grant(opened: OpenedDatabase, args: argparse.Namespace) -> None:
    removed = await admin.revoke_grant(opened.database, args.vault_owner, args.vault, args.grantee)
    owner = args.vault_owner.strip().lower()
    grantee = args.grantee.strip().lower()
    if args.json:
        print_json(
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
        print(f"{grantee} no longer has {removed.permission} access to {removed.physical_vault}")


async def _revoke_key(opened: OpenedDatabase, args: argparse.Namespace) -> None:
    record = await admin.revoke_key(opened.database, args.key_id)
    if args.json:
        print_json(
            {
                "keyId": record.id,
                "owner": record.owner_identity,
                "revokedAt": when(record.revoked_at),
            }
        )
    else:
        print(f"key {record.id} revoked")


async def _list_identities(opened: OpenedDatabase, args: argparse.Namespace) -> None:
    found = await admin.list_identities(opened.database)
    if args.json:
        print_json(
            {
                "identities": [
                    {
                        "owner": i.owner_identity,
                        "quotaBytes": i.quota_bytes,
                        "usedBytes": i.used_bytes,
                        "reservedBytes": i.reserved_bytes,
                        "createdAt": when(i.created_at),
                        "activeKeys": i.active_keys,
                        "pausedKeys": i.paused_keys,
                        "revokedKeys": i.revoked_keys,
                        "vaults": i.vaults,
                    }
                    for i in found
                ]
            }
        )
        return
    print_table(
        "identities",
        ("owner", "quota", "used", "reserved", "keys (active/paused/revoked)", "vaults", "created"),
        [
            (
                i.owner_identity,
                human_bytes(i.quota_bytes),
                human_bytes(i.used_bytes),
                human_bytes(i.reserved_bytes),
                f"{i.active_keys}/{i.paused_keys}/{i.revoked_keys}",
                i.vaults,
                when(i.created_at),
            )
            for i in found
        ],
        empty="no identities yet: create one with `memory-server admin create-identity`",
    )


async def _list_keys(opened: OpenedDatabase, args: argparse.Namespace) -> None:
    keys = await admin.list_keys(opened.database, args.owner, args.label)
    owner = args.owner.strip().lower()
    if args.json:
        print_json(
            {
                "owner": owner,
                "keys": [
                    {
                        "keyId": k.id,
                        "label": k.label,
                        "scopes": list(k.scopes),
                        "note": k.note,
                        "state": k.state,
                        "createdAt": when(k.created_at),
                        "lastUsedAt": when(k.last_used_at),
                        "pausedAt": when(k.paused_at),
                        "revokedAt": when(k.revoked_at),
                        "calls": k.calls,
                        "searches": k.searches,
                        "saves": k.saves,
                    }
                    for k in keys
                ],
            }
        )
        return
    print_table(
        f"keys of {owner}",
        ("key id", "state", "scopes", "label", "created", "last used"),
        [
            (
                k.id,
                k.state,
                ",".join(k.scopes),
                k.label,
                when(k.created_at),
                when(k.last_used_at) or "never",
            )
            for k in keys
        ],
        empty=f"{owner} has no keys" + (f" labelled {args.label!r}" if args.label else ""),
    )


async def _list_vaults(opened: OpenedDatabase, args: argparse.Namespace) -> None:
    vaults = await admin.list_vaults(opened.database, args.owner)
    owner = args.owner.strip().lower()
    if args.json:
        print_json(
            {
                "owner": owner,
                "vaults": [
                    {
                        "vaultId": v.id,
                        "vault": v.handle,
                        "createdAt": when(v.created_at),
                        "grants": v.grants,
                        "assets": v.assets,
                    }
                    for v in vaults
                ],
            }
        )
        return
    print_table(
        f"vaults of {owner}",
        ("vault", "images", "grants", "created", "vault id"),
        [(v.handle, v.assets, v.grants, when(v.created_at), v.id) for v in vaults],
        empty=f"{owner} has no vaults",
    )


async def _list_grants(opened: OpenedDatabase, args: argparse.Namespace) -> None:
    grants = await admin.list_grants(opened.database, args.vault_owner, args.vault)
    owner = args.vault_owner.strip().lower()
    if args.json:
        print_json(
            {
                "owner": owner,
                "vault": args.vault,
                "grants": [
                    {
                        "grantId": g.id,
                        "grantee": g.grantee_identity,
                        "permission": g.permission,
                        "createdAt": when(g.created_at),
                    }
                    for g in grants
                ],
            }
        )
        return
    print_table(
        f"grants of {owner}/{args.vault}",
        ("grantee", "permission", "created"),
        [(g.grantee_identity, g.permission, when(g.created_at)) for g in grants],
        empty=f"{owner}/{args.vault} is not shared with anyone",
    )


async def _usage(opened: OpenedDatabase, args: argparse.Namespace) -> None:
    report = await admin.usage(opened.database, args.owner)
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
        print_json(
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
    print_table(
        f"storage of {c.owner_identity}",
        ("quota", "used", "reserved", "available"),
        [tuple(human_bytes(n) for n in (c.quota_bytes, c.used_bytes, c.reserved_bytes, available))],
        empty="",
    )
    print_table(
        "bytes by project (live images; originals and previews)",
        ("vault", "project", "status", "images", "bytes"),
        [
            (
                p.vault_handle,
                p.project_name if p.project_id is not None else "Unfiled",
                p.project_status,
                p.assets,
                human_bytes(p.original_bytes + p.preview_bytes),
            )
            for p in report.projects
        ],
        empty="no images stored",
    )
    print_table(
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


# --- arguments ---------------------------------------------------------------------------------


def _command(
    name: str,
    run: Callable[[OpenedDatabase, argparse.Namespace], Outcome],
    help_text: str,
    arguments: Callable[[argparse.ArgumentParser], None] | None = None,
) -> Subcommand[OpenedDatabase]:
    """An ``admin`` command that needs the database only: ``--json``, then its ``arguments``."""

    def add(parser: argparse.ArgumentParser) -> None:
        _add_json(parser)
        if arguments is not None:
            arguments(parser)

    return Subcommand(name=name, help=help_text, arguments=add, opens=DATABASE, run=run)


def _add_json(parser: argparse.ArgumentParser) -> None:
    add_json_option(parser, "print one JSON object for scripts instead of a table")


def _owner(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--owner", required=True)


def _vault(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--vault-owner", required=True)
    parser.add_argument("--vault", required=True)


def _create_identity_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--owner", required=True, help="owner e-mail address")
    parser.add_argument(
        "--quota-bytes",
        type=_bytes_argument,
        default=None,
        help="storage quota in bytes (default MEMORY_DEFAULT_QUOTA_BYTES)",
    )
    parser.add_argument("--exist-ok", action="store_true", help="succeed if the identity exists")


def _create_key_arguments(parser: argparse.ArgumentParser) -> None:
    _owner(parser)
    parser.add_argument(
        "--scopes", default="read,write", help="comma-separated: read,write,destructive,admin"
    )
    parser.add_argument("--label", default=None, help="a name for the key (at most 120 characters)")
    parser.add_argument(
        "--note", default=None, help="why the key was made (one line, at most 500 characters)"
    )


def _create_vault_arguments(parser: argparse.ArgumentParser) -> None:
    _owner(parser)
    parser.add_argument("--name", required=True)


def _grant_arguments(parser: argparse.ArgumentParser) -> None:
    _vault(parser)
    parser.add_argument(
        "--to",
        "--grantee",
        dest="to",
        metavar="IDENTITY",
        required=True,
        help="the identity given access (--grantee too, as revoke-grant and list-grants say)",
    )
    parser.add_argument("--permission", required=True, choices=["read", "write", "admin"])


def _revoke_grant_arguments(parser: argparse.ArgumentParser) -> None:
    _vault(parser)
    parser.add_argument("--grantee", required=True)


def _revoke_key_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("key_id")


def _list_keys_arguments(parser: argparse.ArgumentParser) -> None:
    _owner(parser)
    parser.add_argument("--label", default=None, help="only the keys with exactly this label")


def _reconcile_arguments(parser: argparse.ArgumentParser) -> None:
    _add_json(parser)
    add_reconcile_arguments(parser)


def _bytes_argument(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of bytes: {value!r}") from None
    if number < 0:
        raise argparse.ArgumentTypeError("must be zero or more bytes")
    return number


ADMIN = CommandGroup(
    name="admin",
    help="identities, API keys, vaults, grants and usage",
    dest="admin_command",
    commands=(
        _command(
            "create-identity",
            _create_identity,
            "create an owner identity",
            _create_identity_arguments,
        ),
        _command(
            "create-key",
            _create_key,
            "create an API key (its secret is printed once)",
            _create_key_arguments,
        ),
        _command(
            "create-vault",
            _create_vault,
            "create another vault for an owner",
            _create_vault_arguments,
        ),
        _command("grant", _grant, "share a vault with another identity", _grant_arguments),
        _command(
            "revoke-grant",
            _revoke_grant,
            "stop sharing a vault with an identity",
            _revoke_grant_arguments,
        ),
        _command(
            "revoke-key", _revoke_key, "revoke an API key by id, for good", _revoke_key_arguments
        ),
        _command(
            "pause-key",
            pause_key,
            "pause an API key: refused until resumed",
            key_id_arguments,
        ),
        _command("resume-key", resume_key, "resume a paused API key", key_id_arguments),
        _command("list-identities", _list_identities, "list identities with quota, usage and keys"),
        _command(
            "list-keys",
            _list_keys,
            "list an owner's keys (never the secrets)",
            _list_keys_arguments,
        ),
        _command("list-vaults", _list_vaults, "list an owner's vaults", _owner),
        _command("list-grants", _list_grants, "list who a vault is shared with", _vault),
        _command("usage", _usage, "quota, bytes by project and provider tokens by month", _owner),
        Subcommand(
            name="reconcile",
            help="the same as `memory-server reconcile` (its older name)",
            arguments=_reconcile_arguments,
            opens=RUNTIME,
            run=reconcile,
        ),
    ),
)
"""``admin`` and its commands, in the order of ``--help``."""
