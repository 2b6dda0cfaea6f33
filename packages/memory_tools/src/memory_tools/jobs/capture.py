"""The ``capture`` job: when and with what an image was taken, read from its stored original.

A save reads these EXIF fields itself (:mod:`memory_tools.ingest.exif`); this job gives them to
images saved before that, queued by ``memory-server enrich --what capture`` or
``image_asset_enrich``. It reads the verified original, opens its header under the save's
bounds (:func:`memory_tools.ingest.images.read_header`: no pixel is decoded) and replaces the
asset's capture columns, so running it twice stores the same thing. The location is kept only
as ``ASSET_KEEP_LOCATION`` says at the time the job runs.
"""

from __future__ import annotations

import functools

from memory_db import AssetRecord, UnitOfWork
from memory_db.priority import run_cpu
from memory_tools.errors import ToolFailure
from memory_tools.ingest.exif import Capture, kept_capture
from memory_tools.ingest.images import read_header
from memory_tools.jobs.handlers import JobFailed, JobResult, JobSubject, read_subject_original
from memory_tools.services import MemoryServices


def _capture_of(data: bytes, max_pixels: int) -> Capture:
    return read_header(data, max_pixels=max_pixels).capture


class CaptureHandler:
    """Runs ``capture`` jobs (registered by ``serving.job_worker.build_job_handlers``)."""

    kind = "capture"

    def __init__(self, services: MemoryServices) -> None:
        self._services = services

    async def run(self, subject: JobSubject) -> JobResult:
        """Read the original's EXIF; the result's ``write`` stores it on the asset."""
        settings = self._services.settings
        original = await read_subject_original(self._services, subject)
        try:
            capture = await run_cpu(
                functools.partial(_capture_of, original, settings.asset_max_decoded_pixels)
            )
        except ToolFailure as exc:
            # Validated at its save; refused now only under tighter limits than then.
            raise JobFailed("invalid_image", str(exc)) from None
        kept = kept_capture(capture, settings)

        async def write(uow: UnitOfWork, asset: AssetRecord) -> None:
            await uow.assets.set_capture(asset.owner_identity, asset.id, kept.columns())

        return JobResult(write=write)


__all__ = ["CaptureHandler"]
