"""The job queue for people: an owner's retry, the operator's list, details, retry and cancel.

Real database, real worker and repositories: the races are run against a worker's own claim.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from sqlalchemy import text

from memory_db.embedding import ScriptedEmbedder
from memory_db.errors import ProviderRejected, StorageError
from memory_db.storage import ListedObject, LocalAssetObjectStore, UrlSigner
from memory_db.unit_of_work import session_of
from memory_tools import MemoryServices
from memory_tools.access import Caller
from memory_tools.errors import ConflictFailure, Forbidden, InvalidInputFailure, NotFoundFailure
from memory_tools.ingest.save import AssetSaver, SaveRequest
from memory_tools.jobs.queue import (
    cancel_job,
    job_details,
    list_jobs,
    retry_asset_embedding,
    retry_job,
)
from memory_tools.jobs.worker import EmbeddingWorker, WorkerConfig
from memory_tools.operations import admin
from memory_tools.operations.reconcile import reconcile_store
from memory_tools.workflows.changes import delete_asset, purge_deleted_objects

from ..job_listener import until_a_worker_listens
from ..locks import backend_pid, until_blocked_by
from ..pictures import picture

FAST = WorkerConfig(
    batch_size=8,
    lease_seconds=30,
    heartbeat_seconds=10,
    poll_seconds=0.2,
    retry_base_seconds=0.01,
    retry_max_seconds=0.02,
)
USER = frozenset({"read", "write", "destructive"})


@pytest.fixture
def saving(saving: MemoryServices) -> MemoryServices:
    """No delete grace window, so a deleted image's purge is due at once."""
    return replace(
        saving, settings=saving.settings.model_copy(update={"asset_delete_grace_hours": 0})
    )


@pytest.fixture
async def alice(database: Any) -> Caller:
    await admin.create_identity(database, "alice@example.com", 10**9)
    return Caller("alice@example.com", "akey_a", USER)


@pytest.fixture
async def bob(database: Any) -> Caller:
    await admin.create_identity(database, "bob@example.com", 10**9)
    return Caller("bob@example.com", "akey_b", USER)


@pytest.fixture
def operator() -> Caller:
    # An operator is any identity whose key carries 'admin'; it needs no images of its own.
    return Caller("ops@example.com", "akey_o", frozenset({"read", "admin"}))


async def save(services: MemoryServices, caller: Caller, seed: int, **fields: Any) -> str:
    request = SaveRequest(image_base64=base64.b64encode(picture(seed)).decode(), **fields)
    return (await AssetSaver(services).save(caller, request)).asset_id


async def call(services: MemoryServices, workflow: Any, caller: Caller, **kwargs: Any) -> Any:
    async with services.database.unit_of_work() as uow:
        return await workflow(uow, caller, services, **kwargs)


async def asset_state(services: MemoryServices, asset_id: str) -> tuple[str, str]:
    async with services.database.engine.connect() as conn:
        row = (
            await conn.execute(
                text("SELECT status, embedding_status FROM mem_assets WHERE id = :i"),
                {"i": asset_id},
            )
        ).one()
    return row[0], row[1]


def rejecting(services: MemoryServices, code: str = "wrong_dimensions") -> MemoryServices:
    """Services whose embedder refuses the next call for good (not retried)."""
    embedder = ScriptedEmbedder(model_name="local-hash-v1", script=[ProviderRejected(code, "no")])
    return replace(services, embedder=embedder)


async def failed_asset(services: MemoryServices, caller: Caller, seed: int) -> str:
    """A saved image whose visual embedding failed for good."""
    failing = rejecting(services)
    asset_id = await save(failing, caller, seed)
    await EmbeddingWorker(failing, FAST).drain()
    assert await asset_state(services, asset_id) == ("failed", "failed")
    return asset_id


# --- the owner's retry ---------------------------------------------------------------------------


