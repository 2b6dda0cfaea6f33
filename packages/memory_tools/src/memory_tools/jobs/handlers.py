"""Job kinds other than embeddings: what the worker runs for an ``ocr`` or ``describe`` job.

Every job lives in the one durable queue (``mem_asset_embedding_jobs``, docs/design.md#jobs)
with its ``kind``. The worker claims jobs of every kind it has a handler for, keeps them under
its lease and applies the queue's failure policy; an ``embed`` job is embedded in batches by the
worker itself, any other job is handed to the :class:`JobHandler` registered for its kind.

A handler does the work outside any transaction (reading the preview, running an engine or
calling a model) and answers with a :class:`JobResult`. The worker then finishes the job in one
transaction that locks the asset row and checks the lease, and only then calls the result's
``write``: a worker that lost its lease, or an asset that entered deletion, writes nothing.

A handler that cannot do the work raises :class:`JobFailed` with a stable code: retried with
backoff when ``retryable`` (an ``outage`` spends no attempt for a day, like a provider outage
of the embedder), failed for good otherwise. Neither changes the asset's status: an image is
``ready`` for visual search whatever becomes of its other jobs.

To add a kind: write a handler, and return it from
:func:`memory_tools.serving.job_worker.build_job_handlers` (where the app is composed) when the
server's settings switch it on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from memory_db import AssetRecord, JobRecord, MemoryDbError, ObjectRecord, UnitOfWork
from memory_db.errors import ChecksumMismatch
from memory_db.storage.integrity import read_verified
from memory_tools.services import MemoryServices
from memory_tools.workflows.assets import read_preview

Write = Callable[[UnitOfWork, AssetRecord], Awaitable[None]]


@dataclass(frozen=True)
class JobSubject:
    """A claimed job with its asset and stored object, reloaded under the job's owner."""

    job: JobRecord
    asset: AssetRecord
    stored: ObjectRecord


@dataclass(frozen=True)
class JobResult:
    """What a handler produced.

    ``write`` stores it, inside the transaction that completes the job (the asset row locked,
    the lease checked); ``usage`` is recorded on the job (token or time counts).
    """

    write: Write | None = None
    usage: dict[str, int] = field(default_factory=dict[str, int])


class JobFailed(Exception):
    """A job's work failed: ``code`` is stable (it is the job's recorded failure reason)."""

    def __init__(
        self, code: str, message: str, *, retryable: bool = False, outage: bool = False
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = retryable or outage
        self.outage = outage  # not the image's fault: spends no attempt within the patience


class JobHandler(Protocol):
    """Runs the jobs of one kind."""

    @property
    def kind(self) -> str:
        """The job kind it runs (``ocr``, ``describe``)."""
        ...

    async def run(self, subject: JobSubject) -> JobResult:
        """Do the work of one job; raise :class:`JobFailed` when it cannot be done."""
        ...


async def read_subject_preview(services: MemoryServices, subject: JobSubject) -> bytes:
    """The job's sanitised preview, verified against its recorded SHA-256.

    The same refusals as the embedding worker's: a preview that is not available or does not
    match its hash is never used (``object_unavailable``, ``integrity_failure``); a store that
    does not answer is retried (``store_unavailable``).
    """
    stored = subject.stored
    if stored.status != "available" or stored.preview_storage_key is None:
        raise JobFailed("object_unavailable", f"the stored image is {stored.status}")
    return await read_for_job(
        "preview", read_preview(services, stored.preview_storage_key, stored.preview_sha256)
    )


async def read_subject_original(services: MemoryServices, subject: JobSubject) -> bytes:
    """The job's stored original, verified against its recorded SHA-256 and size bound.

    Refused like the preview (:func:`read_subject_preview`): ``object_unavailable``,
    ``integrity_failure``, ``store_unavailable``; never more than ``ASSET_MAX_BYTES`` is read.
    """
    stored = subject.stored
    if stored.status != "available":
        raise JobFailed("object_unavailable", f"the stored image is {stored.status}")
    return await read_for_job(
        "original",
        read_verified(
            services.store,
            stored.storage_key,
            stored.sha256,
            max_bytes=services.settings.asset_max_bytes,
        ),
    )


async def read_for_job(what: str, read: Awaitable[bytes]) -> bytes:
    """The stored ``what`` (``preview``, ``original``) that ``read`` verifies, for a job.

    Bytes that do not match their recorded SHA-256 fail the job (``integrity_failure``); a
    store that does not answer fails it retryably (``store_unavailable``).
    """
    try:
        return await read
    except ChecksumMismatch as exc:
        raise JobFailed(
            "integrity_failure", f"the stored {what} does not match its recorded SHA-256"
        ) from exc
    except MemoryDbError as exc:
        raise JobFailed(
            "store_unavailable", f"the {what} could not be read ({exc})", retryable=True
        ) from exc


__all__ = [
    "JobFailed",
    "JobHandler",
    "JobResult",
    "JobSubject",
    "read_for_job",
    "read_subject_original",
    "read_subject_preview",
]
