"""Namespace byte counters and upload reservations (docs/design.md#namespace).

Every change to an owner's counters locks that owner's namespace row first (``FOR UPDATE``), so
concurrent saves of one owner serialise on the quota check and never overshoot, while different
owners never wait for each other.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import DateTime, Update, func, or_, select, text, update
from sqlalchemy.dialects.postgresql import insert

from memory_db.errors import Conflict, NotFound, QuotaExceededError
from memory_db.ids import new_id
from memory_db.repositories._base import SessionRepository, execute_alone, record_from_row
from memory_db.repositories.assets import COPIES_SQL, copies_found
from memory_db.repositories.records import (
    INTEGRITY_CODES,
    NamespaceUsage,
    QuarantineReason,
    ReservationRecord,
)
from memory_db.schema import AssetNamespace, AssetUploadReservation, Identity

# The owner's counters and an active reservation, locked: the namespace row first (it comes
# first in the join, and rows are locked in that order), as every quota change does.
LOCK_WITH_RESERVATION = (
    "SELECT n.namespace_id, n.used_bytes, n.reserved_bytes, i.quota_bytes, "
    "r.reserved_bytes AS held "
    "FROM mem_asset_namespaces n "
    "JOIN mem_identities i ON i.owner_identity = n.owner_identity "
    "JOIN mem_asset_upload_reservations r "
    "ON r.owner_identity = n.owner_identity AND r.id = :reservation "
    "AND r.status = 'active' "
    "WHERE n.owner_identity = :owner "
    "FOR NO KEY UPDATE OF n FOR UPDATE OF r"
)


@dataclass(frozen=True)
class _Locked:
    """An owner's counters and the bytes one of their reservations holds, both locked."""

    usage: NamespaceUsage
    held: int


def _reservation(row: AssetUploadReservation) -> ReservationRecord:
    return record_from_row(ReservationRecord, row, request=dict(row.request))


def _shift_counters(owner: str, *, used: int, reserved: int) -> Update:
    """The update that moves an owner's used and reserved byte counters by the given amounts."""
    return (
        update(AssetNamespace)
        .where(AssetNamespace.owner_identity == owner)
        .values(
            used_bytes=AssetNamespace.used_bytes + used,
            reserved_bytes=AssetNamespace.reserved_bytes + reserved,
            updated_at=func.now(),
        )
    )