async def test_an_owner_retries_a_failed_representation_and_the_worker_is_woken(
    saving: MemoryServices, alice: Caller
) -> None:
    asset_id = await failed_asset(saving, alice, 1)
    # A worker that never polls within the test: only the retry's notification can wake it.
    worker = EmbeddingWorker(saving, replace(FAST, poll_seconds=3600, sweep_seconds=3600))
    retried: Any = None
    async with anyio.create_task_group() as group:
        ready = anyio.Event()
        group.start_soon(lambda: worker.run(ready=ready))
        await ready.wait()
        await until_a_worker_listens(saving)
        retried = await call(
            saving, retry_asset_embedding, alice, asset_id=asset_id, representation="visual"
        )
        assert (retried.status, retried.embedding_status) == ("queued", "pending")
        assert await asset_state(saving, asset_id) == ("processing", "pending")
        with anyio.fail_after(120):  # a hang guard, far below the hour between polls
            while await asset_state(saving, asset_id) != ("ready", "ready"):
                await anyio.sleep(0.05)
        group.cancel_scope.cancel()
    async with saving.database.unit_of_work() as uow:
        job = await uow.jobs.get(retried.job_id)
        events = await uow.provenance.for_target("job", retried.job_id)
    assert job is not None and job.status == "done" and job.attempts == 2
    assert job.last_error_code is None
    assert [(e.operation, e.actor_identity) for e in events] == [("job_retry", alice.identity)]
    assert events[0].detail["previousErrorCode"] == "wrong_dimensions"


async def test_an_owner_retry_refuses_when_nothing_failed_or_the_image_is_deleted(
    saving: MemoryServices, alice: Caller
) -> None:
    ready = await save(saving, alice, 2)
    await EmbeddingWorker(saving, FAST).drain()
    with pytest.raises(ConflictFailure, match="nothing to retry: its visual embedding is done"):
        await call(saving, retry_asset_embedding, alice, asset_id=ready, representation="visual")
    with pytest.raises(ConflictFailure, match="no fused vector"):
        await call(saving, retry_asset_embedding, alice, asset_id=ready, representation="fused")
    failed = await failed_asset(saving, alice, 3)
    await call(saving, delete_asset, alice, asset_id=failed)
    with pytest.raises(ConflictFailure, match="deleted"):
        await call(saving, retry_asset_embedding, alice, asset_id=failed, representation="visual")
    with pytest.raises(InvalidInputFailure, match="representation"):
        await call(saving, retry_asset_embedding, alice, asset_id=ready, representation="x")


async def test_another_owners_image_is_not_found_and_a_read_only_key_is_forbidden(
    saving: MemoryServices, alice: Caller, bob: Caller
) -> None:
    asset_id = await failed_asset(saving, alice, 4)
    with pytest.raises(NotFoundFailure):
        await call(saving, retry_asset_embedding, bob, asset_id=asset_id, representation="visual")
    with pytest.raises(NotFoundFailure):
        await call(
            saving, retry_asset_embedding, bob, asset_id="ast_" + "0" * 26, representation="visual"
        )
    reader = Caller(alice.identity, alice.key_id, frozenset({"read"}))
    with pytest.raises(Forbidden):
        await call(
            saving, retry_asset_embedding, reader, asset_id=asset_id, representation="visual"
        )
    # The admin scope is no access to an owner's images.
    ops = Caller("ops@example.com", "akey_o", frozenset({"read", "write", "admin"}))
    with pytest.raises(NotFoundFailure):
        await call(saving, retry_asset_embedding, ops, asset_id=asset_id, representation="visual")


# --- the operator's list --------------------------------------------------------------------------


async def test_every_operator_workflow_needs_the_admin_scope(
    saving: MemoryServices, alice: Caller
) -> None:
    await save(saving, alice, 5)
    for workflow, kwargs in [
        (list_jobs, {}),
        (job_details, {"type": "embedding", "job_id": "aej_x"}),
        (retry_job, {"job_id": "aej_x"}),
        (cancel_job, {"job_id": "aej_x", "reason": "r"}),
    ]:
        with pytest.raises(Forbidden, match="'admin' scope"):
            await call(saving, workflow, alice, **kwargs)


