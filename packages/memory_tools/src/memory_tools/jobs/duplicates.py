"""The ``duplicates`` job: the near-duplicate pairs of an image whose visual vector is stored.

The embedding job finds an image's pairs when it writes its vector (:mod:`memory_tools.jobs.
worker`); this job finds them for images embedded before, or again after a reindex switch,
queued by ``memory-server enrich --what duplicates`` or ``image_asset_enrich``. It reads no
bytes and calls no provider: one statement over the stored vectors of the index the alias
points at (:func:`memory_tools.workflows.near_duplicates.find_pairs`). Running it again stores the
same pairs, and never reopens a dismissed one. An image not embedded yet has no vector: its
pairs come with its embedding.
"""

from __future__ import annotations

from memory_db import AssetRecord, UnitOfWork
from memory_tools.jobs.handlers import JobResult, JobSubject
from memory_tools.services import MemoryServices
from memory_tools.workflows.near_duplicates import find_pairs


class DuplicatesHandler:
    """Runs ``duplicates`` jobs (registered by ``serving.job_worker.build_job_handlers``)."""

    kind = "duplicates"

    def __init__(self, services: MemoryServices) -> None:
        self._services = services

    async def run(self, subject: JobSubject) -> JobResult:
        """Nothing to compute outside the database: the result's ``write`` searches the pairs."""
        services = self._services

        async def write(uow: UnitOfWork, asset: AssetRecord) -> None:
            # Held FOR SHARE like a completion holds it: a switch waits for this transaction.
            index = await uow.vector_indexes.open_alias(services.vector_alias)
            await find_pairs(uow, services, index, [asset.id])

        return JobResult(write=write)


__all__ = ["DuplicatesHandler"]