class QuotaRepository(SessionRepository):
    """Byte accounting of owner namespaces."""

    async def usage(self, owner: str, *, lock: bool = False) -> NamespaceUsage:
        """The owner's counters and quota; ``lock`` serialises against other quota changes."""
        query = (
            select(AssetNamespace, Identity.quota_bytes)
            .join(Identity, Identity.owner_identity == AssetNamespace.owner_identity)
            .where(AssetNamespace.owner_identity == owner)
        )
        if lock:
            # FOR NO KEY UPDATE: it serialises quota changes with each other, but not with the
            # key-share locks that inserting a reservation or an object (foreign keys to the
            # namespace) takes. FOR UPDATE conflicted with those, so two upload starts that each
            # insert a reservation and then lock the namespace deadlocked.
            query = query.with_for_update(of=AssetNamespace, key_share=True)
        query = query.execution_options(populate_existing=True)
        row = (await self._session.execute(query)).one_or_none()
        if row is None:
            raise NotFound("namespace")
        namespace, quota = row
        return NamespaceUsage(
            owner, namespace.namespace_id, namespace.used_bytes, namespace.reserved_bytes, quota
        )

    async def _shift(self, owner: str, *, used: int = 0, reserved: int = 0) -> None:
        await self._session.execute(_shift_counters(owner, used=used, reserved=reserved))

    async def _set(self, reservation_id: str, **values: Any) -> None:
        await self._session.execute(
            update(AssetUploadReservation)
            .where(AssetUploadReservation.id == reservation_id)
            .values(**values, updated_at=func.now())
            .execution_options(synchronize_session=False)
        )

    async def open_reservation(
        self,
        owner: str,
        *,
        operation: str,
        idempotency_key: str | None,
        expected_bytes: int,
        expires_at: datetime,
        vault: str | None = None,
        object_id: str | None = None,
        request: dict[str, Any] | None = None,
    ) -> tuple[ReservationRecord, bool]:
        """A new active reservation, or the existing one for this idempotency key.

        Returns ``(reservation, created)``. No bytes are reserved yet: see :meth:`reserve`.
        """
        values = {
            "id": new_id("aur"),
            "owner_identity": owner,
            "operation": operation,
            "idempotency_key": idempotency_key,
            "expected_bytes": expected_bytes,
            "expires_at": expires_at,
            "vault": vault,
            "object_id": object_id,
            "request": request or {},
        }
        statement = (
            insert(AssetUploadReservation)
            .values(**values)
            .on_conflict_do_nothing(
                index_elements=["owner_identity", "operation", "idempotency_key"],
                index_where=AssetUploadReservation.idempotency_key.is_not(None),
            )
            .returning(AssetUploadReservation)
        )
        row = (await self._session.execute(statement)).scalar_one_or_none()
        if row is not None:
            return _reservation(row), True
        existing = await self._session.scalar(
            select(AssetUploadReservation).where(
                AssetUploadReservation.owner_identity == owner,
                AssetUploadReservation.operation == operation,
                AssetUploadReservation.idempotency_key == idempotency_key,
            )
        )
        if existing is None:  # the row that skipped our insert was removed since: try again
            raise Conflict("a concurrent request with this idempotency key changed; retry")
        return _reservation(existing), False

    async def caller_upload_vault(
        self, reservation_id: str, *, caller: str, operation: str
    ) -> str | None:
        """The vault handle a caller started an upload in, as they named it.

        ``None`` if the upload is unknown or was started by someone else (not told apart).
        """
        handle = await self._session.scalar(
            select(AssetUploadReservation.request["vaultHandle"].astext).where(
                AssetUploadReservation.id == reservation_id,
                AssetUploadReservation.operation == operation,
                AssetUploadReservation.request["caller"].astext == caller,
            )
        )
        return None if handle is None else str(handle)

    async def get_reservation(self, owner: str, reservation_id: str) -> ReservationRecord:
        """One reservation of ``owner``."""
        row = await self._session.scalar(
            select(AssetUploadReservation).where(
                AssetUploadReservation.owner_identity == owner,
                AssetUploadReservation.id == reservation_id,
            )
        )
        if row is None:
            raise NotFound("upload reservation")
        return _reservation(row)

    async def hold_open_upload(
        self, reservation_id: str, namespace_id: str, *, operation: str
    ) -> ReservationRecord | None:
        """The reservation a staging key names, if it is still open, share-locked.

        Serves the signed-upload route, which is authorised by the link (not by an identity):
        the reservation must belong to the namespace the key names, be ``active`` and not past
        its deadline. The share lock holds completion (which finalises under ``FOR UPDATE``)
        until the caller's transaction ends, so bytes cannot land after a completion began
        closing the reservation. ``None`` when the upload is finished, expired or unknown.
        """
        row = await self._session.scalar(
            select(AssetUploadReservation)
            .join(
                AssetNamespace,
                AssetNamespace.owner_identity == AssetUploadReservation.owner_identity,
            )
            .where(
                AssetUploadReservation.id == reservation_id,
                AssetUploadReservation.operation == operation,
                AssetUploadReservation.status == "active",
                AssetUploadReservation.expires_at > func.now(),
                AssetNamespace.namespace_id == namespace_id,
            )
            .with_for_update(read=True, of=AssetUploadReservation)
        )
        return None if row is None else _reservation(row)

    async def namespaces(self) -> list[tuple[str, str]]:
        """Every ``(owner, namespace_id)``, in owner order (reconciliation walks them)."""
        rows = await self._session.execute(
            select(AssetNamespace.owner_identity, AssetNamespace.namespace_id).order_by(
                AssetNamespace.owner_identity
            )
        )
        return [(str(owner), str(namespace)) for owner, namespace in rows.all()]

    async def open_reservation_ids(self, owner: str) -> set[str]:
        """Ids of the owner's active reservations (their staging bytes are still wanted)."""
        rows = await self._session.scalars(
            select(AssetUploadReservation.id).where(
                AssetUploadReservation.owner_identity == owner,
                AssetUploadReservation.status == "active",
            )
        )
        return set(rows)

    async def claim_completion(
        self, owner: str, reservation_id: str, *, token: str, seconds: float
    ) -> bool:
        """Claim an active upload for one completion attempt; ``False`` if another holds it.

        Completion reads, decodes and stores outside any transaction, so concurrent completions
        of one upload would each do all of that and collide at the commit. The claim (kept in
        the reservation's ``request``, with a deadline by the database clock) lets exactly one
        proceed; a claim whose holder died, or lost the database, lapses after ``seconds``
        unless its holder renews it (the same call with the same token).
        """
        claim = {"token": token}
        row = await self._session.scalar(
            update(AssetUploadReservation)
            .where(
                AssetUploadReservation.owner_identity == owner,
                AssetUploadReservation.id == reservation_id,
                AssetUploadReservation.status == "active",
                or_(
                    AssetUploadReservation.request["completing"].is_(None),
                    AssetUploadReservation.request["completing"]["until"].astext.cast(
                        DateTime(timezone=True)
                    )
                    < func.now(),
                    # The holder renewing its own claim.
                    AssetUploadReservation.request["completing"]["token"].astext == token,
                ),
            )
            .values(
                request=AssetUploadReservation.request.op("||")(
                    func.jsonb_build_object(
                        "completing",
                        func.jsonb_build_object(
                            "token",
                            claim["token"],
                            "until",
                            func.now() + func.make_interval(0, 0, 0, 0, 0, 0, seconds),
                        ),
                    )
                ),
                updated_at=func.now(),
            )
            .returning(AssetUploadReservation.id)
        )
        return row is not None

    async def drop_completion_claim(self, owner: str, reservation_id: str, *, token: str) -> None:
        """Give up this attempt's claim (it failed and left the upload open for a retry)."""
        await self._session.execute(
            update(AssetUploadReservation)
            .where(
                AssetUploadReservation.owner_identity == owner,
                AssetUploadReservation.id == reservation_id,
                AssetUploadReservation.request["completing"]["token"].astext == token,
            )
            .values(
                request=AssetUploadReservation.request.op("-")("completing"),
                updated_at=func.now(),
            )
            .execution_options(synchronize_session=False)
        )

    async def free_idempotency_key(self, owner: str, reservation_id: str) -> bool:
        """Detach the idempotency key from a released or expired reservation.

        Such a reservation stored nothing, so its key is free for a new attempt, which opens a
        new reservation (with a new id, so links of the old attempt never come back to life).
        ``False`` if the reservation is not (or no longer) released or expired.
        """
        row = await self._session.scalar(
            update(AssetUploadReservation)
            .where(
                AssetUploadReservation.owner_identity == owner,
                AssetUploadReservation.id == reservation_id,
                AssetUploadReservation.status.in_(("released", "expired")),
            )
            .values(idempotency_key=None, updated_at=func.now())
            .returning(AssetUploadReservation.id)
        )
        return row is not None

    async def _active_locked(
        self, owner: str, reservation_id: str
    ) -> AssetUploadReservation | None:
        """The active reservation, row-locked (callers lock the namespace row first)."""
        return await self._session.scalar(
            select(AssetUploadReservation)
            .where(
                AssetUploadReservation.owner_identity == owner,
                AssetUploadReservation.id == reservation_id,
                AssetUploadReservation.status == "active",
            )
            .with_for_update()
            .execution_options(populate_existing=True)
        )

    async def _lock_with_reservation(self, owner: str, reservation_id: str) -> _Locked:
        """The owner's counters and an active reservation's held bytes, both row-locked.

        One statement for :meth:`usage` (``lock``) and :meth:`_active_locked`: the namespace
        row is locked first (it comes first in the join, and rows are locked in that order), as
        every quota change does, then the reservation. :class:`NotFound` when the reservation
        is not active (or the namespace is missing).
        """
        row = (
            await self._session.execute(
                text(LOCK_WITH_RESERVATION), {"owner": owner, "reservation": reservation_id}
            )
        ).one_or_none()
        if row is None:
            raise NotFound("upload reservation")
        usage = NamespaceUsage(
            owner, row.namespace_id, row.used_bytes, row.reserved_bytes, row.quota_bytes
        )
        return _Locked(usage, row.held)

    async def _move(
        self,
        owner: str,
        reservation_id: str,
        *,
        used: int,
        reserved: int,
        held: int,
        **reservation: Any,
    ) -> None:
        """Shift the owner's counters and set the reservation's held bytes, in one statement."""
        counters = (
            _shift_counters(owner, used=used, reserved=reserved)
            .returning(AssetNamespace.owner_identity)
            .cte("counters")
        )
        await self._session.execute(
            update(AssetUploadReservation)
            .where(AssetUploadReservation.id == reservation_id)
            .values(reserved_bytes=held, updated_at=func.now(), **reservation)
            .add_cte(counters)
            .execution_options(synchronize_session=False)
        )

    async def reserve(self, owner: str, reservation_id: str, nbytes: int) -> NamespaceUsage:
        """Hold ``nbytes`` for this reservation, refusing ``used + reserved + nbytes > quota``.

        One statement, so that a save's hold needs no transaction of its own: it locks both
        rows as :meth:`lock_reservation` does, and moves the bytes only when the quota allows
        (each update reads the rows as the locks left them). Refused, it changes nothing and
        raises ``QuotaExceededError`` with the locked numbers. Returns the counters after
        the change.
        """
        row = (
            await execute_alone(
                self._session,
                text(
                    f"WITH locked AS ({LOCK_WITH_RESERVATION}), counters AS ("  # noqa: S608 (constant SQL)
                    "UPDATE mem_asset_namespaces n SET "
                    "reserved_bytes = n.reserved_bytes + (:need - l.held), updated_at = now() "
                    "FROM locked l WHERE n.owner_identity = :owner "
                    "AND l.used_bytes + (l.reserved_bytes - l.held) + :need <= l.quota_bytes "
                    "RETURNING n.reserved_bytes), held AS ("
                    "UPDATE mem_asset_upload_reservations r "
                    "SET reserved_bytes = :need, updated_at = now() "
                    "FROM counters WHERE r.id = :reservation RETURNING r.id) "
                    "SELECT l.namespace_id, l.used_bytes, l.reserved_bytes, l.quota_bytes, "
                    "l.held, (SELECT reserved_bytes FROM counters) AS now_reserved, "
                    "(SELECT count(*) FROM held) AS moved FROM locked l"
                ),
                {"owner": owner, "reservation": reservation_id, "need": nbytes},
            )
        ).one_or_none()
        if row is None:
            raise NotFound("upload reservation")
        if not row.moved:
            raise QuotaExceededError(
                used=row.used_bytes,
                reserved=row.reserved_bytes - row.held,
                requested=nbytes,
                quota=row.quota_bytes,
            )
        return NamespaceUsage(
            owner, row.namespace_id, row.used_bytes, row.now_reserved, row.quota_bytes
        )

    async def reserve_for_copies(
        self,
        owner: str,
        reservation_id: str,
        *,
        sha256: str,
        within: timedelta,
        new_bytes: int,
        shared_bytes: int,
    ) -> tuple[bool, bool, QuarantineReason | None]:
        """Read what the owner stores of ``sha256`` and hold what a save of it adds, at once.

        One statement: ``ObjectRepository.copies``'s read, then :meth:`reserve`'s hold of
        ``shared_bytes`` when the owner has a copy in use or one deleted at most ``within``
        ago (the save shares or takes it back), else ``new_bytes``. Nothing is held when the
        only copies are quarantined: the save is refused for them. Returns the copies as
        ``ObjectRepository.copies`` does; raises ``QuotaExceededError`` (nothing changed) and
        ``NotFound`` (the reservation is not active) as :meth:`reserve` does.
        """
        row = (
            await execute_alone(
                self._session,
                text(
                    f"WITH copies AS ({COPIES_SQL}), want AS (SELECT CASE "  # noqa: S608 (constant SQL)
                    "WHEN EXISTS (SELECT 1 FROM copies WHERE status = 'available' "
                    "OR (status = 'deleting' AND recent)) THEN CAST(:shared AS bigint) "
                    "WHEN EXISTS (SELECT 1 FROM copies WHERE status = 'quarantined') THEN NULL "
                    "ELSE CAST(:new AS bigint) END AS need), "
                    f"locked AS ({LOCK_WITH_RESERVATION}), counters AS ("
                    "UPDATE mem_asset_namespaces n SET "
                    "reserved_bytes = n.reserved_bytes + (w.need - l.held), updated_at = now() "
                    "FROM locked l, want w WHERE n.owner_identity = :owner "
                    "AND l.used_bytes + (l.reserved_bytes - l.held) + w.need <= l.quota_bytes "
                    "RETURNING n.reserved_bytes), held AS ("
                    "UPDATE mem_asset_upload_reservations r "
                    "SET reserved_bytes = w.need, updated_at = now() "
                    "FROM counters, want w WHERE r.id = :reservation RETURNING r.id) "
                    "SELECT l.used_bytes, l.reserved_bytes, l.quota_bytes, l.held, "
                    "(SELECT need FROM want) AS need, (SELECT count(*) FROM held) AS moved, "
                    "(SELECT json_agg(json_build_array(status, recent, integrity)) "
                    "FROM copies) AS copies FROM locked l"
                ),
                {
                    "owner": owner,
                    "reservation": reservation_id,
                    "o": owner,
                    "s": sha256,
                    "within": within,
                    "codes": list(INTEGRITY_CODES),
                    "new": new_bytes,
                    "shared": shared_bytes,
                },
            )
        ).one_or_none()
        if row is None:
            raise NotFound("upload reservation")
        copies = row.copies
        if isinstance(copies, str):
            copies = json.loads(copies)
        found = copies_found([(str(c[0]), bool(c[1]), bool(c[2])) for c in copies or ()])
        if row.need is not None and not row.moved:
            raise QuotaExceededError(
                used=row.used_bytes,
                reserved=row.reserved_bytes - row.held,
                requested=int(row.need),
                quota=row.quota_bytes,
            )
        return found

    async def lock_reservation(self, owner: str, reservation_id: str) -> int:
        """Lock the owner's counters and an active reservation; the bytes it holds.

        What :meth:`usage` with ``lock`` does, and the reservation too, in one statement
        (``NotFound`` when the reservation is not active): a save's commit takes both locks
        first, and passes the held bytes to :meth:`finalize`, which then reads nothing.
        """
        return (await self._lock_with_reservation(owner, reservation_id)).held

    async def finalize(
        self,
        owner: str,
        reservation_id: str,
        *,
        asset_id: str,
        used_bytes: int,
        held: int | None = None,
    ) -> None:
        """Turn the held bytes into ``used_bytes`` of real usage and close the reservation.

        ``held``: what :meth:`lock_reservation` answered earlier in this transaction (the
        locks are held, so it cannot have changed); without it, the rows are locked here.
        """
        if held is None:
            held = (await self._lock_with_reservation(owner, reservation_id)).held
        await self._move(
            owner,
            reservation_id,
            used=used_bytes,
            reserved=-held,
            held=0,
            status="finalized",
            asset_id=asset_id,
        )

    async def release(self, owner: str, reservation_id: str, *, status: str = "released") -> None:
        """Give the held bytes back (a failed or abandoned upload). Idempotent."""
        await self.usage(owner, lock=True)
        row = await self._active_locked(owner, reservation_id)
        if row is None:
            return
        await self._shift(owner, reserved=-row.reserved_bytes)
        await self._set(reservation_id, reserved_bytes=0, status=status)

    async def release_expired(self, *, limit: int = 200, owner: str | None = None) -> int:
        """Expire active reservations past their deadline and release their bytes.

        ``owner`` limits it to one namespace (``memory-server reconcile --owner``).
        """
        only = () if owner is None else (AssetUploadReservation.owner_identity == owner,)
        rows = (
            await self._session.execute(
                select(AssetUploadReservation.owner_identity, AssetUploadReservation.id)
                .where(
                    AssetUploadReservation.status == "active",
                    AssetUploadReservation.expires_at < func.now(),
                    *only,
                )
                .order_by(AssetUploadReservation.owner_identity)
                .limit(limit)
            )
        ).all()
        for owner, reservation_id in rows:
            await self.release(owner, reservation_id, status="expired")
        return len(rows)

    async def add_used(self, owner: str, delta: int) -> None:
        """Adjust used bytes outside a reservation (deletions, vector bytes of late jobs)."""
        await self.usage(owner, lock=True)
        await self._shift(owner, used=delta)
