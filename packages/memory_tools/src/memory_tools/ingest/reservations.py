"""Quota reservations of saves and uploads (docs/design.md#saving): opened, held, released.

Both a save and a direct upload open a reservation under the caller's idempotency key before
any byte moves, hold bytes on it against the quota, and release it when they fail. The rules
live here once:

- a repeat of a request under its key finds the reservation of the first (``created`` is
  false) and must be the same request, or it is a ``conflict``;
- a released or expired reservation stored nothing: its key is freed and a new reservation,
  with a new id, is opened for the retry (a direct upload's staging key names its reservation,
  so links of the old attempt never come back to life);
- holding more than the quota allows is ``quota_exceeded``, with the numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from memory_db import (
    Database,
    NotFound,
    QuotaExceededError,
    ReservationRecord,
    UnitOfWork,
    get_logger,
)
from memory_db.repositories import ReservationAttempt, split_vault_handle
from memory_tools import metrics
from memory_tools.access import (
    Caller,
    Need,
    ResolvedVault,
    authorised,
    require_scope,
    vault_authority,
    vault_not_found,
)
from memory_tools.errors import ConflictFailure, QuotaExceeded, translate
from memory_tools.text import refuse_nul

log = get_logger(__name__)


# The key under which a reservation's request names who asked for it.
REQUESTER = "requester"


@dataclass(frozen=True)
class ReservationAsk:
    """What a reservation is opened for.

    ``identity``: the fields a repeat under the same idempotency key must match to be the
    same request (kept in the reservation's ``request``, with ``details``); ``noun`` names
    the request in the conflict a different one gets. ``requester``: who asks. Keys are the
    vault owner's (one key space per owner and operation), so a grantee writing into a shared
    vault shares it: a repeat by someone else is a different request (``conflict``), never
    the other's result.
    """

    operation: str
    noun: str
    idempotency_key: str | None
    expected_bytes: int
    expires_at: datetime
    # The physical vault; ``None`` when the opening resolves it (:func:`open_in_vault`).
    vault: str | None
    identity: Mapping[str, Any]
    details: Mapping[str, Any] = field(default_factory=dict[str, Any])
    object_id: str | None = None
    requester: str | None = None

    def request(self) -> dict[str, Any]:
        """What the reservation keeps of the request: its identity, details and requester."""
        kept = {**self.identity, **self.details}
        if self.requester is not None:
            kept[REQUESTER] = self.requester
        return kept


@dataclass(frozen=True)
class Opened:
    """A reservation opened in the vault the caller named (:func:`open_in_vault`)."""

    vault: ResolvedVault
    namespace_id: str
    reservation: ReservationRecord
    created: bool


async def open_reservation(
    uow: UnitOfWork, owner: str, ask: ReservationAsk
) -> tuple[ReservationRecord, bool]:
    """A new reservation, or the one an earlier request with the same key opened.

    Returns ``(reservation, created)``. An existing one is the same request's (``conflict``
    otherwise) and is active or finalised: the caller decides what a repeat means.
    """
    while True:
        reservation, created = await uow.quota.open_reservation(
            owner,
            operation=ask.operation,
            idempotency_key=ask.idempotency_key,
            expected_bytes=ask.expected_bytes,
            expires_at=ask.expires_at,
            vault=ask.vault,
            object_id=ask.object_id,
            request=ask.request(),
        )
        if created or not await _repeat_to_retry(uow, owner, reservation, ask):
            return reservation, created


async def _repeat_to_retry(
    uow: UnitOfWork, owner: str, reservation: ReservationRecord, ask: ReservationAsk
) -> bool:
    """Whether an earlier reservation under the key freed it for a new one (open again).

    ``False``: it is the same request's and stands (``conflict`` for a different request).
    """
    if reservation.status in ("released", "expired"):
        # The earlier attempt was refused or abandoned and stored nothing: the key is free
        # for a retry, corrected or not, which opens a reservation of its own.
        await uow.quota.free_idempotency_key(owner, reservation.id)
        return True
    # A reservation opened before requesters were kept names none: its identity decides.
    requested_by = reservation.request.get(REQUESTER)
    other = requested_by is not None and requested_by != ask.requester
    if other or any(reservation.request.get(k) != v for k, v in ask.identity.items()):
        metrics.RESERVATION_FAILURES.labels("conflict").inc()
        raise ConflictFailure(f"idempotencyKey was already used for a different {ask.noun}")
    return False


async def open_in_vault(
    uow: UnitOfWork, caller: Caller, handle: str, need: Need, ask: ReservationAsk
) -> Opened:
    """:func:`open_reservation` in the vault ``handle`` names, resolved by the same statement.

    One round trip in the common case (issue 31): the vault, its owner's namespace and the
    reservation's insert (or the earlier one under the key). The refusals are
    :func:`memory_tools.access.resolve_vault`'s, with nothing reserved: the key's scope, an
    unknown vault, a permission that does not allow ``need``; then the key's rules as above.
    """
    require_scope(caller, need)
    refuse_nul(handle, "vault")
    parts = split_vault_handle(caller.identity, handle)
    if parts is None:
        raise vault_not_found(handle)
    viewer, vault_owner, name = parts
    attempt = ReservationAttempt(
        operation=ask.operation,
        idempotency_key=ask.idempotency_key,
        expected_bytes=ask.expected_bytes,
        expires_at=ask.expires_at,
        request=ask.request(),
        object_id=ask.object_id,
    )
    while True:
        opening = await uow.openings.open_in_vault(
            viewer, vault_owner, name, permissions=vault_authority(need), attempt=attempt
        )
        if opening.vault is None:
            raise vault_not_found(handle)
        vault = authorised(caller, opening.vault, need)
        if opening.namespace_id is None:
            raise translate(NotFound("namespace"))
        owner = vault.record.owner_identity
        reservation, created = opening.reservation, opening.created
        if reservation is None:
            # The earlier reservation under the key committed after the statement's snapshot:
            # read it as the separate statements do.
            reservation, created = await open_reservation(
                uow, owner, replace(ask, vault=vault.record.physical_vault)
            )
        elif not created and await _repeat_to_retry(uow, owner, reservation, ask):
            continue
        return Opened(vault, opening.namespace_id, reservation, created)


def over_quota(detail: str, *, owner: str, caller: str) -> QuotaExceeded:
    """``quota_exceeded`` with its numbers for the owner; without them for anyone else.

    The numbers (used, reserved, quota) are the owner's whole account, every vault of theirs
    included: a grantee of one shared vault is told only that the owner's quota is reached.
    """
    if caller == owner:
        return QuotaExceeded(detail)
    return QuotaExceeded("this would exceed the storage quota of the vault's owner")


async def hold(
    uow: UnitOfWork, owner: str, reservation_id: str, nbytes: int, *, caller: str
) -> None:
    """Hold ``nbytes`` on the reservation (replacing what it held): ``quota_exceeded``."""
    try:
        await uow.quota.reserve(owner, reservation_id, nbytes)
    except QuotaExceededError as exc:
        raise refused(exc, owner=owner, caller=caller) from None


def refused(exc: QuotaExceededError, *, owner: str, caller: str) -> QuotaExceeded:
    """A hold the quota refused, counted, as the caller is told (:func:`over_quota`)."""
    metrics.RESERVATION_FAILURES.labels("quota_exceeded").inc()
    metrics.QUOTA_REJECTIONS.labels("save").inc()
    return over_quota(str(exc), owner=owner, caller=caller)


async def release(database: Database, owner: str, reservation_id: str) -> None:
    """Give a reservation's bytes back (best effort; the expiry sweep is the fallback)."""
    try:
        async with database.unit_of_work() as uow:
            await uow.quota.release(owner, reservation_id)
    except Exception:  # the expiry sweep releases it later
        log.warning(
            "asset_reservation_release_failed", reservation_id=reservation_id, exc_info=True
        )
