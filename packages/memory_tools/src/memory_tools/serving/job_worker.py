"""The job worker as the servers compose it: its handlers by kind and its periodic store check.

The worker (:mod:`memory_tools.jobs.worker`) embeds by itself and hands any other kind of job
to the handler it was given; the handlers (OCR, describe, capture, duplicates) build on the
job module that declares them, and the reconciliation pass is an operator task. Both are
chosen here, where the app is composed, so no job module imports the handlers' modules or an
operation.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from memory_tools.jobs.capture import CaptureHandler
from memory_tools.jobs.describe import DescribeHandler
from memory_tools.jobs.duplicates import DuplicatesHandler
from memory_tools.jobs.handlers import JobHandler
from memory_tools.jobs.ocr_jobs import OcrHandler
from memory_tools.jobs.worker import JobWorker, WorkerConfig
from memory_tools.operations.reconcile import reconcile_store
from memory_tools.services import MemoryServices


def build_job_handlers(services: MemoryServices) -> Mapping[str, JobHandler]:
    """The handlers this process runs, by kind, as the server's settings switch them on."""
    # Reading EXIF needs no engine or provider: always on.
    handlers: dict[str, JobHandler] = {"capture": CaptureHandler(services)}
    # The near-duplicate pair search reads stored vectors only: always on.
    handlers["duplicates"] = DuplicatesHandler(services)
    if services.settings.asset_ocr != "off":
        handlers["ocr"] = OcrHandler(services)
    if services.describer is not None:
        handlers["describe"] = DescribeHandler(services, services.describer)
    return handlers


async def reconcile_pass(
    services: MemoryServices, safety_window: timedelta, verify_limit: int
) -> int:
    """One reconciliation pass of the worker's sweep; how many findings it had."""
    report = await reconcile_store(services, safety_window=safety_window, verify_limit=verify_limit)
    return report.total


def job_worker(
    services: MemoryServices,
    config: WorkerConfig | None = None,
    *,
    name: str = "",
    reuse_vectors: bool = True,
    handlers: Mapping[str, JobHandler] | None = None,
) -> JobWorker:
    """A worker running every job kind the settings switch on, reconciling the store when due.

    ``handlers`` replaces the kinds the settings choose (tests give a scripted handler).
    """
    return JobWorker(
        services,
        config,
        name=name,
        reuse_vectors=reuse_vectors,
        handlers=build_job_handlers(services) if handlers is None else handlers,
        store_check=reconcile_pass,
    )


__all__ = ["build_job_handlers", "job_worker", "reconcile_pass"]