async def test_the_list_orders_newest_first_with_ties_broken_by_id_and_pages_stably(
    saving: MemoryServices, alice: Caller, bob: Caller, operator: Caller
) -> None:
    # One save queues both representations in one transaction: their created_at is equal.
    first = await save(saving, alice, 6, title="A harbour at dusk")
    second = await save(saving, bob, 7, title="A field of poppies")
    everything = await call(saving, list_jobs, operator)
    rows = [(r.created_at, r.id) for r in everything.jobs]
    assert len(rows) == 4 and rows == sorted(rows, reverse=True)
    assert rows[0][0] == rows[1][0] and rows[2][0] == rows[3][0]  # the ties are real
    assert {r.asset_id for r in everything.jobs[:2]} == {second}
    assert {r.owner_identity for r in everything.jobs} == {alice.identity, bob.identity}
    assert everything.active and everything.next_cursor is None
    # Page by one: every row exactly once, in the same order, though new work arrives meanwhile.
    seen: list[str] = []
    page = await call(saving, list_jobs, operator, limit=1)
    seen.extend(r.id for r in page.jobs)
    await save(saving, alice, 8, title="Work that arrives while the operator pages")
    while page.next_cursor is not None:
        page = await call(saving, list_jobs, operator, limit=1, cursor=page.next_cursor)
        seen.extend(r.id for r in page.jobs)
    assert seen == [r.id for r in everything.jobs]
    assert first in {r.asset_id for r in everything.jobs[2:]}


async def test_status_and_type_filters(
    saving: MemoryServices, alice: Caller, operator: Caller
) -> None:
    failed = await failed_asset(saving, alice, 9)
    await save(saving, alice, 10)
    queued = await call(saving, list_jobs, operator, status="queued")
    assert [r.status for r in queued.jobs] == ["queued"] and queued.active
    assert queued.jobs[0].can_cancel and not queued.jobs[0].can_retry
    failures = await call(saving, list_jobs, operator, status="failed", type="embedding")
    assert [(r.asset_id, r.error_code) for r in failures.jobs] == [(failed, "wrong_dimensions")]
    assert failures.jobs[0].can_retry and not failures.active
    assert (await call(saving, list_jobs, operator, type="purge")).jobs == []
    for bad in [{"status": "stuck"}, {"type": "mail"}, {"cursor": "nope"}, {"limit": 0}]:
        with pytest.raises(InvalidInputFailure):
            await call(saving, list_jobs, operator, **bad)


async def test_purges_and_reconciliation_passes_are_listed_as_they_happened(
    saving: MemoryServices, alice: Caller, operator: Caller
) -> None:
    asset_id = await save(saving, alice, 11)
    await EmbeddingWorker(saving, FAST).drain()
    await call(saving, delete_asset, alice, asset_id=asset_id)
    waiting = (await call(saving, list_jobs, operator, type="purge")).jobs
    assert [(r.status, r.owner_identity) for r in waiting] == [("queued", alice.identity)]
    assert waiting[0].due_at is not None and not waiting[0].can_retry
    assert await purge_deleted_objects(saving) == 1
    done = (await call(saving, list_jobs, operator, type="purge")).jobs
    assert [(r.id, r.status) for r in done] == [(waiting[0].id, "done")]
    details = await call(saving, job_details, operator, type="purge", job_id=done[0].id)
    assert [e.event for e in details.timeline][-1] == "purged"
    # No pass ran yet: none is listed. One pass: one row, with its findings.
    assert (await call(saving, list_jobs, operator, type="reconcile")).jobs == []
    await reconcile_store(saving, safety_window=timedelta(hours=1))
    runs = (await call(saving, list_jobs, operator, type="reconcile")).jobs
    assert [r.status for r in runs] == ["done"]
    run = await call(saving, job_details, operator, type="reconcile", job_id=runs[0].id)
    assert run.findings["namespaces"] == 1 and run.findings["removed"] == 0
    assert [e.event for e in run.timeline] == ["started", "finished"]
    with pytest.raises(NotFoundFailure):
        await call(saving, job_details, operator, type="reconcile", job_id="arr_missing")
    for kind in ["", "mail"]:
        with pytest.raises(InvalidInputFailure, match="type"):
            await call(saving, job_details, operator, type=kind, job_id=runs[0].id)


