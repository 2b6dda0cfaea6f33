"""Every agent a principal: a caller's own API keys, what each did, and its switches.

The web app's Keys page and the operator's ``memory-server admin`` key commands run these, so
one set of rules holds for both (docs/design.md#keys):

- A caller sees and changes only its own identity's keys; another owner's key id answers
  ``not_found`` and changes nothing. A key with the ``admin`` scope is an operator's: it sees
  and changes every owner's keys, as the command line does.
- Listing needs the ``read`` scope; creating, pausing, resuming and revoking need ``write``,
  and a server started with ``--read-only`` refuses them (the operator's commands still work).
  A new key's scopes must be among the creating key's own (no key mints a stronger one).
- A caller cannot pause or revoke the key it calls with (a web session's own key): that would
  end the very call (or page) doing it; sign in with another key, or use the command line.
- Pausing refuses the key (``unauthenticated``, saying it is paused) and stops its web sessions
  until it is resumed; revoking is for good. Each takes effect on the key's very next call in
  every process (the key trigger of revisions 0021 and 0023). Pausing a paused key or resuming
  an active one changes nothing and says so (``changed: false``); pausing or resuming a
  revoked key is a ``conflict``. Each change is recorded in provenance
  (``api_key_create``/``_pause``/``_resume``/``_revoke``) with the caller as actor.
- What a key did: ``lastUsedAt`` (within about two minutes), ``calls``, ``searches`` and
  ``saves`` (the assets saved with it): the stored counters, read in one statement of the keys
  alone for at most :data:`MAX_KEYS_LISTED` keys, plus what this process has gathered and not
  yet written (another process's counts arrive within about a minute,
  :mod:`memory_tools.key_activity`).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from memory_db import ApiKeyRecord, NotFound, UnitOfWork
from memory_db.repositories import normalise_identity
from memory_tools import policy
from memory_tools.access import Caller, require_scope
from memory_tools.errors import Forbidden, InvalidInputFailure, NotFoundFailure
from memory_tools.wire import WireModel

if TYPE_CHECKING:
    # Only a type here: the operator CLI imports this module, and the services bring the
    # embedders (numpy), which no admin command needs.
    from memory_tools.services import MemoryServices

KeyAction = Literal["pause", "resume", "revoke"]
KEY_ACTIONS: tuple[KeyAction, ...] = ("pause", "resume", "revoke")
# Keys one listing shows at most (an operator's covers every owner): newest first.
MAX_KEYS_LISTED = 500
OPERATOR_SCOPE = "admin"
# Every scope a key may carry, weakest first (what mem_api_keys' check constraint allows).
KEY_SCOPES = ("read", "write", "destructive", "admin")
_OPERATIONS: dict[KeyAction, str] = {
    "pause": "api_key_pause",
    "resume": "api_key_resume",
    "revoke": "api_key_revoke",
}


class KeyView(WireModel):
    """One API key as its owner sees it (never its secret or hash)."""

    key_id: str
    owner: str
    label: str | None
    note: str | None
    scopes: list[str]
    state: str = Field(description="active, paused or revoked.")
    created_at: datetime
    last_used_at: datetime | None
    paused_at: datetime | None
    revoked_at: datetime | None
    calls: int
    searches: int
    saves: int
    current: bool = Field(description="The key this call is made with.")


class KeyList(WireModel):
    """The caller's keys (an operator's: everyone's), newest first."""

    keys: list[KeyView]
    operator: bool = Field(description="The caller sees every owner's keys.")
    can_change: bool = Field(description="The key carries the write scope.")
    scopes: list[str] = Field(description="Scopes a new key may have (the caller's own).")


class NewKeyView(WireModel):
    """A key just created: the secret is in this answer only, never again."""

    key: KeyView
    secret: str


class KeyChange(WireModel):
    """A key after a pause, resume or revoke; ``changed`` is false if it already was so."""

    key: KeyView
    changed: bool


def key_view(record: ApiKeyRecord, *, current_key_id: str | None = None) -> KeyView:
    """The view of ``record``, ``current`` when it is ``current_key_id``."""
    return KeyView(
        key_id=record.id,
        owner=record.owner_identity,
        label=record.label,
        note=record.note,
        scopes=list(record.scopes),
        state=record.state,
        created_at=record.created_at,
        last_used_at=record.last_used_at,
        paused_at=record.paused_at,
        revoked_at=record.revoked_at,
        calls=record.calls,
        searches=record.searches,
        saves=record.saves,
        current=record.id == current_key_id,
    )


