"""Listing the vaults a caller can read: ``image_vault_list``.

Each vault comes with the handle the tools accept for it and the caller's permission on it. The
owner's quota and byte counters are shown only on the caller's own vaults: the quota belongs to
an owner (every vault of one owner draws on it), and another owner's numbers are theirs alone.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from memory_db import NotFound, UnitOfWork
from memory_tools import policy
from memory_tools.access import Caller, readable_vaults
from memory_tools.services import MemoryServices
from memory_tools.wire import WireModel


class VaultQuota(WireModel):
    """Your quota and what you use of it, across all your vaults."""

    quota_bytes: int = Field(description="Your quota, shared by every vault you own.")
    used_bytes: int = Field(description="Stored bytes that count against it (all your vaults).")
    reserved_bytes: int = Field(description="Bytes held for uploads and saves in progress.")


class VaultView(WireModel):
    """A vault you can read."""

    vault: str = Field(
        description="Its handle as the tools accept it: 'Library', 'Name', or "
        "'owner@example.com/Name' for a vault shared with you."
    )
    permission: str = Field(description="owner, admin, write or read.")
    created_at: datetime
    quota: VaultQuota | None = Field(
        description="Your quota and usage, on your own vaults only; null on shared ones."
    )


class VaultList(WireModel):
    """The vaults you can read: your own first (by name), then those shared with you."""

    vaults: list[VaultView]


async def list_vaults(uow: UnitOfWork, caller: Caller, services: MemoryServices) -> VaultList:
    """Every vault the caller may read, with its handle and permission; quota on its own."""
    policy.require(services.settings)
    vaults = await readable_vaults(uow, caller)
    quota: VaultQuota | None = None
    if any(v.record.permission == "owner" for v in vaults):
        try:
            usage = await uow.quota.usage(caller.identity)
        except NotFound:
            usage = None  # an identity with no namespace yet has stored nothing
        if usage is not None:
            quota = VaultQuota(
                quota_bytes=usage.quota_bytes,
                used_bytes=usage.used_bytes,
                reserved_bytes=usage.reserved_bytes,
            )
    return VaultList(
        vaults=[
            VaultView(
                vault=v.display_handle,
                permission=v.record.permission,
                created_at=v.record.created_at,
                quota=quota if v.record.permission == "owner" else None,
            )
            for v in vaults
        ]
    )
