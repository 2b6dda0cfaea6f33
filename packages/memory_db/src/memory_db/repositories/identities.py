"""The identity plane: identities, API keys, vaults and grants.

These are the only repositories not scoped to a vault: they *produce* the scopes. Lookups go by
an owner identity or by the hash of a presented key, never by a bare row id on behalf of a caller.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    DateTime,
    Text,
    Update,
    column,
    func,
    select,
    text,
    update,
    values,
)
from sqlalchemy.ext.asyncio import AsyncSession

from memory_db.errors import Conflict, InvalidInput, NotFound
from memory_db.ids import new_id
from memory_db.repositories._base import SessionRepository, record_from_row
from memory_db.repositories._text import has_forbidden_characters
from memory_db.repositories.access_changes import (
    ApiKeyCache,
    key_id_entry,
    mark_access_changed,
)
from memory_db.repositories.openings import split_vault_handle
from memory_db.repositories.records import (
    ApiKeyRecord,
    GrantRecord,
    IdentityRecord,
    VaultRecord,
)
from memory_db.schema import (
    API_KEY_SCOPES,
    GRANT_PERMISSIONS,
    ApiKey,
    AssetNamespace,
    Identity,
    Vault,
    VaultGrant,
)

DEFAULT_VAULT = "Library"
API_KEY_PREFIX = "mk_"
_EMAIL_RE = re.compile(
    r"^[a-z0-9.!#$%&'*+/=?^_`{|}~-]+@[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)+$"
)
_HANDLE_RE = re.compile(r"^[^/]{1,64}$")


def normalise_identity(value: str) -> str:
    """Lower-case and validate an owner identity (an e-mail address)."""
    candidate = value.strip().lower()
    if len(candidate) > 254 or not _EMAIL_RE.fullmatch(candidate):
        raise InvalidInput(
            f"owner identity must be an e-mail address ({len(value)} characters given)"
        )
    return candidate


def validate_vault_handle(handle: str) -> str:
    """Validate a vault handle: 1-64 characters, no '/', no control characters, trimmed."""
    if (
        handle != handle.strip()
        or not _HANDLE_RE.fullmatch(handle)
        or has_forbidden_characters(handle)
    ):
        raise InvalidInput(
            "vault name must be 1-64 characters without '/', surrounding spaces, control "
            "characters, bidirectional overrides or other invisible characters (zero-width, "
            "soft hyphen, BOM, tags, line separators)"
        )
    return handle


def hash_api_key(secret: str) -> str:
    """SHA-256 of a presented key. Keys carry 256 random bits, so a fast hash is sufficient."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def _key_shaped(secret: str) -> bool:
    """Whether ``secret`` could be a key at all (anything else is refused unread)."""
    return secret.startswith(API_KEY_PREFIX) and len(secret) <= 200


def cached_api_key(cache: ApiKeyCache | None, secret: str) -> ApiKeyRecord | None:
    """The active key ``secret`` as ``cache`` holds it, with no connection and no statement.

    None when the cache cannot answer: it holds no such key, it is not believed now (its
    watch is not listening), or ``secret`` is no key. :meth:`ApiKeyRepository.use` then
    decides, with the database.
    """
    if cache is None or not _key_shaped(secret):
        return None
    return cache.get(hash_api_key(secret))


def _validate_scopes(scopes: Iterable[str]) -> tuple[str, ...]:
    ordered = tuple(dict.fromkeys(s.strip() for s in scopes if s.strip()))
    unknown = [s for s in ordered if s not in API_KEY_SCOPES]
    if not ordered or unknown:
        raise InvalidInput(
            f"scopes must be a non-empty subset of {', '.join(API_KEY_SCOPES)}"
            + (f"; unknown: {', '.join(unknown)}" if unknown else "")
        )
    return ordered


def key_usable() -> ColumnElement[bool]:
    """Whether a key may authenticate: neither revoked nor paused (revision 0023)."""
    return ApiKey.revoked_at.is_(None) & ApiKey.paused_at.is_(None)


def key_record(row: ApiKey) -> ApiKeyRecord:
    """The record of a key row (without its secret, which is never stored)."""
    return record_from_row(ApiKeyRecord, row, scopes=tuple(row.scopes))


def _vault_record(row: Vault, permission: str) -> VaultRecord:
    return record_from_row(VaultRecord, row, permission=permission)


