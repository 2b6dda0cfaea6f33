"""Operator administration: identities, keys, vaults and grants (the `admin` CLI commands).

Each action runs in one transaction together with its provenance event (actor ``operator``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from memory_db import (
    ApiKeyRecord,
    Database,
    GrantRecord,
    IdentityRecord,
    MemoryDbError,
    UnitOfWork,
    VaultRecord,
)
from memory_tools.errors import translate

OPERATOR = "operator"
T = TypeVar("T")


@dataclass(frozen=True)
class NewKey:
    """A freshly created key: the secret exists only here and is shown once."""

    record: ApiKeyRecord
    secret: str


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
    database: Database, owner: str, scopes: Iterable[str], label: str | None = None
) -> NewKey:
    """Create an API key for ``owner``."""

    async def action(uow: UnitOfWork) -> NewKey:
        record, secret = await uow.api_keys.create(owner, scopes, label)
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
    """Revoke a key by its id (``akey_...``); repeating it changes nothing."""
    return await _audited(
        database,
        "api_key_revoke",
        lambda uow: uow.api_keys.revoke(key_id),
        lambda r: {"owner_identity": r.owner_identity, "target_kind": "api_key", "target_id": r.id},
    )


async def create_vault(database: Database, owner: str, name: str) -> VaultRecord:
    """Create another vault for ``owner``."""
    return await _audited(
        database,
        "vault_create",
        lambda uow: uow.vaults.create(owner, name),
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
    return await _audited(
        database,
        "vault_grant",
        lambda uow: uow.vaults.grant(vault_owner, vault, grantee, permission),
        lambda r: {
            "owner_identity": r.owner_identity,
            "vault": r.physical_vault,
            "target_kind": "vault_grant",
            "target_id": r.id,
            "detail": {"permission": r.permission},
        },
    )
