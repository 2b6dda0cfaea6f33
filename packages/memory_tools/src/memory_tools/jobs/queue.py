"""The server's work queue for people: retrying an embedding, and the operator's Jobs page.

Two kinds of caller use it (docs/design.md#authorisation):

- an asset's owner, or a write grantee of its vault, retries a failed (or operator-cancelled)
  representation of an image they may change (:func:`retry_asset_embedding`): the asset page's
  Retry button;
- an operator, whose key carries the ``admin`` scope, lists every owner's work and retries or
  cancels embedding jobs (:func:`list_jobs`, :func:`job_details`, :func:`retry_job`,
  :func:`cancel_job`). ``admin`` is authority over the server's work queue only: it shows a
  job's asset id and owner identity, never an owner's images, names or links, and it grants no
  access to any vault.

The queue holds these types of work, each shown as recorded and never guessed:

- ``embedding``, ``ocr`` and ``describe``: the durable jobs (``mem_asset_embedding_jobs``, one
  table for every job kind), with their status as the worker left it;
- ``purge``: objects whose asset was deleted and whose bytes wait for the sweep (``queued``,
  due once the delete grace window has passed) or were purged (``done``);
- ``reconcile``: finished passes of the store reconciliation, with their findings.

Only jobs can be retried or cancelled: a purge and a reconciliation pass are the
sweep's to run, and it runs them again on its own. A running job is not cancelled: its worker
holds the lease, and cancelling under it would race the worker's completion; the operator
cancels it once its attempt ends (it then waits to retry, or failed) or deletes the asset.
"""

from __future__ import annotations

import base64
import binascii
from datetime import datetime, timedelta

from pydantic import Field

from memory_db import UnitOfWork
from memory_db.repositories import JOB_WORK_KINDS, WORK_KINDS, JobRecord, WorkItem
from memory_tools import policy
from memory_tools.access import Caller
from memory_tools.errors import ConflictFailure, Forbidden, InvalidInputFailure, NotFoundFailure
from memory_tools.services import MemoryServices
from memory_tools.wire import WireModel
from memory_tools.workflows.changes import PURGE_MARGIN, delete_grace, locate_asset

ADMIN_SCOPE = "admin"
JOB_TYPES = WORK_KINDS
JOB_STATUSES = ("queued", "running", "retry", "done", "failed", "cancelled")
ACTIVE_STATUSES = ("queued", "running", "retry")
REPRESENTATIONS = ("visual", "fused")
# Attempts a retried job gets, like a new job (memory_db.repositories.JobRepository.create).
RETRY_ATTEMPTS = 5
MAX_PAGE = 200
MAX_REASON = 500
# The error code an operator's cancel leaves on a job (memory_db JobRepository.cancel_waiting).
# Only such a cancel is undone by a retry: a job cancelled because its image was deleted or its
# text changed (superseded) stays cancelled; the image's own state says what to do then.
OPERATOR_CANCEL = "cancelled"


class JobRow(WireModel):
    """One row of the work queue."""

    type: str = Field(description="embedding, ocr, describe, purge or reconcile.")
    id: str
    status: str = Field(description="queued, running, retry, done, failed or cancelled.")
    created_at: datetime = Field(
        description="What the list orders by: a job's creation, the time an object entered "
        "or left deleting, a pass's start."
    )
    owner_identity: str | None
    asset_id: str | None
    object_id: str | None
    representation: str | None
    attempts: int
    max_attempts: int
    due_at: datetime | None = Field(description="When waiting work may run next.")
    lease_owner: str | None = Field(description="The worker holding a running job.")
    lease_until: datetime | None
    error_code: str | None
    error: str | None
    finished_at: datetime | None
    bytes: int | None = Field(description="Bytes purged, to purge, or removed by a pass.")
    can_retry: bool
    can_cancel: bool


class JobPage(WireModel):
    """A page of the work queue, newest first; pass ``next_cursor`` back for the next."""

    jobs: list[JobRow]
    next_cursor: str | None
    active: bool = Field(description="Whether any row shown is queued, running or retrying.")