def _grant_record(row: VaultGrant) -> GrantRecord:
    return record_from_row(GrantRecord, row)


# The largest quota the bigint column holds.
MAX_QUOTA_BYTES = 2**63 - 1


class IdentityRepository(SessionRepository):
    """Owner identities, their namespaces and their default vault."""

    async def create(self, owner_identity: str, quota_bytes: int) -> IdentityRecord:
        """Create an identity with its opaque namespace and a default vault ``Library``."""
        owner = normalise_identity(owner_identity)
        if not 0 <= quota_bytes <= MAX_QUOTA_BYTES:
            raise InvalidInput(f"quota must be between 0 and {MAX_QUOTA_BYTES} bytes")
        if await self._session.get(Identity, owner) is not None:
            raise Conflict("an identity with this e-mail address already exists")
        identity = Identity(owner_identity=owner, quota_bytes=quota_bytes)
        namespace = AssetNamespace(owner_identity=owner, namespace_id=new_id("ans"))
        self._session.add(identity)
        await self._session.flush()
        self._session.add(namespace)
        self._session.add(
            Vault(
                id=new_id("avt"),
                owner_identity=owner,
                handle=DEFAULT_VAULT,
                physical_vault=f"{owner}/{DEFAULT_VAULT}",
            )
        )
        await self._session.flush()
        await self._session.refresh(identity)
        return IdentityRecord(owner, quota_bytes, namespace.namespace_id, identity.created_at)

    async def get(self, owner_identity: str) -> IdentityRecord:
        """The identity, or ``NotFound``."""
        owner = owner_identity.strip().lower()
        row = (
            await self._session.execute(
                select(Identity, AssetNamespace.namespace_id)
                .join(AssetNamespace, AssetNamespace.owner_identity == Identity.owner_identity)
                .where(Identity.owner_identity == owner)
            )
        ).one_or_none()
        if row is None:
            raise NotFound("identity")
        identity, namespace_id = row
        return IdentityRecord(
            identity.owner_identity, identity.quota_bytes, namespace_id, identity.created_at
        )


