"""Operator administration: identities, keys, vaults, grants and usage (``memory-server admin``).

Each change runs in one transaction together with its provenance event (actor ``operator``);
the listings and the usage report read in one transaction and change nothing. An identity that
does not exist is refused with the command that creates it; a vault that does not exist, with
the command that lists the owner's vaults. The command-line side (arguments, tables, ``--json``)
is ``memory_tools.serving.admin_commands``.
"""

from __future__ import annotations

import shlex
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from memory_db import (
    ApiKeyRecord,
    Database,
    GrantRecord,
    IdentityRecord,
    MemoryDbError,
    NamespaceUsage,
    NotFound,
    UnitOfWork,
    VaultRecord,
)
from memory_db.repositories import (
    IdentitySummary,
    MonthlyTokens,
    ProjectBytes,
    VaultSummary,
    normalise_identity,
)
from memory_tools.errors import NotFoundFailure, translate
from memory_tools.workflows import keys

OPERATOR = "operator"
T = TypeVar("T")


@dataclass(frozen=True)
class NewKey:
    """A freshly created key: the secret exists only here and is shown once."""

    record: ApiKeyRecord
    secret: str


def unknown_identity(owner: str) -> NotFoundFailure:
    """The refusal for an identity that does not exist, with the command that creates it."""
    return NotFoundFailure(
        f"no identity {owner}; create it with "
        f"`memory-server admin create-identity --owner {shlex.quote(owner)}`"
    )


def unknown_vault(owner: str, vault: str) -> NotFoundFailure:
    """The refusal for a vault ``owner`` does not have, with the command that lists theirs."""
    shown = vault if len(vault) <= 64 else vault[:64] + "..."  # no handle is longer
    return NotFoundFailure(
        f"{owner} has no vault {shown!r}; list them with "
        f"`memory-server admin list-vaults --owner {shlex.quote(owner)}`"
    )


async def require_identity(uow: UnitOfWork, owner: str) -> IdentityRecord:
    """The identity ``owner`` names (normalised), or :func:`unknown_identity`."""
    normalised = normalise_identity(owner)
    try:
        return await uow.identities.get(normalised)
    except NotFound:
        raise unknown_identity(normalised) from None


async def require_owned_vault(uow: UnitOfWork, owner: str, vault: str) -> VaultRecord:
    """The vault ``vault`` that ``owner`` owns (not merely one shared with them), or not found.

    What every operator command over one vault starts with (``export``, ``enrich``).
    """
    identity = await require_identity(uow, owner)
    try:
        record = await uow.vaults.resolve(identity.owner_identity, vault)
    except NotFound:
        raise unknown_vault(identity.owner_identity, vault) from None
    if not record.is_owner or "/" in vault:
        raise unknown_vault(identity.owner_identity, vault)
    return record


async def _audited(
    database: Database,
    operation: str,
    action: Callable[[UnitOfWork], Awaitable[T]],
    describe: Callable[[T], dict[str, Any]],
) -> T:
    """Run ``action`` and record ``operation`` for it in the same transaction."""
    try:
        async with database.unit_of_work() as uow:
            result = await action(uow)
            await uow.provenance.record(operation, actor_identity=OPERATOR, **describe(result))
            return result
    except MemoryDbError as exc:
        raise translate(exc) from exc


async def create_identity(database: Database, owner: str, quota_bytes: int) -> IdentityRecord:
    """Create an identity with its namespace and default vault ``Library``."""
    return await _audited(
        database,
        "identity_create",
        lambda uow: uow.identities.create(owner, quota_bytes),
        lambda r: {
            "owner_identity": r.owner_identity,
            "target_kind": "identity",
            "target_id": r.namespace_id,
        },
    )


async def create_key(
    database: Database,
    owner: str,
    scopes: Iterable[str],
    label: str | None = None,
    *,
    note: str | None = None,
) -> NewKey:
    """Create an API key for ``owner``; ``note``: why it was made (shown beside it)."""

    async def action(uow: UnitOfWork) -> NewKey:
        await require_identity(uow, owner)
        record, secret = await uow.api_keys.create(owner, scopes, label, note=note)
        return NewKey(record, secret)

    return await _audited(
        database,
        "api_key_create",
        action,
        lambda new: {
            "owner_identity": new.record.owner_identity,
            "target_kind": "api_key",
            "target_id": new.record.id,
            "detail": {"scopes": list(new.record.scopes)},
        },
    )


async def revoke_key(database: Database, key_id: str) -> ApiKeyRecord:
    """Revoke a key by its id (``akey_...``); repeating it changes nothing. For good."""
    return await _audited(
        database,
        "api_key_revoke",
        lambda uow: uow.api_keys.revoke(key_id),
        lambda r: {"owner_identity": r.owner_identity, "target_kind": "api_key", "target_id": r.id},
    )


async def set_key_paused(
    database: Database, key_id: str, paused: bool
) -> tuple[ApiKeyRecord, bool]:
    """Pause (or resume) any owner's key; return it and whether that changed anything.

    The rules of the web Keys page (``memory_tools.workflows.keys``) with the operator as the
    actor: repeating is no change, a revoked key is a ``conflict``, and the key's very next
    call in every process is refused (or accepted again).
    """
    try:
        async with database.unit_of_work() as uow:
            return await keys.change_key(
                uow, key_id, "pause" if paused else "resume", actor=OPERATOR, owner=None
            )
    except MemoryDbError as exc:
        raise translate(exc) from exc