class TimelineEntry(WireModel):
    """Something that happened to a job, and when."""

    at: datetime
    event: str
    detail: str | None = None
    actor: str | None = None


class JobDetails(WireModel):
    """One job of the queue with its timeline."""

    job: JobRow
    timeline: list[TimelineEntry]
    model: str | None = None
    usage: dict[str, int] = Field(default_factory=dict[str, int])
    findings: dict[str, int] = Field(default_factory=dict[str, int])


class JobChange(WireModel):
    """A job after an operator's retry or cancel."""

    job: JobRow


class EmbeddingRetry(WireModel):
    """A representation queued again."""

    asset_id: str
    representation: str
    job_id: str
    status: str
    embedding_status: str


# --- authority, filters, cursors --------------------------------------------------------------


def require_admin(caller: Caller) -> None:
    """Raise ``Forbidden`` unless the key carries the operator's ``admin`` scope."""
    if not caller.has_scope(ADMIN_SCOPE):
        raise Forbidden("this API key lacks the 'admin' scope: the job queue is for operators")


def encode_cursor(item: WorkItem) -> str:
    """The opaque cursor after ``item``."""
    raw = f"{item.sort_at.isoformat()}|{item.id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The ``(sort_at, id)`` a cursor names; ``invalid_input`` for one this list did not give."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        at, job_id = raw.split("|", 1)
        parsed = datetime.fromisoformat(at)
    except (ValueError, UnicodeDecodeError, binascii.Error):
        raise InvalidInputFailure("cursor: not a cursor this list gave") from None
    if parsed.tzinfo is None or not job_id:
        raise InvalidInputFailure("cursor: not a cursor this list gave")
    return parsed, job_id


def _one_of(value: str | None, allowed: tuple[str, ...], name: str) -> str | None:
    if value is None or value == "":
        return None
    if value not in allowed:
        raise InvalidInputFailure(f"{name}: one of {', '.join(allowed)}")
    return value


def purge_delay(services: MemoryServices) -> timedelta:
    """How long after its asset's deletion an object's bytes are purged (the sweep's rule)."""
    grace = delete_grace(services)
    return grace + PURGE_MARGIN if grace else grace


def _row(item: WorkItem) -> JobRow:
    embedding = item.kind in JOB_WORK_KINDS  # a queued job, of any kind
    return JobRow(
        type=item.kind,
        id=item.id,
        status=item.status,
        created_at=item.sort_at,
        owner_identity=item.owner_identity,
        asset_id=item.subject_id if embedding else None,
        object_id=item.subject_id if item.kind == "purge" else None,
        representation=item.representation,
        attempts=item.attempts,
        max_attempts=item.max_attempts,
        due_at=item.due_at,
        lease_owner=item.lease_owner,
        lease_until=item.lease_until,
        error_code=item.error_code,
        error=item.error,
        finished_at=item.finished_at,
        bytes=item.bytes,
        can_retry=embedding and _retryable(item.status, item.error_code),
        can_cancel=embedding and item.status in ("queued", "retry"),
    )


def _retryable(status: str, error_code: str | None) -> bool:
    return status == "failed" or (status == "cancelled" and error_code == OPERATOR_CANCEL)


def _job_item(job: JobRecord) -> WorkItem:
    return WorkItem(
        kind="embedding" if job.kind == "embed" else job.kind,
        id=job.id,
        status=job.status,
        sort_at=job.created_at,
        owner_identity=job.owner_identity,
        subject_id=job.asset_id,
        representation=job.representation,
        attempts=job.attempts,
        max_attempts=job.max_attempts,
        due_at=job.run_after if job.status in ("queued", "retry") else None,
        lease_owner=job.lease_owner,
        lease_until=job.lease_until,
        error_code=job.last_error_code,
        error=job.last_error,
        finished_at=job.completed_at,
        bytes=None,
    )


# --- the operator's list and details -----------------------------------------------------------