class ApiKeyRepository(SessionRepository):
    """API keys: created once (the secret is shown once), resolved by hash, revocable.

    ``cache``: this process's :class:`ApiKeyCache`, which :meth:`use` reads first.
    """

    def __init__(self, session: AsyncSession, cache: ApiKeyCache | None = None) -> None:
        super().__init__(session)
        self._cache = cache

    async def create(
        self,
        owner_identity: str,
        scopes: Iterable[str],
        label: str | None = None,
        *,
        note: str | None = None,
    ) -> tuple[ApiKeyRecord, str]:
        """Create a key; return its record and the secret (which is not stored).

        ``note``: why the key was made (1-500 characters), shown beside it.
        """
        owner = owner_identity.strip().lower()
        checked = _validate_scopes(scopes)
        if label is not None and (
            not label.strip() or len(label) > 120 or has_forbidden_characters(label)
        ):
            raise InvalidInput(
                "key label must be 1-120 characters, not only spaces, without control "
                "characters, bidirectional overrides or other invisible characters"
            )
        if note is not None and (
            not note.strip() or len(note) > 500 or has_forbidden_characters(note)
        ):
            raise InvalidInput(
                "key note must be 1-500 characters on one line, not only spaces, without "
                "control characters, bidirectional overrides or other invisible characters"
            )
        if await self._session.get(Identity, owner) is None:
            raise NotFound("identity")
        secret = API_KEY_PREFIX + secrets.token_urlsafe(32)
        row = ApiKey(
            id=new_id("akey"),
            owner_identity=owner,
            key_hash=hash_api_key(secret),
            label=label,
            note=note,
            scopes=list(checked),
        )
        self._session.add(row)
        await self._session.flush()
        await self._session.refresh(row)
        return key_record(row), secret

    async def resolve(self, secret: str) -> ApiKeyRecord | None:
        """The active key whose secret is ``secret``, or None (unknown, paused or revoked)."""
        if not _key_shaped(secret):
            return None
        row = (
            await self._session.execute(
                select(ApiKey).where(ApiKey.key_hash == hash_api_key(secret), key_usable())
            )
        ).scalar_one_or_none()
        return None if row is None else key_record(row)

    async def is_active(self, key_id: str) -> bool:
        """Whether the key ``key_id`` exists and is usable (for calls that outlive a check).

        No round trip when the cache holds the key: a revocation clears it in every process
        before it returns.
        """
        if self._cache is not None and self._cache.get(key_id_entry(key_id)) is not None:
            return True
        found = await self._session.scalar(
            select(ApiKey.id).where(ApiKey.id == key_id, key_usable())
        )
        return found is not None

    async def touch(self, key_id: str) -> None:
        """Record that the key was used (at most once a minute, to spare writes)."""
        await self._session.execute(touch_keys(ApiKey.id == key_id))

    async def use(self, secret: str) -> ApiKeyRecord | None:
        """:meth:`resolve` and :meth:`touch` in one statement, or no statement on a cache hit.

        Every tool call and every MCP HTTP request authenticates this way. With a cache whose
        watch listens, an active key read in the last minute costs no round trip; the read
        that refreshes it also records the use (so ``last_used_at`` lags by at most about two
        minutes). The answer shows the key as it was when read (``last_used_at`` before that
        read's own touch).
        """
        if not _key_shaped(secret):
            return None
        if (cached := cached_api_key(self._cache, secret)) is not None:
            return cached
        key_hash = hash_api_key(secret)
        cache = self._cache
        ticket = None if cache is None else cache.ticket()
        active = (ApiKey.key_hash == key_hash) & key_usable()
        touched = touch_keys(active).returning(ApiKey.id).cte("touched")
        row = (
            await self._session.execute(select(ApiKey).where(active).add_cte(touched))
        ).scalar_one_or_none()
        if row is None:
            return None
        record = key_record(row)
        if cache is not None:
            cache.put(ticket, key_hash, record)
            cache.put(ticket, key_id_entry(record.id), record)
        return record

    async def is_paused(self, secret: str) -> bool:
        """Whether ``secret`` is a paused (unrevoked) key: to say so when refusing it.

        Read only on the way to a refusal, so an accepted call costs nothing more.
        """
        if not _key_shaped(secret):
            return False
        found = await self._session.scalar(
            select(ApiKey.id).where(
                ApiKey.key_hash == hash_api_key(secret),
                ApiKey.revoked_at.is_(None),
                ApiKey.paused_at.is_not(None),
            )
        )
        return found is not None

    async def get(self, key_id: str) -> ApiKeyRecord:
        """The key ``key_id`` (any owner: callers check whose it is), or ``NotFound``."""
        row = await self._session.get(ApiKey, key_id) if key_id.startswith("akey_") else None
        if row is None:
            raise NotFound("api key", key_id)
        return key_record(row)

    async def revoke(self, key_id: str) -> ApiKeyRecord:
        """Revoke a key (idempotent). Operator action."""
        row = await self._session.get(ApiKey, key_id)
        if row is None:
            raise NotFound("api key", key_id)
        if row.revoked_at is None:
            row.revoked_at = datetime.now(UTC)
            await self._session.flush()
            mark_access_changed(self._session)
        return key_record(row)

    async def set_paused(self, key_id: str, paused: bool) -> tuple[ApiKeyRecord, bool]:
        """Pause or resume a key; return it and whether that changed anything.

        Repeating either changes nothing (and notifies nothing). A revoked key is revoked for
        good: pausing or resuming it is a ``Conflict``.
        """
        row = await self._session.get(ApiKey, key_id)
        if row is None:
            raise NotFound("api key", key_id)
        if row.revoked_at is not None:
            raise Conflict(f"key {key_id} is revoked for good; create a new key instead")
        if (row.paused_at is not None) == paused:
            return key_record(row), False
        row.paused_at = datetime.now(UTC) if paused else None
        await self._session.flush()
        mark_access_changed(self._session)
        return key_record(row), True

    async def list_for(
        self, owner_identity: str, *, label: str | None = None
    ) -> list[ApiKeyRecord]:
        """All keys of one identity, newest first; ``label`` keeps those with exactly that label."""
        query = select(ApiKey).where(ApiKey.owner_identity == owner_identity.strip().lower())
        if label is not None:
            query = query.where(ApiKey.label == label)
        rows = await self._session.scalars(query.order_by(ApiKey.created_at.desc(), ApiKey.id))
        return [key_record(row) for row in rows]

    async def listed(self, owner_identity: str | None, *, limit: int) -> list[ApiKeyRecord]:
        """Up to ``limit`` keys of one identity (``None``: everyone's), newest first.

        With their counters (calls, searches, saves: revisions 0023, 0025); nothing is counted
        at read time, so the listing reads the keys alone.
        """
        query = select(ApiKey)
        if owner_identity is not None:
            query = query.where(ApiKey.owner_identity == owner_identity.strip().lower())
        rows = await self._session.scalars(
            query.order_by(ApiKey.created_at.desc(), ApiKey.id).limit(limit)
        )
        return [key_record(row) for row in rows]

    async def add_activity(self, counts: Mapping[str, tuple[int, int, int]]) -> None:
        """Add ``(calls, searches, saves)`` to each key's counters, in one statement.

        Not a change of access: the trigger of revision 0021 does not fire on the counters.
        """
        if not counts:
            return
        added = values(
            column("key_id", Text),
            column("calls", BigInteger),
            column("searches", BigInteger),
            column("saves", BigInteger),
            name="added",
        ).data([(key_id, *counted) for key_id, counted in sorted(counts.items())])
        await self._session.execute(
            update(ApiKey)
            .where(ApiKey.id == added.c.key_id)
            .values(
                calls=ApiKey.calls + added.c.calls,
                searches=ApiKey.searches + added.c.searches,
                saves=ApiKey.saves + added.c.saves,
            )
        )