class _UnlistableStore(LocalAssetObjectStore):
    """A store whose listing fails (a bucket that went away mid-pass)."""

    async def list_namespace(self, prefix: str) -> AsyncIterator[ListedObject]:
        raise StorageError("the bucket is gone")
        yield  # pragma: no cover (an async generator that fails on its first step)


async def test_a_pass_that_stops_is_recorded_as_failed(
    saving: MemoryServices, alice: Caller, operator: Caller, tmp_path: Path
) -> None:
    await save(saving, alice, 17)
    broken = replace(
        saving, store=_UnlistableStore(tmp_path / "gone", UrlSigner(b"s" * 32), "http://x")
    )
    with pytest.raises(StorageError):
        await reconcile_store(broken, safety_window=timedelta(hours=1))
    (row,) = (await call(saving, list_jobs, operator, type="reconcile")).jobs
    assert (row.status, row.error_code) == ("failed", "store_unavailable")
    assert "bucket" not in (row.error or "")  # the store's own words may name keys


# --- the operator's retry and cancel ----------------------------------------------------------------


async def test_an_operator_retries_a_failed_job_and_its_details_tell_the_story(
    saving: MemoryServices, alice: Caller, operator: Caller
) -> None:
    asset_id = await failed_asset(saving, alice, 12)
    job = (await call(saving, list_jobs, operator, status="failed")).jobs[0]
    changed = await call(saving, retry_job, operator, job_id=job.id)
    assert (changed.job.status, changed.job.error_code) == ("queued", None)
    assert changed.job.max_attempts == job.attempts + 5
    with pytest.raises(ConflictFailure, match="the job is queued"):
        await call(saving, retry_job, operator, job_id=job.id)
    await EmbeddingWorker(saving, FAST).drain()
    assert await asset_state(saving, asset_id) == ("ready", "ready")
    details = await call(saving, job_details, operator, type="embedding", job_id=job.id)
    assert details.job.owner_identity == alice.identity and details.job.asset_id == asset_id
    assert [e.event for e in details.timeline] == ["created", "retried", "done"]
    assert details.timeline[1].actor == operator.identity
    assert details.timeline[1].detail == "was failed (wrong_dimensions)"
    with pytest.raises(NotFoundFailure):
        await call(saving, retry_job, operator, job_id="aej_missing")


async def test_cancel_refuses_a_running_job_and_the_workers_completion_stands(
    saving: MemoryServices, alice: Caller, operator: Caller
) -> None:
    asset_id = await save(saving, alice, 13)
    worker = EmbeddingWorker(saving, FAST)
    async with saving.database.unit_of_work() as uow:
        (job,) = await uow.jobs.claim(worker.worker_id, limit=8, lease_seconds=30)
    with pytest.raises(ConflictFailure, match="running"):
        await call(saving, cancel_job, operator, job_id=job.id, reason="stuck")
    with pytest.raises(ConflictFailure, match="the job is running"):
        await call(saving, retry_job, operator, job_id=job.id)
    # The worker still holds its lease and finishes the job as if nobody had asked.
    async with saving.database.unit_of_work() as uow:
        done = await uow.jobs.complete_many(worker.worker_id, {job.id: {"total_tokens": 1}})
        await uow.assets.reconcile_embedding(alice.identity, asset_id)
    assert done == {job.id}


