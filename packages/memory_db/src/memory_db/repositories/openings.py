"""A save's opening in one statement (issue 31): the vault, the namespace, the reservation.

Opening a save resolves the vault the caller named (their own, or one shared with them), reads
the owner's namespace (the storage keys name it, so it is needed before any byte is stored)
and inserts the reservation under the caller's idempotency key, or finds the one an earlier
request with that key opened. Three statements before; one here, sent outside a transaction.

The insert happens only when the vault exists, the caller's permission on it is one the
operation allows, and the owner has a namespace: the statement returns what it found either
way, so the caller refuses with the same errors as before and nothing was written. The earlier
reservation is read with the statement's snapshot; one that a concurrent request committed
after that snapshot skips the insert (``ON CONFLICT``) without being seen, and the caller reads
it with a statement of its own (:meth:`QuotaRepository.open_reservation` does the same).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import DateTime, text
from sqlalchemy.dialects.postgresql import JSONB

from memory_db.ids import new_id
from memory_db.repositories._base import SessionRepository
from memory_db.repositories.records import ReservationRecord, VaultRecord

_RESERVATION_COLUMNS = (
    "id",
    "owner_identity",
    "operation",
    "idempotency_key",
    "expected_bytes",
    "reserved_bytes",
    "status",
    "asset_id",
    "vault",
    "object_id",
    "request",
    "expires_at",
)

_OPEN = text(
    """
WITH vault AS (
    SELECT v.id, v.owner_identity, v.handle, v.physical_vault, v.created_at,
           CASE WHEN v.owner_identity = :viewer THEN 'owner' ELSE g.permission END AS permission
    FROM mem_vaults v
    LEFT JOIN mem_vault_grants g
        ON g.physical_vault = v.physical_vault AND g.grantee_identity = :viewer
    WHERE v.owner_identity = :owner AND lower(v.handle) = lower(:name)
), target AS (
    -- Only a vault the caller may use for this operation, of an owner with a namespace,
    -- takes a reservation.
    SELECT vault.owner_identity, vault.physical_vault
    FROM vault JOIN mem_asset_namespaces n ON n.owner_identity = vault.owner_identity
    WHERE vault.permission = ANY(CAST(:permissions AS text[]))
), inserted AS (
    INSERT INTO mem_asset_upload_reservations
        (id, owner_identity, operation, idempotency_key, expected_bytes, vault, object_id,
         request, expires_at)
    SELECT :id, t.owner_identity, :operation, :idempotency_key, :expected_bytes,
           t.physical_vault, :object_id, CAST(:request AS jsonb),
           CAST(:expires_at AS timestamptz)
    FROM target t
    ON CONFLICT (owner_identity, operation, idempotency_key)
        WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING true AS created, id, owner_identity, operation, idempotency_key, expected_bytes,
              reserved_bytes, status, asset_id, vault, object_id, request, expires_at
), earlier AS (
    SELECT false AS created, r.id, r.owner_identity, r.operation, r.idempotency_key,
           r.expected_bytes, r.reserved_bytes, r.status, r.asset_id, r.vault, r.object_id,
           r.request, r.expires_at
    FROM mem_asset_upload_reservations r JOIN target t ON r.owner_identity = t.owner_identity
    WHERE r.operation = :operation AND r.idempotency_key = :idempotency_key
), reservation AS (
    SELECT * FROM inserted UNION ALL SELECT * FROM earlier
)
SELECT vault.id AS vault_id, vault.owner_identity AS vault_owner, vault.handle,
       vault.physical_vault, vault.created_at AS vault_created_at, vault.permission,
       n.namespace_id,
       r.created, r.id, r.owner_identity, r.operation, r.idempotency_key, r.expected_bytes,
       r.reserved_bytes, r.status, r.asset_id, r.vault, r.object_id, r.request, r.expires_at
FROM vault
LEFT JOIN mem_asset_namespaces n ON n.owner_identity = vault.owner_identity
LEFT JOIN reservation r ON true
ORDER BY r.created DESC NULLS LAST
LIMIT 1
"""
).columns(request=JSONB, expires_at=DateTime(timezone=True))


def split_vault_handle(identity: str, handle: str) -> tuple[str, str, str] | None:
    """``(viewer, owner, name)`` of a caller-visible vault handle, normalised; ``None``: none.

    ``Name`` names one of the caller's own vaults (case-insensitively);
    ``owner@example.com/Name`` names a vault shared with the caller (or the caller's own).
    An empty name or an overlong handle names no vault.
    """
    viewer = identity.strip().lower()
    owner, _, name = handle.rpartition("/")
    owner = owner.strip().lower() or viewer
    if not name or len(handle) > 400:
        return None
    return viewer, owner, name


@dataclass(frozen=True, slots=True)
class ReservationAttempt:
    """What a reservation is opened for (the columns of its row the caller chooses)."""

    operation: str
    idempotency_key: str | None
    expected_bytes: int
    expires_at: datetime
    request: Mapping[str, Any]
    object_id: str | None = None


@dataclass(frozen=True, slots=True)
class Opening:
    """What opening found: the vault as the caller sees it, and what was reserved.

    ``vault`` is ``None`` when the handle names no vault the caller can see (another owner's
    unshared vault included); ``namespace_id`` is ``None`` when its owner has no namespace.
    ``reservation`` is ``None`` when nothing was inserted or found: the caller's permission
    does not allow the operation, there is no namespace, or an earlier reservation under the
    key was committed after the statement's snapshot (read it with
    :meth:`QuotaRepository.open_reservation`). ``created`` says whether it is new.
    """

    vault: VaultRecord | None
    namespace_id: str | None
    reservation: ReservationRecord | None
    created: bool


class OpeningRepository(SessionRepository):
    """A save's opening: vault, namespace and reservation in one statement."""

    async def open_in_vault(
        self,
        viewer: str,
        owner: str,
        name: str,
        *,
        permissions: Collection[str],
        attempt: ReservationAttempt,
    ) -> Opening:
        """Resolve ``owner``'s vault ``name`` for ``viewer`` and reserve in it if allowed.

        ``viewer`` and ``owner`` are normalised identities (:func:`split_vault_handle`);
        ``permissions`` the vault permissions the operation needs.
        """
        row = (
            (
                await self._session.execute(
                    _OPEN,
                    {
                        "viewer": viewer,
                        "owner": owner,
                        "name": name,
                        "permissions": sorted(permissions),
                        "id": new_id("aur"),
                        "operation": attempt.operation,
                        "idempotency_key": attempt.idempotency_key,
                        "expected_bytes": attempt.expected_bytes,
                        "object_id": attempt.object_id,
                        "request": json.dumps(dict(attempt.request)),
                        "expires_at": attempt.expires_at,
                    },
                )
            )
            .mappings()
            .one_or_none()
        )
        if row is None or row["permission"] is None:
            return Opening(None, None, None, created=False)
        vault = VaultRecord(
            id=row["vault_id"],
            owner_identity=row["vault_owner"],
            handle=row["handle"],
            physical_vault=row["physical_vault"],
            permission=row["permission"],
            created_at=row["vault_created_at"],
        )
        if row["id"] is None:
            return Opening(vault, row["namespace_id"], None, created=False)
        values = {column: row[column] for column in _RESERVATION_COLUMNS}
        values["request"] = dict(values["request"])
        return Opening(
            vault, row["namespace_id"], ReservationRecord(**values), created=bool(row["created"])
        )