def touch_keys(which: ColumnElement[bool]) -> Update:
    """Set ``last_used_at`` of the keys ``which`` selects, unless it is under a minute old.

    An ``UPDATE`` to run as a statement or as a data-modifying CTE beside a read.
    """
    return (
        update(ApiKey)
        .where(
            which,
            (ApiKey.last_used_at.is_(None))
            | (ApiKey.last_used_at < func.now() - func.make_interval(0, 0, 0, 0, 0, 1)),
        )
        .values(last_used_at=func.now())
    )


# Every vault an identity (``:viewer``, trimmed and lower-cased) may use, as
# ``accessible`` lists them: its own by name, then those shared with it by owner and name.
# For a statement that resolves the caller's scope beside other work (a search's first).
ACCESSIBLE_VAULTS_SQL = (
    "SELECT v.id, v.owner_identity, v.handle, v.physical_vault, 'owner' AS permission, "
    "v.created_at, 0 AS shared, '' AS by_owner, lower(v.handle) AS by_name "
    "FROM mem_vaults v WHERE v.owner_identity = :viewer "
    "UNION ALL SELECT v.id, v.owner_identity, v.handle, v.physical_vault, g.permission, "
    "v.created_at, 1, v.owner_identity, lower(v.handle) FROM mem_vaults v "
    "JOIN mem_vault_grants g ON g.physical_vault = v.physical_vault "
    "AND g.owner_identity = v.owner_identity WHERE g.grantee_identity = :viewer"
)


def vault_from_json(row: list[Any]) -> VaultRecord:
    """A vault of :data:`ACCESSIBLE_VAULTS_SQL` read back as a JSON array.

    In the order id, owner, handle, physical vault, permission, created at.
    """
    return VaultRecord(
        id=str(row[0]),
        owner_identity=str(row[1]),
        handle=str(row[2]),
        physical_vault=str(row[3]),
        permission=str(row[4]),
        created_at=datetime.fromisoformat(str(row[5])),
    )


# The caller's vaults in the order a search lists them (``vectors.ranking``).
_ACCESSIBLE = text(
    "SELECT id, owner_identity, handle, physical_vault, permission, created_at "  # noqa: S608 (constant SQL)
    f"FROM ({ACCESSIBLE_VAULTS_SQL}) vaults ORDER BY shared, by_owner, by_name"
).columns(
    column("id", Text),
    column("owner_identity", Text),
    column("handle", Text),
    column("physical_vault", Text),
    column("permission", Text),
    column("created_at", DateTime(timezone=True)),
)