async def test_a_cancel_racing_a_workers_claim_changes_nothing(
    saving: MemoryServices, alice: Caller, operator: Caller
) -> None:
    await save(saving, alice, 14)
    worker = EmbeddingWorker(saving, FAST)
    (row,) = (await call(saving, list_jobs, operator)).jobs
    outcome: list[BaseException] = []
    claimed_now = anyio.Event()

    async def cancel() -> None:
        await claimed_now.wait()
        try:
            await call(saving, cancel_job, operator, job_id=row.id, reason="not needed")
        except ConflictFailure as exc:
            outcome.append(exc)

    async with anyio.create_task_group() as group:
        # Started outside the claim's unit of work: a task opens its own.
        group.start_soon(cancel)
        async with saving.database.unit_of_work() as uow:
            claimed = await uow.jobs.claim(worker.worker_id, limit=8, lease_seconds=30)
            assert [j.id for j in claimed] == [row.id]
            # The cancel reads the job as queued, then waits on the claim's row lock.
            holder = await backend_pid(session_of(uow))
            claimed_now.set()
            await until_blocked_by(saving, holder)
            assert not outcome
        # The claim committed: the waiting update finds the job running and changes nothing.
    assert len(outcome) == 1 and "running now" in str(outcome[0])
    async with saving.database.unit_of_work() as uow:
        job = await uow.jobs.get(row.id)
    assert job is not None and (job.status, job.lease_owner) == ("running", worker.worker_id)


async def test_a_cancelled_job_is_never_claimed_and_can_be_retried(
    saving: MemoryServices, alice: Caller, operator: Caller
) -> None:
    asset_id = await save(saving, alice, 15)
    (row,) = (await call(saving, list_jobs, operator)).jobs
    for reason in ["", "   ", "x" * 501]:
        with pytest.raises(InvalidInputFailure, match="reason"):
            await call(saving, cancel_job, operator, job_id=row.id, reason=reason)
    changed = await call(saving, cancel_job, operator, job_id=row.id, reason="provider outage")
    assert (changed.job.status, changed.job.error) == ("cancelled", "provider outage")
    assert await EmbeddingWorker(saving, FAST).drain() == 0
    with pytest.raises(ConflictFailure, match="the job is cancelled"):
        await call(saving, cancel_job, operator, job_id=row.id, reason="again")
    # The image waits without a vector until its owner (or an operator) retries it.
    retried = await call(
        saving, retry_asset_embedding, alice, asset_id=asset_id, representation="visual"
    )
    assert retried.job_id == row.id
    await EmbeddingWorker(saving, FAST).drain()
    assert await asset_state(saving, asset_id) == ("ready", "ready")
    details = await call(saving, job_details, operator, type="embedding", job_id=row.id)
    assert [e.event for e in details.timeline] == ["created", "cancelled", "retried", "done"]


async def test_a_retry_of_a_deleted_images_job_is_refused(
    saving: MemoryServices, alice: Caller, operator: Caller
) -> None:
    asset_id = await failed_asset(saving, alice, 16)
    (row,) = (await call(saving, list_jobs, operator, status="failed")).jobs
    await call(saving, delete_asset, alice, asset_id=asset_id)
    with pytest.raises(ConflictFailure, match="deleted"):
        await call(saving, retry_job, operator, job_id=row.id)


async def test_a_job_the_server_cancelled_is_not_retried(
    saving: MemoryServices, alice: Caller, operator: Caller
) -> None:
    # The image's text changed: its fused job was superseded (the edit cancels it, and queues
    # a new one only when there is text left). Retrying it would embed words that are gone.
    asset_id = await save(saving, alice, 18, title="Words that will be cleared")
    async with saving.database.unit_of_work() as uow:
        await uow.jobs.supersede(alice.identity, asset_id, "fused")
    (row,) = (await call(saving, list_jobs, operator, status="cancelled")).jobs
    assert row.representation == "fused" and not row.can_retry
    with pytest.raises(ConflictFailure, match="cancelled by the server"):
        await call(saving, retry_job, operator, job_id=row.id)
    with pytest.raises(ConflictFailure, match="cancelled by the server"):
        await call(saving, retry_asset_embedding, alice, asset_id=asset_id, representation="fused")
