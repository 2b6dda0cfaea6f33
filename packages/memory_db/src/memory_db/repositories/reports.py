"""Operator reports across owners: identities, vaults, bytes by project, tokens by month.

Operator commands (``memory-server admin list-* / usage``) read these for any owner; the web
app's usage page reads ``bytes_by_project`` and ``tokens_by_month`` for the signed-in caller's
own identity only (``memory_tools.workflows.usage``). Each report is one statement that PostgreSQL
aggregates, so its cost is one round trip whatever the number of rows it summarises.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Integer, String, and_, func, literal, select

from memory_db.repositories._base import SessionRepository, asset_object_join
from memory_db.schema import (
    ApiKey,
    Asset,
    AssetNamespace,
    AssetObject,
    AssetProject,
    Identity,
    UsageLedgerEntry,
    Vault,
    VaultGrant,
)

# Assets whose bytes belong to a project in the report; deleted ones (and those being deleted)
# are left out, though their bytes count in ``used_bytes`` until the purge.
_LIVE_ASSET_STATUSES = ("processing", "ready", "failed")


@dataclass(frozen=True, slots=True)
class IdentitySummary:
    """One identity as an operator sees it."""

    owner_identity: str
    quota_bytes: int
    used_bytes: int
    reserved_bytes: int
    created_at: datetime
    active_keys: int  # neither paused nor revoked
    revoked_keys: int
    vaults: int
    paused_keys: int  # paused, not revoked


@dataclass(frozen=True, slots=True)
class VaultSummary:
    """One vault of an owner with how many grants and live images it has."""

    id: str
    handle: str
    physical_vault: str
    created_at: datetime
    grants: int
    assets: int


@dataclass(frozen=True, slots=True)
class ProjectBytes:
    """Bytes of the live images of one project (``project_id`` None: Unfiled) in one vault."""

    vault_handle: str
    project_id: str | None
    project_name: str | None
    project_status: str | None
    assets: int
    original_bytes: int
    preview_bytes: int


@dataclass(frozen=True, slots=True)
class MonthlyTokens:
    """Provider tokens of one owner in one calendar month (UTC), per source and model."""

    month: str  # YYYY-MM
    source: str
    model: str
    calls: int
    total_tokens: int
    prompt_tokens: int
    image_tokens: int


class ReportRepository(SessionRepository):
    """Read-only summaries for operators; nothing here is scoped to a caller."""

    async def identities(self) -> list[IdentitySummary]:
        """Every identity with its counters and key and vault counts, by e-mail address."""
        owner = Identity.owner_identity
        # Active: usable now. Paused: not revoked, but refused until resumed. A revoked key
        # counts as revoked whether or not it was paused first.
        active = (
            select(func.count())
            .where(
                ApiKey.owner_identity == owner,
                ApiKey.revoked_at.is_(None),
                ApiKey.paused_at.is_(None),
            )
            .correlate(Identity)
            .scalar_subquery()
        )
        paused = (
            select(func.count())
            .where(
                ApiKey.owner_identity == owner,
                ApiKey.revoked_at.is_(None),
                ApiKey.paused_at.is_not(None),
            )
            .correlate(Identity)
            .scalar_subquery()
        )
        revoked = (
            select(func.count())
            .where(ApiKey.owner_identity == owner, ApiKey.revoked_at.is_not(None))
            .correlate(Identity)
            .scalar_subquery()
        )
        vaults = (
            select(func.count())
            .where(Vault.owner_identity == owner)
            .correlate(Identity)
            .scalar_subquery()
        )
        rows = await self._session.execute(
            select(
                owner,
                Identity.quota_bytes,
                func.coalesce(AssetNamespace.used_bytes, 0),
                func.coalesce(AssetNamespace.reserved_bytes, 0),
                Identity.created_at,
                active,
                revoked,
                vaults,
                paused,
            )
            .outerjoin(AssetNamespace, AssetNamespace.owner_identity == owner)
            .order_by(owner)
        )
        return [IdentitySummary(*row) for row in rows.all()]

    async def vaults(self, owner_identity: str) -> list[VaultSummary]:
        """The vaults ``owner_identity`` owns, by handle (case-insensitively)."""
        grants = (
            select(func.count())
            .where(VaultGrant.physical_vault == Vault.physical_vault)
            .correlate(Vault)
            .scalar_subquery()
        )
        assets = (
            select(func.count())
            .where(
                Asset.owner_identity == Vault.owner_identity,
                Asset.vault == Vault.physical_vault,
                Asset.status.in_(_LIVE_ASSET_STATUSES),
            )
            .correlate(Vault)
            .scalar_subquery()
        )
        rows = await self._session.execute(
            select(Vault.id, Vault.handle, Vault.physical_vault, Vault.created_at, grants, assets)
            .where(Vault.owner_identity == owner_identity)
            .order_by(func.lower(Vault.handle))
        )
        return [VaultSummary(*row) for row in rows.all()]

    async def bytes_by_project(self, owner_identity: str) -> list[ProjectBytes]:
        """Live image bytes per vault and project; images in no project form ``Unfiled``.

        An image counts its object's original and preview once per project it is in: one
        object saved into two projects counts in both, so the sum can exceed what the owner's
        ``used_bytes`` counts (which stores identical bytes once, and also counts vectors and
        deleted images until their purge).
        """
        rows = await self._session.execute(
            select(
                Vault.handle,
                Asset.project_id,
                AssetProject.name,
                AssetProject.status,
                func.count(Asset.id),
                func.coalesce(func.sum(AssetObject.bytes), 0),
                func.coalesce(func.sum(func.coalesce(AssetObject.preview_bytes, 0)), 0),
            )
            .join(
                Vault,
                and_(
                    Vault.owner_identity == Asset.owner_identity,
                    Vault.physical_vault == Asset.vault,
                ),
            )
            .join(AssetObject, asset_object_join())
            .outerjoin(
                AssetProject,
                and_(
                    AssetProject.id == Asset.project_id,
                    AssetProject.owner_identity == Asset.owner_identity,
                ),
            )
            .where(
                Asset.owner_identity == owner_identity,
                Asset.status.in_(_LIVE_ASSET_STATUSES),
            )
            .group_by(Vault.handle, Asset.project_id, AssetProject.name, AssetProject.status)
            .order_by(
                func.lower(Vault.handle),
                Asset.project_id.is_(None),  # Unfiled last within its vault
                func.lower(AssetProject.name),
            )
        )
        return [
            ProjectBytes(vault, project, name, status, count, int(original), int(preview))
            for vault, project, name, status, count, original, preview in rows.all()
        ]

    async def tokens_by_month(self, owner_identity: str) -> list[MonthlyTokens]:
        """The owner's usage ledger per UTC calendar month, source and model, newest first."""
        month = func.to_char(
            func.date_trunc("month", func.timezone(literal("UTC"), UsageLedgerEntry.created_at)),
            literal("YYYY-MM"),
            type_=String,
        )
        rows = await self._session.execute(
            select(
                month.label("month"),
                UsageLedgerEntry.source,
                UsageLedgerEntry.model,
                func.count(),
                func.sum(UsageLedgerEntry.total_tokens, type_=Integer),
                func.sum(UsageLedgerEntry.prompt_tokens, type_=Integer),
                func.sum(UsageLedgerEntry.image_tokens, type_=Integer),
            )
            .where(UsageLedgerEntry.owner_identity == owner_identity)
            .group_by(month, UsageLedgerEntry.source, UsageLedgerEntry.model)
            .order_by(month.desc(), UsageLedgerEntry.source, UsageLedgerEntry.model)
        )
        return [
            MonthlyTokens(m, source, model, calls, int(total), int(prompt), int(image))
            for m, source, model, calls, total, prompt, image in rows.all()
        ]
