"""The caller's own usage: quota, bytes by project and provider tokens by month.

The same reports the operator reads (``memory-server admin usage``,
:func:`memory_tools.operations.admin.usage`), for the caller's identity only: whose key it is
decides
whose usage is shown, never an argument, so no caller sees another owner's numbers. Needs the
``read`` scope. Projects are those of the caller's own vaults (a shared vault's bytes count
against its owner, not the caller).

Tokens are a provider's: the ledger also counts the inputs of the offline embedders (the
``local-hash`` one, and the ``clip`` model this server runs), which no provider bills, and
those rows are left out here. The operator's report keeps them.
"""

from __future__ import annotations

from pydantic import Field

from memory_db import MemorySettings, NotFound, UnitOfWork
from memory_db.embedding import LOCAL_MODEL
from memory_tools import policy
from memory_tools.access import Caller, require_scope
from memory_tools.services import MemoryServices
from memory_tools.wire import WireModel


class ProjectUsage(WireModel):
    """Live image bytes of one project (or Unfiled) of one of the caller's vaults."""

    vault: str
    project_id: str | None
    project_name: str | None = Field(description="Null for images in no project (Unfiled).")
    project_status: str | None
    assets: int
    bytes: int = Field(description="Originals and previews of its live images.")


class MonthTokens(WireModel):
    """Provider tokens in one UTC calendar month, one source and model."""

    month: str = Field(description="YYYY-MM")
    source: str
    model: str
    calls: int
    total_tokens: int


class MonthTotal(WireModel):
    """All provider tokens of one UTC calendar month."""

    month: str
    total_tokens: int
    calls: int


class UsageView(WireModel):
    """The caller's quota and what uses it."""

    quota_bytes: int
    used_bytes: int = Field(
        description="Stored bytes counted against the quota: identical bytes once, vectors, "
        "and deleted images until their purge."
    )
    reserved_bytes: int = Field(description="Held for uploads and saves in progress.")
    projects: list[ProjectUsage]
    tokens: list[MonthTokens] = Field(description="Newest month first.")
    months: list[MonthTotal] = Field(description="Totals per month, oldest first.")
    provider_embedder: bool = Field(
        description="Whether this server embeds with a provider that bills tokens (false for "
        "the offline embedders, which have none)."
    )


def offline_models(settings: MemorySettings) -> frozenset[str]:
    """Models whose ledger rows are not a provider's tokens: the offline embedders'.

    ``local-hash`` always; a ``clip`` model only when this server runs it (a clip model's name
    is its directory's, which a provider's model could share).
    """
    if settings.asset_embed_provider == "clip":
        return frozenset({LOCAL_MODEL, settings.asset_embed_model})
    return frozenset({LOCAL_MODEL})


async def my_usage(uow: UnitOfWork, caller: Caller, services: MemoryServices) -> UsageView:
    """The caller's own usage report (reads only)."""
    policy.require(services.settings)
    require_scope(caller, "read")
    owner = caller.identity
    try:
        counters = await uow.quota.usage(owner)
        quota, used, reserved = counters.quota_bytes, counters.used_bytes, counters.reserved_bytes
    except NotFound:
        quota = used = reserved = 0  # an identity without a namespace has stored nothing
    offline = offline_models(services.settings)
    tokens = [row for row in await uow.reports.tokens_by_month(owner) if row.model not in offline]
    totals: dict[str, MonthTotal] = {}
    for row in tokens:
        seen = totals.get(row.month, MonthTotal(month=row.month, total_tokens=0, calls=0))
        totals[row.month] = MonthTotal(
            month=row.month,
            total_tokens=seen.total_tokens + row.total_tokens,
            calls=seen.calls + row.calls,
        )
    return UsageView(
        quota_bytes=quota,
        used_bytes=used,
        reserved_bytes=reserved,
        projects=[
            ProjectUsage(
                vault=row.vault_handle,
                project_id=row.project_id,
                project_name=row.project_name,
                project_status=row.project_status,
                assets=row.assets,
                bytes=row.original_bytes + row.preview_bytes,
            )
            for row in await uow.reports.bytes_by_project(owner)
        ],
        tokens=[
            MonthTokens(
                month=row.month,
                source=row.source,
                model=row.model,
                calls=row.calls,
                total_tokens=row.total_tokens,
            )
            for row in tokens
        ],
        months=sorted(totals.values(), key=lambda total: total.month),
        provider_embedder=services.settings.asset_embed_provider not in ("local", "clip"),
    )