class VaultRepository(SessionRepository):
    """Vaults, grants, and the resolution of a caller-visible handle."""

    async def create(self, owner_identity: str, handle: str) -> VaultRecord:
        """Create a vault ``handle`` for ``owner_identity``."""
        owner = owner_identity.strip().lower()
        validate_vault_handle(handle)
        if await self._session.get(Identity, owner) is None:
            raise NotFound("identity")
        row = Vault(
            id=new_id("avt"),
            owner_identity=owner,
            handle=handle,
            physical_vault=f"{owner}/{handle}",
        )
        taken = Conflict(f"a vault named {handle!r} already exists")
        await self._flush_refusing(
            lambda: self._session.add(row),
            {"uq_mem_vaults_owner_handle": taken, "uq_mem_vaults_physical_vault": taken},
        )
        await self._session.refresh(row)
        return _vault_record(row, "owner")

    async def grant(
        self, owner_identity: str, handle: str, grantee_identity: str, permission: str
    ) -> GrantRecord:
        """Grant (or change) ``permission`` on one vault to another identity."""
        if permission not in GRANT_PERMISSIONS:
            raise InvalidInput(f"permission must be one of {', '.join(GRANT_PERMISSIONS)}")
        owner = owner_identity.strip().lower()
        grantee = grantee_identity.strip().lower()
        if owner == grantee:
            raise InvalidInput("an owner already has every permission on their vaults")
        vault = await self._owned(owner, handle)
        if await self._session.get(Identity, grantee) is None:
            raise NotFound("identity")
        existing = (
            await self._session.execute(
                select(VaultGrant).where(
                    VaultGrant.physical_vault == vault.physical_vault,
                    VaultGrant.grantee_identity == grantee,
                )
            )
        ).scalar_one_or_none()
        if existing is None:
            existing = VaultGrant(
                id=new_id("agr"),
                owner_identity=owner,
                physical_vault=vault.physical_vault,
                grantee_identity=grantee,
                permission=permission,
            )
            self._session.add(existing)
        else:
            existing.permission = permission
        await self._session.flush()
        mark_access_changed(self._session)
        await self._session.refresh(existing)
        return _grant_record(existing)

    async def revoke_grant(
        self, owner_identity: str, handle: str, grantee_identity: str
    ) -> GrantRecord | None:
        """Remove a grant; return what was removed, or None when there was none."""
        vault = await self._owned(owner_identity.strip().lower(), handle)
        row = (
            await self._session.execute(
                select(VaultGrant).where(
                    VaultGrant.physical_vault == vault.physical_vault,
                    VaultGrant.grantee_identity == grantee_identity.strip().lower(),
                )
            )
        ).scalar_one_or_none()
        if row is None:
            return None
        removed = _grant_record(row)
        await self._session.delete(row)
        await self._session.flush()
        mark_access_changed(self._session)
        return removed

    async def grants(self, owner_identity: str, handle: str) -> list[GrantRecord]:
        """The grants of one of ``owner_identity``'s vaults, by grantee."""
        vault = await self._owned(owner_identity.strip().lower(), handle)
        rows = await self._session.scalars(
            select(VaultGrant)
            .where(VaultGrant.physical_vault == vault.physical_vault)
            .order_by(VaultGrant.grantee_identity)
        )
        return [_grant_record(row) for row in rows]

    async def accessible(self, identity: str) -> list[VaultRecord]:
        """Every vault ``identity`` may use: its own by name, then the shared ones by owner, name.

        One statement, the search's own (:data:`ACCESSIBLE_VAULTS_SQL`), read as plain rows:
        a listing or a get resolves the caller's vaults in one round trip, not two.
        """
        rows = await self._session.execute(_ACCESSIBLE, {"viewer": identity.strip().lower()})
        return [VaultRecord(*row) for row in rows.all()]

    async def resolve(self, identity: str, handle: str) -> VaultRecord:
        """Resolve a caller-visible handle for ``identity``.

        ``Name`` names one of the caller's own vaults (case-insensitively);
        ``owner@example.com/Name`` names a vault shared with the caller (or the caller's own).
        Anything else, including another owner's vault that is not shared, is ``NotFound``.
        """
        parts = split_vault_handle(identity, handle)
        if parts is None:
            raise NotFound("vault")
        viewer, owner, name = parts
        row = await self._owned(owner, name)
        if owner == viewer:
            return _vault_record(row, "owner")
        permission = (
            await self._session.execute(
                select(VaultGrant.permission).where(
                    VaultGrant.physical_vault == row.physical_vault,
                    VaultGrant.grantee_identity == viewer,
                )
            )
        ).scalar_one_or_none()
        if permission is None:
            raise NotFound("vault")
        return _vault_record(row, permission)

    async def _owned(self, owner: str, handle: str) -> Vault:
        row = (
            await self._session.execute(
                select(Vault).where(
                    Vault.owner_identity == owner, func.lower(Vault.handle) == handle.lower()
                )
            )
        ).scalar_one_or_none()
        if row is None:
            raise NotFound("vault")
        return row
