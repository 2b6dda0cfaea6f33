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
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memory_db import Database, QuotaExceededError, ReservationRecord, UnitOfWork, get_logger
from memory_tools import metrics
from memory_tools.errors import ConflictFailure, QuotaExceeded

log = get_logger(__name__)


@dataclass(frozen=True)
class ReservationAsk:
    """What a reservation is opened for.

    ``identity``: the fields a repeat under the same idempotency key must match to be the
    same request (kept in the reservation's ``request``, with ``details``); ``noun`` names
    the request in the conflict a different one gets.
    """

    operation: str
    noun: str
    idempotency_key: str | None
    expected_bytes: int
    expires_at: datetime
    vault: str
    identity: Mapping[str, Any]
    details: Mapping[str, Any] = field(default_factory=dict[str, Any])
    object_id: str | None = None


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
            request={**ask.identity, **ask.details},
        )
        if created:
            return reservation, True
        if reservation.status in ("released", "expired"):
            # The earlier attempt was refused or abandoned and stored nothing: the key is free
            # for a retry, corrected or not, which opens a reservation of its own.
            await uow.quota.free_idempotency_key(owner, reservation.id)
            continue
        if any(reservation.request.get(name) != value for name, value in ask.identity.items()):
            metrics.RESERVATION_FAILURES.labels("conflict").inc()
            raise ConflictFailure(f"idempotencyKey was already used for a different {ask.noun}")
        return reservation, False


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