async def list_jobs(
    uow: UnitOfWork,
    caller: Caller,
    services: MemoryServices,
    *,
    status: str | None = None,
    type: str | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> JobPage:
    """Every owner's work, newest first by ``(created_at, id)`` (``admin`` scope)."""
    policy.require(services.settings)
    require_admin(caller)
    wanted_status = _one_of(status, JOB_STATUSES, "status")
    wanted_type = _one_of(type, JOB_TYPES, "type")
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidInputFailure(f"limit: between 1 and {MAX_PAGE}")
    before = None if not cursor else decode_cursor(cursor)
    items = await uow.work.list(
        kinds=JOB_TYPES if wanted_type is None else (wanted_type,),
        statuses=() if wanted_status is None else (wanted_status,),
        before=before,
        limit=limit + 1,
        purge_delay=purge_delay(services),
    )
    page = items[:limit]
    return JobPage(
        jobs=[_row(item) for item in page],
        next_cursor=encode_cursor(page[-1]) if len(items) > limit else None,
        active=any(item.status in ACTIVE_STATUSES for item in page),
    )


async def job_details(
    uow: UnitOfWork,
    caller: Caller,
    services: MemoryServices,
    *,
    type: str,
    job_id: str,
) -> JobDetails:
    """One piece of work with its timeline (``admin`` scope); unknown ids are ``not_found``."""
    policy.require(services.settings)
    require_admin(caller)
    kind = _one_of(type, JOB_TYPES, "type")
    if kind is None:
        raise InvalidInputFailure(f"type: one of {', '.join(JOB_TYPES)}")
    if kind in JOB_WORK_KINDS:
        job = await uow.jobs.get(job_id)
        if job is None or job.kind != JOB_WORK_KINDS[kind]:
            raise NotFoundFailure("job not found")
        return await _embedding_details(uow, job)
    if kind == "purge":
        item = await uow.work.purge(job_id, purge_delay=purge_delay(services))
        if item is None:
            raise NotFoundFailure("job not found")
        return await _purge_details(uow, item)
    run = await uow.work.reconcile_run(job_id)
    item = await uow.work.reconcile(job_id)
    if run is None or item is None:
        raise NotFoundFailure("job not found")
    ended = "finished" if run.status == "done" else "stopped"
    return JobDetails(
        job=_row(item),
        timeline=[
            TimelineEntry(at=run.started_at, event="started", actor=run.actor_identity),
            TimelineEntry(
                at=run.finished_at,
                event=ended,
                detail=None if run.error_code is None else f"{run.error_code}: {run.error}",
            ),
        ],
        findings={
            "namespaces": run.namespaces,
            "listed": run.listed,
            "removed": run.removed,
            "removedBytes": run.removed_bytes,
            "waiting": run.waiting,
            "foreign": run.foreign_keys,
        },
    )


async def _embedding_details(uow: UnitOfWork, job: JobRecord) -> JobDetails:
    made = f"{job.representation} vector" if job.kind == "embed" else f"{job.kind} ({job.model})"
    timeline = [TimelineEntry(at=job.created_at, event="created", detail=made)]
    for event in await uow.provenance.for_target("job", job.id):
        detail = event.detail
        if event.operation == "job_retry":
            before = detail.get("previousStatus")
            error = detail.get("previousErrorCode")
            text = f"was {before}" + (f" ({error})" if error else "")
            timeline.append(
                TimelineEntry(
                    at=event.created_at, event="retried", detail=text, actor=event.actor_identity
                )
            )
        elif event.operation == "job_cancel":
            timeline.append(
                TimelineEntry(
                    at=event.created_at,
                    event="cancelled",
                    detail=str(detail.get("reason") or ""),
                    actor=event.actor_identity,
                )
            )
    timeline.extend(_current_state(job))
    timeline.sort(key=lambda entry: entry.at)
    return JobDetails(job=_row(_job_item(job)), timeline=timeline, model=job.model, usage=job.usage)


def _current_state(job: JobRecord) -> list[TimelineEntry]:
    """What the job's row says about its latest attempt (earlier attempts leave no row)."""
    changed = job.updated_at or job.created_at
    attempt = f"attempt {job.attempts} of {job.max_attempts}"
    error = None if job.last_error_code is None else f"{job.last_error_code}: {job.last_error}"
    if job.status == "running":
        until = "" if job.lease_until is None else f", lease until {job.lease_until.isoformat()}"
        return [
            TimelineEntry(
                at=changed, event="claimed", detail=f"{attempt}{until}", actor=job.lease_owner
            )
        ]
    if job.status == "retry":
        return [
            TimelineEntry(at=changed, event="attempt failed", detail=f"{attempt}: {error}"),
            TimelineEntry(at=job.run_after, event="retry due"),
        ]
    if job.status in ("done", "failed", "cancelled") and job.completed_at is not None:
        detail = attempt if job.status == "done" else error
        return [TimelineEntry(at=job.completed_at, event=job.status, detail=detail)]
    return []


async def _purge_details(uow: UnitOfWork, item: WorkItem) -> JobDetails:
    timeline: list[TimelineEntry] = []
    if item.status == "queued":
        timeline.append(TimelineEntry(at=item.sort_at, event="released", detail="asset deleted"))
        if item.due_at is not None:
            timeline.append(TimelineEntry(at=item.due_at, event="purge due"))
    for event in await uow.provenance.for_target("object", item.id):
        if event.operation == "asset_object_purge":
            timeline.append(
                TimelineEntry(
                    at=event.created_at,
                    event="purged",
                    detail=f"{event.detail.get('bytes', 0)} bytes",
                    actor=event.actor_identity,
                )
            )
    finished = item.finished_at if item.status == "done" else None
    if finished is not None and not any(entry.event == "purged" for entry in timeline):
        timeline.append(TimelineEntry(at=finished, event="purged"))
    timeline.sort(key=lambda entry: entry.at)
    return JobDetails(job=_row(item), timeline=timeline)


# --- changes ---------------------------------------------------------------------------------


async def _requeue(uow: UnitOfWork, job: JobRecord, actor: str) -> JobRecord:
    """Queue a failed or cancelled job again, if it is still its representation's latest."""
    owner, asset_id = job.owner_identity, job.asset_id
    # The asset row first, like the worker's completion and a deletion: a delete either
    # committed (we see it) or waits for this retry to commit (and then cancels the new work).
    locked = await uow.assets.lock_many_for_owners([(owner, asset_id)])
    asset = locked.get((owner, asset_id))
    if asset is None or asset.status in ("deleting", "deleted"):
        raise ConflictFailure("the image is deleted: restore it before retrying its embedding")
    latest = await uow.jobs.latest(owner, asset_id, job.representation, kind=job.kind)
    if latest is None or latest.id != job.id:
        raise ConflictFailure("a newer job does this work for the image: retry that one instead")
    if job.status not in ("failed", "cancelled"):
        raise ConflictFailure(f"the job is {job.status}: only a failed or cancelled job is retried")
    if not _retryable(job.status, job.last_error_code):
        raise ConflictFailure(
            f"the job was cancelled by the server ({job.last_error}): not retried"
        )
    requeued = await uow.jobs.requeue(job.id, attempts=RETRY_ATTEMPTS)
    if requeued is None:
        raise ConflictFailure("the job changed meanwhile: look again")
    if job.representation == "visual":
        await uow.assets.reopen_failed(owner, asset_id)
    await uow.assets.reconcile_embedding(owner, asset_id)
    await uow.provenance.record(
        "job_retry",
        actor_identity=actor,
        owner_identity=owner,
        vault=asset.vault,
        target_kind="job",
        target_id=job.id,
        detail={
            "assetId": asset_id,
            "kind": job.kind,
            "representation": job.representation,
            "previousStatus": job.status,
            "previousErrorCode": job.last_error_code,
            "attempts": job.attempts,
        },
    )
    await uow.jobs.notify()
    return requeued


async def retry_asset_embedding(
    uow: UnitOfWork,
    caller: Caller,
    services: MemoryServices,
    *,
    asset_id: str,
    representation: str,
) -> EmbeddingRetry:
    """Queue a failed (or operator-cancelled) representation of an image again (write access).

    Another owner's image that is not shared with the caller is ``not_found``; one the caller
    may read but not change is ``forbidden``; ``conflict`` when nothing failed (the
    representation is ready or already queued), or the image is deleted.
    """
    policy.require(services.settings)
    policy.require_writable(services.read_only)
    kind = _one_of(representation, REPRESENTATIONS, "representation")
    if kind is None:
        # Refused before any access check: a malformed request says nothing about the image.
        raise InvalidInputFailure(
            f"representation: is required, one of {', '.join(REPRESENTATIONS)}"
        )
    _resolved, record = await locate_asset(uow, caller, asset_id, "write")
    if record.status in ("deleting", "deleted"):
        raise ConflictFailure("the image is deleted: restore it before retrying its embedding")
    latest = await uow.jobs.latest(record.owner_identity, asset_id, kind)
    if latest is None:
        raise ConflictFailure(f"the image has no {kind} vector to retry")
    if latest.status not in ("failed", "cancelled"):
        raise ConflictFailure(f"nothing to retry: its {kind} embedding is {latest.status}")
    job = await _requeue(uow, latest, caller.identity)
    asset = await uow.assets.get_for_owner(record.owner_identity, asset_id)
    return EmbeddingRetry(
        asset_id=asset_id,
        representation=kind,
        job_id=job.id,
        status=job.status,
        embedding_status=asset.embedding_status if asset is not None else "pending",
    )


async def retry_job(
    uow: UnitOfWork, caller: Caller, services: MemoryServices, *, job_id: str
) -> JobChange:
    """Queue a failed or operator-cancelled job (of any kind) again, due now (``admin`` scope)."""
    policy.require(services.settings)
    policy.require_writable(services.read_only)
    require_admin(caller)
    job = await uow.jobs.get(job_id)
    if job is None:
        raise NotFoundFailure("job not found")
    requeued = await _requeue(uow, job, caller.identity)
    return JobChange(job=_row(_job_item(requeued)))


async def cancel_job(
    uow: UnitOfWork, caller: Caller, services: MemoryServices, *, job_id: str, reason: str
) -> JobChange:
    """Cancel a queued or retrying job (of any kind), with a reason (``admin`` scope).

    A running job is ``conflict``: see the module docstring. The image keeps no vector of that
    representation until someone retries the job (the asset page's Retry, or this page's).
    """
    policy.require(services.settings)
    policy.require_writable(services.read_only)
    require_admin(caller)
    why = reason.strip()
    if not why:
        raise InvalidInputFailure("reason: say why the job is cancelled")
    if len(why) > MAX_REASON or "\x00" in why:
        raise InvalidInputFailure(f"reason: at most {MAX_REASON} characters, no NUL")
    job = await uow.jobs.get(job_id)
    if job is None:
        raise NotFoundFailure("job not found")
    if job.status == "running":
        raise ConflictFailure(
            "the job is running: its worker holds it; cancel it when the attempt ends"
        )
    if job.status not in ("queued", "retry"):
        raise ConflictFailure(
            f"the job is {job.status}: only a queued or retrying job is cancelled"
        )
    cancelled = await uow.jobs.cancel_waiting(job_id, reason=why)
    if cancelled is None:  # a worker claimed it between the read and the update
        raise ConflictFailure("the job is running now: its worker holds it; look again")
    await uow.assets.reconcile_embedding(job.owner_identity, job.asset_id)
    await uow.provenance.record(
        "job_cancel",
        actor_identity=caller.identity,
        owner_identity=job.owner_identity,
        target_kind="job",
        target_id=job.id,
        detail={
            "assetId": job.asset_id,
            "kind": job.kind,
            "representation": job.representation,
            "previousStatus": job.status,
            "reason": why,
        },
    )
    return JobChange(job=_row(_job_item(cancelled)))


__all__ = [
    "ADMIN_SCOPE",
    "JOB_STATUSES",
    "JOB_TYPES",
    "EmbeddingRetry",
    "JobChange",
    "JobDetails",
    "JobPage",
    "JobRow",
    "TimelineEntry",
    "cancel_job",
    "job_details",
    "list_jobs",
    "require_admin",
    "retry_asset_embedding",
    "retry_job",
]
