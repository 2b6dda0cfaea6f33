"""``memory-server enrich``: queue the enrichments (OCR, a description) of a whole vault again.

The enrichments themselves, and re-running them for one image, are jobs
(:mod:`memory_tools.jobs.ocr_jobs`); this is the operator's task over one owner's vault.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from memory_tools import policy
from memory_tools.jobs import ocr_jobs
from memory_tools.operations import admin
from memory_tools.services import MemoryServices


@dataclass(frozen=True)
class VaultEnrichment:
    """What ``memory-server enrich`` queued for one vault."""

    vault: str
    assets: int
    queued: int
    already_queued: int


async def enrich_vault(
    services: MemoryServices,
    owner: str,
    vault: str,
    what: Sequence[str] | None = None,
    *,
    batch: int = 200,
    progress: Callable[[int, int], None] | None = None,
) -> VaultEnrichment:
    """Queue the enrichments of every live image of ``owner``'s vault ``vault`` (operators).

    Batch by batch, each in its own transaction with its provenance; ``progress(done, total)``
    is called after each. An unknown owner or a vault the owner does not own is ``not_found``.
    """
    policy.require(services.settings)
    policy.require_writable(services.read_only)
    kinds = ocr_jobs.check_what(what, services)
    ocr_jobs.require_on(services, kinds)
    async with services.database.unit_of_work() as uow:
        record = await admin.require_owned_vault(uow, owner, vault)
        scope = record.scope
        ids = await uow.assets.live_ids(scope)
    queued = waiting = 0
    for start in range(0, len(ids), batch):
        chunk = ids[start : start + batch]
        async with services.database.unit_of_work() as uow:
            made_now = 0
            for asset_id in chunk:
                for kind in kinds:
                    made = await ocr_jobs.ENRICHERS[kind].queue(
                        uow, services, scope.owner_identity, asset_id
                    )
                    made_now += made
                    waiting += not made
            queued += made_now
            await uow.jobs.notify()
            await uow.provenance.record(
                "asset_enrich",
                actor_identity=admin.OPERATOR,
                owner_identity=scope.owner_identity,
                vault=scope.physical_vault,
                target_kind="vault",
                target_id=scope.physical_vault,
                detail={"what": kinds, "assets": len(chunk), "queued": made_now},
            )
        if progress is not None:
            progress(min(start + batch, len(ids)), len(ids))
    return VaultEnrichment(
        vault=record.handle, assets=len(ids), queued=queued, already_queued=waiting
    )


__all__ = ["VaultEnrichment", "enrich_vault"]
