"""Authorisation (docs/design.md#authorisation): key → identity → vault → scope and permission.

Callers never supply an owner, a physical vault, a namespace or a key: those come from here.
Another owner's vault that is not shared with the caller is *not found*, exactly like a vault
that does not exist; a shared vault the caller may see but not change is *forbidden*.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from memory_db import NotFound, UnitOfWork, VaultRecord
from memory_tools.errors import Forbidden, NotFoundFailure, Unauthenticated
from memory_tools.text import refuse_nul

Need = Literal["read", "write", "destructive"]

# Which vault permissions allow which kind of operation.
_VAULT_AUTHORITY: dict[Need, frozenset[str]] = {
    "read": frozenset({"owner", "admin", "write", "read"}),
    "write": frozenset({"owner", "admin", "write"}),
    "destructive": frozenset({"owner", "admin", "write"}),
}


@dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated caller: the identity behind a key and the key's scopes."""

    identity: str
    key_id: str
    scopes: frozenset[str]

    def has_scope(self, scope: str) -> bool:
        """Whether the key carries ``scope``."""
        return scope in self.scopes


@dataclass(frozen=True, slots=True)
class ResolvedVault:
    """A vault the caller may use for the requested kind of operation."""

    record: VaultRecord
    display_handle: str


def display_handle(vault: VaultRecord, viewer: str) -> str:
    """How ``viewer`` names ``vault``: ``Library`` for their own, ``owner/Library`` if shared."""
    return (
        vault.handle if vault.owner_identity == viewer else f"{vault.owner_identity}/{vault.handle}"
    )


# What a paused key is told (its owner resumes it on the web Keys page or with the CLI).
PAUSED_KEY_MESSAGE = (
    "the API key is paused: its owner can resume it on the web app's Keys page or with "
    "`memory-server admin resume-key KEY_ID`"
)


async def authenticate(uow: UnitOfWork, api_key: str | None) -> Caller:
    """Resolve a presented API key; raise ``Unauthenticated`` for none, unknown or revoked.

    A paused key is refused with :data:`PAUSED_KEY_MESSAGE` (one more read, on refusal only).
    """
    if not api_key:
        raise Unauthenticated("an API key is required (Authorization: Bearer <key>)")
    record = await uow.api_keys.use(api_key)
    if record is None:
        if await uow.api_keys.is_paused(api_key):
            raise Unauthenticated(PAUSED_KEY_MESSAGE)
        raise Unauthenticated("the API key is unknown or revoked")
    return Caller(record.owner_identity, record.id, frozenset(record.scopes))


async def still_authenticated(uow: UnitOfWork, caller: Caller) -> None:
    """Raise ``Unauthenticated`` if the caller's key was revoked or paused since the call began.

    For calls that wait (``waitSeconds``): a key revoked meanwhile gets no answer and no links.
    """
    if not await uow.api_keys.is_active(caller.key_id):
        raise Unauthenticated("the API key was revoked or paused during the call")


def require_scope(caller: Caller, need: Need) -> None:
    """Raise ``Forbidden`` unless the key carries the scope ``need`` requires."""
    if not caller.has_scope(need):
        raise Forbidden(f"this API key lacks the '{need}' scope")


async def resolve_vault(uow: UnitOfWork, caller: Caller, handle: str, need: Need) -> ResolvedVault:
    """Resolve ``handle`` for ``caller`` and check scope and vault authority for ``need``."""
    require_scope(caller, need)
    refuse_nul(handle, "vault")
    try:
        vault = await uow.vaults.resolve(caller.identity, handle)
    except NotFound:
        raise vault_not_found(handle) from None
    return authorised(caller, vault, need)


def vault_authority(need: Need) -> frozenset[str]:
    """The vault permissions that allow an operation of kind ``need``."""
    return _VAULT_AUTHORITY[need]


def vault_not_found(handle: str) -> NotFoundFailure:
    """What a caller is told of a handle that names no vault they can see."""
    return NotFoundFailure(f"vault {handle!r} not found")


def authorised(caller: Caller, vault: VaultRecord, need: Need) -> ResolvedVault:
    """``vault`` as ``caller`` names it, if their permission on it allows ``need``.

    ``Forbidden`` otherwise, naming the grant that would allow it. For callers that resolve
    the vault in a statement of their own (a save's opening); :func:`resolve_vault` otherwise.
    """
    if vault.permission not in _VAULT_AUTHORITY[need]:
        # Name the grant that would allow it: grants are read, write or admin ("destructive"
        # is a key scope, and on a vault it takes write).
        wanted = "write" if need == "destructive" else need
        raise Forbidden(
            f"you have {vault.permission} access to this vault; {wanted} access is needed"
        )
    return ResolvedVault(vault, display_handle(vault, caller.identity))


async def readable_vaults(uow: UnitOfWork, caller: Caller) -> list[ResolvedVault]:
    """Every vault the caller may read."""
    require_scope(caller, "read")
    return readable(caller, await uow.vaults.accessible(caller.identity))


def readable(caller: Caller, accessible: Sequence[VaultRecord]) -> list[ResolvedVault]:
    """Of the vaults ``caller`` may use (own, then shared), those it may read, with handles.

    For callers that read the vaults in a statement of their own (a search's first).
    """
    return [
        ResolvedVault(v, display_handle(v, caller.identity))
        for v in accessible
        if v.permission in _VAULT_AUTHORITY["read"]
    ]
