"""Sharing the caller's own vaults: list, grant and revoke (the web app's Sharing page).

Only a vault's owner manages who it is shared with. A grantee with ``admin`` permission may
do everything inside the vault (save, edit, delete, restore, purge) but not change who else may:
sharing is the owner's decision, and letting an admin grant would let any admin hand the vault
on. A vault the caller cannot see answers ``not_found``; a shared vault the caller sees but does
not own answers ``forbidden``. Listing needs the ``read`` scope; granting and revoking ``write``.

Granting to an identity that does not exist answers ``not_found`` ("no identity ... on this
server"). That tells a caller whether an e-mail address has an identity here; we accept it:
sharing needs a clear answer when the address is mistyped, the caller must hold a key with the
``write`` scope, and each attempt is one authenticated call. Revoking never says whether an
identity exists: revoking a grant that is not there (for any address) changes nothing and says
so. Changes are recorded like the operator's (``vault_grant``, ``vault_grant_revoke``), with
the caller as the actor; repeating a grant or revoke that changes nothing records nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from memory_db import InvalidInput, NotFound, UnitOfWork, VaultRecord
from memory_db.repositories import GrantRecord, normalise_identity
from memory_tools import policy
from memory_tools.access import Caller, require_scope
from memory_tools.errors import Forbidden, InvalidInputFailure, NotFoundFailure
from memory_tools.ingest.inputs import refuse_nul
from memory_tools.services import MemoryServices
from memory_tools.wire import WireModel

Permission = Literal["read", "write", "admin"]
PERMISSIONS: tuple[Permission, ...] = ("read", "write", "admin")


class GrantView(WireModel):
    """One identity a vault is shared with."""

    grantee: str
    permission: str = Field(description="read, write or admin.")
    created_at: datetime


class VaultSharing(WireModel):
    """One of the caller's vaults and who it is shared with (by address)."""

    vault: str
    grants: list[GrantView]


class SharingOverview(WireModel):
    """Every vault the caller owns, by name, with its grants."""

    vaults: list[VaultSharing]
    can_change: bool = Field(description="The key carries the write scope (grant, revoke).")


class GrantResult(WireModel):
    """A grant as it is now; ``changed`` is false when it already was exactly this."""

    vault: str
    grantee: str
    permission: str
    changed: bool


class RevokeResult(WireModel):
    """A revocation; ``revoked`` is false when there was no grant to remove."""

    vault: str
    grantee: str
    revoked: bool


async def _owned(uow: UnitOfWork, caller: Caller, handle: str) -> VaultRecord:
    """The caller's own vault ``handle``: not found if unseen, forbidden if only shared."""
    refuse_nul(handle, "vault")
    try:
        vault = await uow.vaults.resolve(caller.identity, handle)
    except NotFound:
        raise NotFoundFailure(f"vault {handle!r} not found") from None
    if vault.permission != "owner":
        raise Forbidden(
            f"you have {vault.permission} access to this vault; only its owner manages "
            "who it is shared with"
        )
    return vault


def _view(record: GrantRecord) -> GrantView:
    return GrantView(
        grantee=record.grantee_identity, permission=record.permission, created_at=record.created_at
    )


def _grantee(value: str) -> str:
    refuse_nul(value, "grantee")
    try:
        return normalise_identity(value)
    except InvalidInput as exc:
        raise InvalidInputFailure(f"grantee: {exc}") from None


async def list_sharing(
    uow: UnitOfWork, caller: Caller, services: MemoryServices
) -> SharingOverview:
    """The caller's own vaults and their grants (vaults shared with the caller are not listed)."""
    policy.require(services.settings)
    require_scope(caller, "read")
    owned = [v for v in await uow.vaults.accessible(caller.identity) if v.is_owner]
    return SharingOverview(
        vaults=[
            VaultSharing(
                vault=vault.handle,
                grants=[_view(g) for g in await uow.vaults.grants(caller.identity, vault.handle)],
            )
            for vault in owned
        ],
        can_change=caller.has_scope("write"),
    )


async def grant_access(
    uow: UnitOfWork,
    caller: Caller,
    services: MemoryServices,
    *,
    vault: str,
    grantee: str,
    permission: str,
) -> GrantResult:
    """Share one of the caller's vaults with ``grantee`` (or change its permission)."""
    policy.require(services.settings)
    policy.require_writable(services.read_only)
    require_scope(caller, "write")
    if permission not in PERMISSIONS:
        raise InvalidInputFailure(f"permission: one of {', '.join(PERMISSIONS)}")
    owned = await _owned(uow, caller, vault)
    who = _grantee(grantee)
    if who == caller.identity:
        raise InvalidInputFailure("grantee: you own this vault; share it with someone else")
    try:
        await uow.identities.get(who)
    except NotFound:
        raise NotFoundFailure(f"no identity {who} on this server") from None
    before = {
        g.grantee_identity: g.permission
        for g in await uow.vaults.grants(caller.identity, owned.handle)
    }
    record = await uow.vaults.grant(caller.identity, owned.handle, who, permission)
    changed = before.get(who) != permission
    if changed:
        await uow.provenance.record_in_vault(
            "vault_grant",
            owned.scope,
            "vault_grant",
            record.id,
            actor_identity=caller.identity,
            detail={"permission": record.permission, "previous": before.get(who)},
        )
    return GrantResult(vault=owned.handle, grantee=who, permission=permission, changed=changed)


async def revoke_access(
    uow: UnitOfWork, caller: Caller, services: MemoryServices, *, vault: str, grantee: str
) -> RevokeResult:
    """Remove ``grantee``'s grant on one of the caller's vaults; their next call is refused."""
    policy.require(services.settings)
    policy.require_writable(services.read_only)
    require_scope(caller, "write")
    owned = await _owned(uow, caller, vault)
    who = _grantee(grantee)
    removed = await uow.vaults.revoke_grant(caller.identity, owned.handle, who)
    if removed is not None:
        await uow.provenance.record_in_vault(
            "vault_grant_revoke",
            owned.scope,
            "vault_grant",
            removed.id,
            actor_identity=caller.identity,
            detail={"permission": removed.permission},
        )
    return RevokeResult(vault=owned.handle, grantee=who, revoked=removed is not None)
