"""Operator administration: identities, keys, vaults and grants (the `admin` CLI commands)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from memory_db import (
    ApiKeyRecord,
    Database,
    GrantRecord,
    IdentityRecord,
    MemoryDbError,
    VaultRecord,
)

from memory_tools.errors import translate

OPERATOR = "operator"


@dataclass(frozen=True)
class NewKey:
    """A freshly created key: the secret exists only here and is shown once."""

    record: ApiKeyRecord
    secret: str


async def create_identity(database: Database, owner: str, quota_bytes: int) -> IdentityRecord:
    """Create an identity with its namespace and default vault ``Library``."""
    try:
        async with database.unit_of_work() as uow:
            record = await uow.identities.create(owner, quota_bytes)
            await uow.provenance.record(
                "identity_create",
                actor_identity=OPERATOR,
                owner_identity=record.owner_identity,
                target_kind="identity",
                target_id=record.namespace_id,
            )
            return record
    except MemoryDbError as exc:
        raise translate(exc) from exc


async def create_key(
    database: Database, owner: str, scopes: Iterable[str], label: str | None = None
) -> NewKey:
    """Create an API key for ``owner``."""
    try:
        async with database.unit_of_work() as uow:
            record, secret = await uow.api_keys.create(owner, scopes, label)
            await uow.provenance.record(
                "api_key_create",
                actor_identity=OPERATOR,
                owner_identity=record.owner_identity,
                target_kind="api_key",
                target_id=record.id,
                detail={"scopes": list(record.scopes)},
            )
            return NewKey(record, secret)
    except MemoryDbError as exc:
        raise translate(exc) from exc


async def revoke_key(database: Database, key_id: str) -> ApiKeyRecord:
    """Revoke a key by its id (``akey_...``); repeating it changes nothing."""
    try:
        async with database.unit_of_work() as uow:
            record = await uow.api_keys.revoke(key_id)
            await uow.provenance.record(
                "api_key_revoke",
                actor_identity=OPERATOR,
                owner_identity=record.owner_identity,
                target_kind="api_key",
                target_id=record.id,
            )
            return record
    except MemoryDbError as exc:
        raise translate(exc) from exc


async def create_vault(database: Database, owner: str, name: str) -> VaultRecord:
    """Create another vault for ``owner``."""
    try:
        async with database.unit_of_work() as uow:
            record = await uow.vaults.create(owner, name)
            await uow.provenance.record(
                "vault_create",
                actor_identity=OPERATOR,
                owner_identity=record.owner_identity,
                vault=record.physical_vault,
                target_kind="vault",
                target_id=record.id,
            )
            return record
    except MemoryDbError as exc:
        raise translate(exc) from exc


async def grant(
    database: Database, vault_owner: str, vault: str, grantee: str, permission: str
) -> GrantRecord:
    """Share ``vault_owner``'s vault with ``grantee`` (``read``, ``write`` or ``admin``)."""
    try:
        async with database.unit_of_work() as uow:
            record = await uow.vaults.grant(vault_owner, vault, grantee, permission)
            await uow.provenance.record(
                "vault_grant",
                actor_identity=OPERATOR,
                owner_identity=record.owner_identity,
                vault=record.physical_vault,
                target_kind="vault_grant",
                target_id=record.id,
                detail={"permission": permission},
            )
            return record
    except MemoryDbError as exc:
        raise translate(exc) from exc