async def create_vault(database: Database, owner: str, name: str) -> VaultRecord:
    """Create another vault for ``owner``."""

    async def action(uow: UnitOfWork) -> VaultRecord:
        await require_identity(uow, owner)
        return await uow.vaults.create(owner, name)

    return await _audited(
        database,
        "vault_create",
        action,
        lambda r: {
            "owner_identity": r.owner_identity,
            "vault": r.physical_vault,
            "target_kind": "vault",
            "target_id": r.id,
        },
    )


async def grant(
    database: Database, vault_owner: str, vault: str, grantee: str, permission: str
) -> GrantRecord:
    """Share ``vault_owner``'s vault with ``grantee`` (``read``, ``write`` or ``admin``)."""

    async def action(uow: UnitOfWork) -> GrantRecord:
        owner = (await require_identity(uow, vault_owner)).owner_identity
        await require_identity(uow, grantee)
        try:
            return await uow.vaults.grant(owner, vault, grantee, permission)
        except NotFound as exc:
            if exc.kind == "vault":
                raise unknown_vault(owner, vault) from None
            raise

    return await _audited(
        database,
        "vault_grant",
        action,
        lambda r: {
            "owner_identity": r.owner_identity,
            "vault": r.physical_vault,
            "target_kind": "vault_grant",
            "target_id": r.id,
            "detail": {"permission": r.permission},
        },
    )


async def revoke_grant(
    database: Database, vault_owner: str, vault: str, grantee: str
) -> GrantRecord | None:
    """Remove ``grantee``'s grant on ``vault_owner``'s vault; None when there was none.

    The grantee's next call is refused: every call resolves its vault and permission afresh
    (``memory_tools.access.resolve_vault``), nothing caches grants. Only a removal is recorded
    (``vault_grant_revoke``); repeating it changes nothing and records nothing.
    """
    try:
        async with database.unit_of_work() as uow:
            owner = (await require_identity(uow, vault_owner)).owner_identity
            who = (await require_identity(uow, grantee)).owner_identity
            try:
                removed = await uow.vaults.revoke_grant(owner, vault, who)
            except NotFound:
                raise unknown_vault(owner, vault) from None
            if removed is not None:
                await uow.provenance.record(
                    "vault_grant_revoke",
                    actor_identity=OPERATOR,
                    owner_identity=removed.owner_identity,
                    vault=removed.physical_vault,
                    target_kind="vault_grant",
                    target_id=removed.id,
                    detail={"permission": removed.permission},
                )
            return removed
    except MemoryDbError as exc:
        raise translate(exc) from exc


async def _read(database: Database, action: Callable[[UnitOfWork], Awaitable[T]]) -> T:
    try:
        async with database.unit_of_work() as uow:
            return await action(uow)
    except MemoryDbError as exc:
        raise translate(exc) from exc


async def list_identities(database: Database) -> list[IdentitySummary]:
    """Every identity with its quota, counters, key and vault counts."""
    return await _read(database, lambda uow: uow.reports.identities())


async def list_keys(database: Database, owner: str, label: str | None = None) -> list[ApiKeyRecord]:
    """``owner``'s keys, newest first (never their secrets); ``label`` filters exactly."""

    async def action(uow: UnitOfWork) -> list[ApiKeyRecord]:
        identity = await require_identity(uow, owner)
        return await uow.api_keys.list_for(identity.owner_identity, label=label)

    return await _read(database, action)


async def list_vaults(database: Database, owner: str) -> list[VaultSummary]:
    """The vaults ``owner`` owns, with their grant and image counts."""

    async def action(uow: UnitOfWork) -> list[VaultSummary]:
        identity = await require_identity(uow, owner)
        return await uow.reports.vaults(identity.owner_identity)

    return await _read(database, action)


async def list_grants(database: Database, vault_owner: str, vault: str) -> list[GrantRecord]:
    """Who ``vault_owner``'s vault is shared with, and how."""

    async def action(uow: UnitOfWork) -> list[GrantRecord]:
        owner = (await require_identity(uow, vault_owner)).owner_identity
        try:
            return await uow.vaults.grants(owner, vault)
        except NotFound:
            raise unknown_vault(owner, vault) from None

    return await _read(database, action)


@dataclass(frozen=True)
class UsageReport:
    """An owner's storage and provider usage."""

    counters: NamespaceUsage
    projects: list[ProjectBytes]
    tokens: list[MonthlyTokens]


async def usage(database: Database, owner: str) -> UsageReport:
    """Quota, used and reserved bytes, bytes by project and provider tokens by month."""

    async def action(uow: UnitOfWork) -> UsageReport:
        identity = (await require_identity(uow, owner)).owner_identity
        return UsageReport(
            counters=await uow.quota.usage(identity),
            projects=await uow.reports.bytes_by_project(identity),
            tokens=await uow.reports.tokens_by_month(identity),
        )

    return await _read(database, action)