def _with_pending(record: ApiKeyRecord, services: MemoryServices) -> ApiKeyRecord:
    """``record`` with the counts this process gathered and has not written yet.

    So a one-process server shows a save at once; another process's counts arrive with its
    next write (within about a minute).
    """
    calls, searches, saves = services.key_activity.pending(record.id)
    return replace(
        record,
        calls=record.calls + calls,
        searches=record.searches + searches,
        saves=record.saves + saves,
    )


def _is_operator(caller: Caller) -> bool:
    return caller.has_scope(OPERATOR_SCOPE)


async def list_keys(uow: UnitOfWork, caller: Caller, services: MemoryServices) -> KeyList:
    """The caller's keys with what each did; an operator's key lists every owner's."""
    require_scope(caller, "read")
    operator = _is_operator(caller)
    listed = await uow.api_keys.listed(None if operator else caller.identity, limit=MAX_KEYS_LISTED)
    return KeyList(
        keys=[key_view(_with_pending(r, services), current_key_id=caller.key_id) for r in listed],
        operator=operator,
        can_change=caller.has_scope("write"),
        scopes=sorted(caller.scopes),
    )


def _optional_text(value: str | None) -> str | None:
    """A label or note as given, or ``None`` when blank (the repository bounds the rest)."""
    return value.strip() or None if value is not None else None


async def create_key(
    uow: UnitOfWork,
    caller: Caller,
    services: MemoryServices,
    *,
    label: str | None,
    note: str | None,
    scopes: list[str],
) -> NewKeyView:
    """Create a key for the caller's identity; its scopes must be among the caller's."""
    policy.require_writable(services.read_only)
    require_scope(caller, "write")
    if not scopes:
        raise InvalidInputFailure("scopes: choose at least one of " + ", ".join(caller.scopes))
    beyond = sorted(set(scopes) - caller.scopes)
    if beyond:
        raise Forbidden(
            f"a key cannot create a key with scopes it lacks: {', '.join(beyond)}; "
            "the operator can (`memory-server admin create-key`)"
        )
    record, secret = await uow.api_keys.create(
        caller.identity, sorted(set(scopes)), _optional_text(label), note=_optional_text(note)
    )
    await uow.provenance.record(
        "api_key_create",
        actor_identity=caller.identity,
        owner_identity=record.owner_identity,
        target_kind="api_key",
        target_id=record.id,
        detail={"scopes": list(record.scopes)},
    )
    return NewKeyView(key=key_view(record, current_key_id=caller.key_id), secret=secret)


async def change_key(
    uow: UnitOfWork, key_id: str, action: KeyAction, *, actor: str, owner: str | None
) -> tuple[ApiKeyRecord, bool]:
    """Pause, resume or revoke ``key_id`` if ``owner`` owns it (``None``: the operator).

    Not found, and nothing changed, for a key of another owner or none; recorded in provenance
    with ``actor`` when it changed something (a repeat records nothing).
    """
    if action not in KEY_ACTIONS:
        raise InvalidInputFailure(f"action: one of {', '.join(KEY_ACTIONS)}")
    try:
        record = await uow.api_keys.get(key_id)
    except NotFound:
        raise NotFoundFailure(f"no key {key_id[:64]!r}") from None
    if owner is not None and record.owner_identity != normalise_identity(owner):
        raise NotFoundFailure(f"no key {key_id[:64]!r}")
    if action == "revoke":
        changed = record.revoked_at is None
        record = await uow.api_keys.revoke(key_id)
    else:
        record, changed = await uow.api_keys.set_paused(key_id, action == "pause")
    if changed:
        await uow.provenance.record(
            _OPERATIONS[action],
            actor_identity=actor,
            owner_identity=record.owner_identity,
            target_kind="api_key",
            target_id=record.id,
        )
    return record, changed


async def change_own_key(
    uow: UnitOfWork, caller: Caller, services: MemoryServices, *, key_id: str, change: KeyAction
) -> KeyChange:
    """:func:`change_key` for a caller: its own keys (an operator's: any), never its own key."""
    policy.require_writable(services.read_only)
    require_scope(caller, "write")
    if key_id == caller.key_id and change != "resume":
        raise Forbidden(
            f"you cannot {change} the key you are using; sign in with another key, or run "
            f"`memory-server admin {change}-key {key_id}`"
        )
    owner = None if _is_operator(caller) else caller.identity
    record, changed = await change_key(uow, key_id, change, actor=caller.identity, owner=owner)
    return KeyChange(key=key_view(record, current_key_id=caller.key_id), changed=changed)
