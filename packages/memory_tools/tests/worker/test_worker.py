"""The embedding worker: outcomes, retries, leases, deletion races, batching, wake-ups."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest
from sqlalchemy import text

from memory_db import AssetRecord, JobRecord, ObjectRecord
from memory_db.embedding import EmbedResult, EmbedValue, ScriptedEmbedder, Task
from memory_db.errors import ProviderRejected, ProviderUnavailable
from memory_db.ids import new_id
from memory_db.storage import (
    build_object_key,
    build_staging_key,
    content_type_for_key,
)
from memory_db.testing.s3_peers import S3Peer
from memory_db.unit_of_work import session_of
from memory_db.vectors import (
    DEFAULT_ALIAS,
    create_index,
    describe_index,
    resolve_alias,
    start_rebuild,
    switch_alias,
)
from memory_tools import MemoryServices
from memory_tools.access import Caller
from memory_tools.errors import InvalidImage
from memory_tools.ingest.save import AssetSaver, SaveRequest
from memory_tools.jobs.handlers import JobFailed, JobResult, JobSubject, read_subject_preview
from memory_tools.jobs.worker import JobWorker, WorkerConfig, _Embedded
from memory_tools.operations.reconcile import reconcile_store
from memory_tools.serving.job_worker import job_worker

from ..job_listener import until_a_worker_listens
from ..pictures import picture

FAST = WorkerConfig(
    batch_size=8,
    lease_seconds=30,
    heartbeat_seconds=10,
    poll_seconds=0.2,
    retry_base_seconds=0.01,
    retry_max_seconds=0.02,
)


@pytest.fixture
async def alice_caller(database: Any) -> Caller:
    from memory_tools.operations import admin

    await admin.create_identity(database, "alice@example.com", 10**9)
    return Caller("alice@example.com", "akey_a", frozenset({"read", "write", "destructive"}))


async def save(services: MemoryServices, caller: Caller, seed: int, **fields: Any) -> str:
    request = SaveRequest(image_base64=base64.b64encode(picture(seed)).decode(), **fields)
    return (await AssetSaver(services).save(caller, request)).asset_id


async def asset_row(services: MemoryServices, asset_id: str) -> dict[str, Any]:
    async with services.database.engine.connect() as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT status, embedding_status, failure_code, metadata FROM mem_assets "
                    "WHERE id = :i"
                ),
                {"i": asset_id},
            )
        ).one()
    return dict(row._mapping)


async def scalar(services: MemoryServices, sql: str, **params: Any) -> Any:
    # begin(), not connect(): a write through connect() was rolled back on leaving the block,
    # so "due now" never happened and the test passed only when the backoff had run out.
    async with services.database.engine.begin() as conn:
        return (await conn.execute(text(sql), params)).scalar_one()


async def vectors_of(services: MemoryServices, asset_id: str) -> int:
    async with services.database.unit_of_work() as uow:
        name = await resolve_alias(session_of(uow))
        return int(
            await session_of(uow).scalar(
                text(f"SELECT count(*) FROM {name} WHERE asset_id = :a"), {"a": asset_id}
            )
            or 0
        )


async def test_a_saved_image_becomes_ready_with_both_representations(
    saving: MemoryServices, alice_caller: Caller
) -> None:
    asset_id = await save(saving, alice_caller, 1, title="Sunset over the harbour")
    worker = job_worker(saving, FAST)
    assert await worker.drain() == 2
    row = await asset_row(saving, asset_id)
    assert (row["status"], row["embedding_status"]) == ("ready", "ready")
    assert await vectors_of(saving, asset_id) == 2
    ledger = await scalar(
        saving,
        "SELECT count(*) FROM mem_usage_ledger WHERE asset_id = :a AND source = 'embed_image_document'",
        a=asset_id,
    )
    assert ledger == 2
    async with saving.database.unit_of_work() as uow:
        jobs = await uow.jobs.for_asset("alice@example.com", asset_id)
    assert {(job.status, job.attempts) for job in jobs} == {("done", 1)}
    assert all(job.lease_owner is None for job in jobs)


async def embed_provenance(services: MemoryServices, asset_id: str) -> list[dict[str, Any]]:
    async with services.database.engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT actor_identity, owner_identity, vault, target_kind, outcome, detail "
                "FROM mem_provenance WHERE operation = 'asset_embed' AND target_id = :a "
                "ORDER BY detail->>'representation'"
            ),
            {"a": asset_id},
        )
        return [dict(row._mapping) for row in rows]


async def test_each_vector_the_worker_writes_has_asset_embed_provenance(
    saving: MemoryServices, alice_caller: Caller
) -> None:
    asset_id = await save(saving, alice_caller, 3, title="Lighthouse at dusk")
    await job_worker(saving, FAST).drain()
    async with saving.database.unit_of_work() as uow:
        jobs = {
            job.representation: job
            for job in await uow.jobs.for_asset("alice@example.com", asset_id)
        }
        index = await resolve_alias(session_of(uow))
        vault = (await uow.assets.get_for_owner("alice@example.com", asset_id)).vault  # type: ignore[union-attr]
    events = await embed_provenance(saving, asset_id)
    embedder = saving.embedder
    assert embedder is not None
    assert [e["detail"]["representation"] for e in events] == ["fused", "visual"]
    for event in events:
        detail = event["detail"]
        job = jobs[detail["representation"]]
        assert (event["actor_identity"], event["owner_identity"], event["vault"]) == (
            "system:worker",
            "alice@example.com",
            vault,
        )
        assert (event["target_kind"], event["outcome"]) == ("asset", "succeeded")
        assert detail["jobId"] == job.id
        assert (detail["model"], detail["index"]) == (embedder.model, index)
        assert detail["dimensions"] == embedder.dimensions
        assert detail["element"] in ("vector", "halfvec")
        # The tokens are the job's own, as the usage ledger records them.
        assert detail["tokens"] == job.usage["total_tokens"]
        assert "alsoIndex" not in detail  # no rebuild was filling beside the index


async def test_no_text_means_visual_only_and_ready(
    saving: MemoryServices, alice_caller: Caller
) -> None:
    asset_id = await save(saving, alice_caller, 2)
    await job_worker(saving, FAST).drain()
    row = await asset_row(saving, asset_id)
    assert row["embedding_status"] == "ready"
    assert row["metadata"]["embedding"]["fused"].startswith("skipped")
    assert await vectors_of(saving, asset_id) == 1


async def test_one_embedder_call_embeds_a_batch(
    saving: MemoryServices, alice_caller: Caller
) -> None:
    embedder = ScriptedEmbedder(model_name="local-hash-v1")
    services = replace(saving, embedder=embedder)
    for seed in range(6):
        await save(services, alice_caller, 10 + seed)
    await job_worker(services, FAST).drain()
    assert embedder.calls == [("retrieval.passage", 6)]


async def test_a_batch_of_two_owners_is_reloaded_by_owner(
    saving: MemoryServices, alice_caller: Caller
) -> None:
    from memory_tools.operations import admin

    await admin.create_identity(saving.database, "bob@example.com", 10**9)
    bob = Caller("bob@example.com", "akey_b", frozenset({"read", "write"}))
    embedder = ScriptedEmbedder(model_name="local-hash-v1")
    services = replace(saving, embedder=embedder)
    alices = [await save(services, alice_caller, 40 + seed) for seed in range(2)]
    bobs = [await save(services, bob, 50 + seed) for seed in range(2)]
    async with services.database.unit_of_work() as uow:
        found = await uow.assets.get_many_for_owners(
            [
                ("alice@example.com", alices[0]),
                ("alice@example.com", bobs[0]),  # bob's asset under alice's name: not found
                ("bob@example.com", bobs[0]),
                ("bob@example.com", alices[1]),
            ]
        )
        assert set(found) == {("alice@example.com", alices[0]), ("bob@example.com", bobs[0])}
        alice_object = found[("alice@example.com", alices[0])].object_id
        bob_object = found[("bob@example.com", bobs[0])].object_id
        objects = await uow.objects.get_many(
            [
                ("alice@example.com", alice_object),
                ("bob@example.com", alice_object),
                ("bob@example.com", bob_object),
            ]
        )
        assert set(objects) == {
            ("alice@example.com", alice_object),
            ("bob@example.com", bob_object),
        }
        assert await uow.assets.get_many_for_owners([]) == {}
        assert await uow.objects.get_many([]) == {}
    await job_worker(services, FAST).drain()
    assert embedder.calls == [("retrieval.passage", 4)]  # one batch across both owners
    for asset_id in alices + bobs:
        assert (await asset_row(services, asset_id))["embedding_status"] == "ready"
        assert await vectors_of(services, asset_id) == 1


async def test_transient_failures_retry_with_backoff_then_succeed(
    saving: MemoryServices, alice_caller: Caller
) -> None:
    embedder = ScriptedEmbedder(
        model_name="local-hash-v1", script=[ProviderUnavailable("http_503", "busy")]
    )
    services = replace(saving, embedder=embedder)
    asset_id = await save(services, alice_caller, 20)
    worker = job_worker(services, FAST)
    await worker.run_once()
    async with services.database.unit_of_work() as uow:
        (job,) = await uow.jobs.for_asset("alice@example.com", asset_id)
    assert (job.status, job.last_error_code, job.attempts) == ("retry", "http_503", 1)
    assert job.run_after > job.created_at
    await anyio.sleep(0.05)
    await worker.drain()
    row = await asset_row(services, asset_id)
    assert row["embedding_status"] == "ready"


async def test_attempts_are_capped_at_five(saving: MemoryServices, alice_caller: Caller) -> None:
    embedder = ScriptedEmbedder(
        model_name="local-hash-v1",
        script=[ProviderUnavailable("http_503", "busy") for _ in range(10)],
    )
    services = replace(saving, embedder=embedder)
    asset_id = await save(services, alice_caller, 21)
    # A provider outage spends no attempts while a job is younger than the worker's patience
    # (tests/faults); past it, attempts count again and the cap ends a provider gone for good.
    async with services.database.engine.begin() as conn:
        await conn.execute(
            text("UPDATE mem_asset_embedding_jobs SET created_at = now() - interval '2 days'")
        )
    worker = job_worker(services, FAST)
    for _ in range(12):
        await worker.run_once()
        await anyio.sleep(0.03)
    async with services.database.unit_of_work() as uow:
        (job,) = await uow.jobs.for_asset("alice@example.com", asset_id)
    assert (job.status, job.attempts) == ("failed", 5)
    row = await asset_row(services, asset_id)
    assert (row["status"], row["embedding_status"], row["failure_code"]) == (
        "failed",
        "failed",
        "http_503",
    )
    assert len(embedder.calls) == 5


async def test_unsupported_media_fails_the_asset_and_quarantines_the_object(
    saving: MemoryServices, alice_caller: Caller
) -> None:
    embedder = ScriptedEmbedder(
        model_name="local-hash-v1", script=[ProviderRejected("unsupported_media", "no")]
    )
    services = replace(saving, embedder=embedder)
    asset_id = await save(services, alice_caller, 22)
    await job_worker(services, FAST).drain()
    row = await asset_row(services, asset_id)
    assert (row["status"], row["failure_code"]) == ("failed", "unsupported_media")
    assert await vectors_of(services, asset_id) == 0
    status = await scalar(services, "SELECT status FROM mem_asset_objects")
    assert status == "quarantined"
    # The same bytes saved again are refused, not deduplicated onto the quarantined object.
    with pytest.raises(InvalidImage, match="quarantined"):
        await AssetSaver(services).save(
            alice_caller, SaveRequest(image_base64=base64.b64encode(picture(22)).decode())
        )


async def test_a_broken_provider_contract_fails_permanently(
    saving: MemoryServices, alice_caller: Caller
) -> None:
    embedder = ScriptedEmbedder(model_name="local-hash-v1", script=[[[0.5] * 7]])
    services = replace(saving, embedder=embedder)
    asset_id = await save(services, alice_caller, 26)
    await job_worker(services, FAST).drain()
    row = await asset_row(services, asset_id)
    assert (row["status"], row["failure_code"]) == ("failed", "wrong_dimensions")
    assert len(embedder.calls) == 1  # not retried


class _FailFused(ScriptedEmbedder):
    """Rejects fused inputs only (a provider that cannot embed this text)."""

    async def embed(self, values: Sequence[EmbedValue], task: Task) -> EmbedResult:
        from memory_db.embedding import FusedInput

        if any(isinstance(v, FusedInput) for v in values):
            raise ProviderRejected("invalid_input", "text rejected")
        return await super().embed(values, task)


async def test_a_failed_fused_representation_is_partial(
    saving: MemoryServices, alice_caller: Caller
) -> None:
    services = replace(saving, embedder=_FailFused(model_name="local-hash-v1"))
    asset_id = await save(services, alice_caller, 23, alt_text="a red square")
    await job_worker(services, FAST).drain()
    row = await asset_row(services, asset_id)
    assert (row["status"], row["embedding_status"]) == ("ready", "partial")
    assert await vectors_of(services, asset_id) == 1


class _DeleteDuringEmbed(ScriptedEmbedder):
    """Marks the asset 'deleting' while its embedding is in flight."""

    services: Any = None

    async def embed(self, values: Sequence[EmbedValue], task: Task) -> EmbedResult:
        async with self.services.database.engine.begin() as conn:
            await conn.execute(text("UPDATE mem_assets SET status = 'deleting'"))
        return await super().embed(values, task)


async def test_an_asset_deleted_during_work_gets_no_vectors(
    saving: MemoryServices, alice_caller: Caller
) -> None:
    embedder = _DeleteDuringEmbed(model_name="local-hash-v1")
    services = replace(saving, embedder=embedder)
    embedder.services = services
    asset_id = await save(services, alice_caller, 24, title="doomed")
    await job_worker(services, FAST).drain()
    assert await vectors_of(services, asset_id) == 0
    async with services.database.unit_of_work() as uow:
        jobs = await uow.jobs.for_asset("alice@example.com", asset_id)
    assert {job.status for job in jobs} == {"cancelled"}
    assert await scalar(services, "SELECT count(*) FROM mem_usage_ledger") == 0
    assert await embed_provenance(services, asset_id) == []  # no vector, no record of one


# A claimed job with its asset and object, as the worker's claim reads them.
Claimed = tuple[JobRecord, tuple[AssetRecord, ObjectRecord] | None]


async def lapsed_lease(services: MemoryServices) -> tuple[JobWorker, list[Claimed]]:
    """A worker "slow" that claimed every job with a 0.2 s lease, which has now run out."""
    slow = job_worker(services, replace(FAST, lease_seconds=0.2), name="slow")
    await slow.drain(limit=0)  # prepares the index only
    async with services.database.unit_of_work() as uow:
        claimed = await uow.jobs.claim_with_subjects("slow", limit=10, lease_seconds=0.2)
    await anyio.sleep(0.3)
    return slow, claimed


async def finish_late(services: MemoryServices, worker: JobWorker, claimed: list[Claimed]) -> None:
    """``worker`` wakes up and runs its batch to the end, as if nothing had happened."""
    loaded = await worker._live(claimed)
    work = [w for w in [await worker._load(*row) for row in loaded] if w is not None]
    result = await services.embedder.embed([w.value for w in work], "retrieval.passage")  # type: ignore[union-attr]
    usage = {"total_tokens": 1, "prompt_tokens": 0, "image_tokens": 1}
    embedded = _Embedded(result.embeddings, [usage] * len(work), None)
    await worker._complete(work, embedded, await worker._plan())


async def test_an_expired_lease_is_reclaimed_and_the_old_worker_writes_nothing(
    saving: MemoryServices, alice_caller: Caller
) -> None:
    asset_id = await save(saving, alice_caller, 25, title="reclaimed")
    slow, claimed = await lapsed_lease(saving)
    assert len(claimed) == 2
    fast = job_worker(saving, FAST, name="fast")
    assert await fast.drain() == 2
    # The first worker wakes up and tries to finish: its lease is gone.
    await finish_late(saving, slow, claimed)
    assert await vectors_of(saving, asset_id) == 2
    assert await scalar(saving, "SELECT count(*) FROM mem_usage_ledger") == 2
    # One record per vector written: the late worker, whose lease was gone, recorded none.
    assert len(await embed_provenance(saving, asset_id)) == 2
    async with saving.database.unit_of_work() as uow:
        jobs = await uow.jobs.for_asset("alice@example.com", asset_id)
    assert {(job.status, job.attempts) for job in jobs} == {("done", 2)}


async def test_a_worker_whose_lease_was_taken_over_completes_nothing(
    saving: MemoryServices, alice_caller: Caller
) -> None:
    asset_id = await save(saving, alice_caller, 26, title="taken over")
    slow, claimed = await lapsed_lease(saving)
    assert len(claimed) == 2
    async with saving.database.unit_of_work() as uow:  # another worker holds them now
        assert len(await uow.jobs.claim("other", limit=10, lease_seconds=30)) == 2
    await finish_late(saving, slow, claimed)
    assert await vectors_of(saving, asset_id) == 0
    assert await scalar(saving, "SELECT count(*) FROM mem_usage_ledger") == 0
    assert await embed_provenance(saving, asset_id) == []
    async with saving.database.unit_of_work() as uow:
        jobs = await uow.jobs.for_asset("alice@example.com", asset_id)
    assert {(job.status, job.lease_owner) for job in jobs} == {("running", "other")}


async def test_completing_a_batch_records_each_jobs_own_usage(
    saving: MemoryServices, alice_caller: Caller
) -> None:
    for seed in range(2):
        await save(saving, alice_caller, 60 + seed, title=f"usage {seed}")
    async with saving.database.unit_of_work() as uow:
        claimed = await uow.jobs.claim("w", limit=10, lease_seconds=30)
        assert len(claimed) == 4
        usages = {
            job.id: {"total_tokens": 10 + n, "prompt_tokens": n, "image_tokens": 10}
            for n, job in enumerate(claimed[:3])
        }
        assert await uow.jobs.complete_many("someone else", usages) == set()
        assert await uow.jobs.complete_many("w", usages) == set(usages)
        assert await uow.jobs.complete_many("w", usages) == set()  # done already
        assert await uow.jobs.complete_many("w", {}) == set()
    async with saving.database.engine.connect() as conn:
        rows = (
            await conn.execute(text("SELECT id, status, usage FROM mem_asset_embedding_jobs"))
        ).all()
    for job_id, status, usage in rows:
        if job_id in usages:
            assert (status, usage) == ("done", usages[job_id])
        else:
            assert status == "running"


async def test_two_workers_never_run_the_same_job(
    saving: MemoryServices, alice_caller: Caller
) -> None:
    ids = [await save(saving, alice_caller, 40 + seed, title=f"t{seed}") for seed in range(20)]
    first = job_worker(saving, replace(FAST, batch_size=3), name="w1")
    second = job_worker(saving, replace(FAST, batch_size=3), name="w2")
    counts: list[int] = []

    async def run(worker: JobWorker) -> None:
        counts.append(await worker.drain())

    async with anyio.create_task_group() as group:
        group.start_soon(run, first)
        group.start_soon(run, second)
    assert sum(counts) == 40
    assert await scalar(saving, "SELECT count(*) FROM mem_usage_ledger") == 40
    assert (
        await scalar(
            saving,
            "SELECT count(*) FROM mem_asset_embedding_jobs WHERE status = 'done' AND attempts = 1",
        )
        == 40
    )
    for asset_id in ids:
        assert await vectors_of(saving, asset_id) == 2


async def test_a_running_worker_wakes_on_notify(
    saving: MemoryServices, alice_caller: Caller
) -> None:
    # It never polls within the test: only the save's notification can wake it.
    worker = job_worker(saving, replace(FAST, poll_seconds=3600, sweep_seconds=3600))
    ready = anyio.Event()
    async with anyio.create_task_group() as group:
        group.start_soon(lambda: worker.run(ready=ready))
        await ready.wait()
        await until_a_worker_listens(saving)
        asset_id = await save(saving, alice_caller, 60)
        with anyio.fail_after(120):  # a hang guard, far below the hour between polls
            while (await asset_row(saving, asset_id))["embedding_status"] != "ready":
                await anyio.sleep(0.05)
        group.cancel_scope.cancel()


async def test_a_running_worker_follows_an_alias_switch(
    saving: MemoryServices, alice_caller: Caller
) -> None:
    """After a rebuild switches the alias, the running worker writes to the new index."""

    async def rows_in(table: str, asset_id: str) -> int:
        return int(
            await scalar(saving, f"SELECT count(*) FROM {table} WHERE asset_id = :a", a=asset_id)
        )

    async def until_ready(asset_id: str) -> None:
        # A hang guard, not a speed check: a saturated 2-core machine (load 20) has taken
        # more than 10 s to embed one image after an alias switch re-planned the batch.
        with anyio.fail_after(120):
            while (await asset_row(saving, asset_id))["embedding_status"] != "ready":
                await anyio.sleep(0.05)

    worker = job_worker(saving, replace(FAST, poll_seconds=0.1, sweep_seconds=60))
    ready = anyio.Event()
    old = before = after = ""
    async with anyio.create_task_group() as group:
        group.start_soon(lambda: worker.run(ready=ready))
        await ready.wait()
        before = await save(saving, alice_caller, 61)
        await until_ready(before)
        async with saving.database.unit_of_work() as uow:
            old = await resolve_alias(session_of(uow))
            dimensions, element = await describe_index(session_of(uow), old)
            await create_index(
                session_of(uow), "rebuilt_v2", dimensions=dimensions, element=element
            )
            await switch_alias(session_of(uow), DEFAULT_ALIAS, "rebuilt_v2")
        after = await save(saving, alice_caller, 62)
        await until_ready(after)
        group.cancel_scope.cancel()
    assert (await rows_in(old, before), await rows_in("rebuilt_v2", before)) == (1, 0)
    assert (await rows_in(old, after), await rows_in("rebuilt_v2", after)) == (0, 1)


async def test_a_rebuild_begun_after_the_worker_remembered_its_plan_gets_the_new_vectors(
    saving: MemoryServices, alice_caller: Caller
) -> None:
    """The worker reads no alias per batch (issue 31), yet writes a rebuild begun since.

    The completion statement finds the rebuild its remembered plan did not know of, writes
    nothing, and the batch is planned again and written to both indexes.
    """
    worker = job_worker(saving, FAST)
    first = await save(saving, alice_caller, 64)
    await worker.drain()  # plans (no rebuild) and remembers the plan
    async with saving.database.unit_of_work() as uow:
        source = await resolve_alias(session_of(uow))
        active = await uow.vector_indexes.open(source)
        assert active.identity is not None
        await create_index(
            session_of(uow),
            "filling_v2",
            dimensions=active.dimensions,
            element=active.element,
            identity=active.identity,
        )
        # As another process's `memory-server reindex` starts it: this worker is not told.
        await start_rebuild(
            session_of(uow), alias=DEFAULT_ALIAS, target="filling_v2", source=source
        )
    second = await save(saving, alice_caller, 65)
    await worker.drain()
    old_first, old_second, new_first, new_second = [
        await scalar(saving, f"SELECT count(*) FROM {table} WHERE asset_id = :a", a=asset)
        for table in (source, "filling_v2")
        for asset in (first, second)
    ]
    # The first was written before the rebuild began (its walk copies it); the second to both.
    assert (old_first, new_first) == (1, 0)
    assert (old_second, new_second) == (1, 1)
    assert (await asset_row(saving, second))["embedding_status"] == "ready"


async def test_a_worker_does_not_write_into_an_index_of_other_dimensions(
    saving: MemoryServices, alice_caller: Caller
) -> None:
    """An alias switched to an index the embedder does not fit: the job waits, nothing lands."""
    worker = job_worker(saving, FAST)
    await worker.drain()  # creates the first index
    async with saving.database.unit_of_work() as uow:
        fitting = await resolve_alias(session_of(uow))
        await create_index(session_of(uow), "other_dims", dimensions=8)
        await switch_alias(session_of(uow), DEFAULT_ALIAS, "other_dims")
    asset_id = await save(saving, alice_caller, 63)
    await worker.run_once()
    async with saving.database.unit_of_work() as uow:
        jobs = await uow.jobs.for_asset("alice@example.com", asset_id)
    assert [(job.status, job.last_error_code) for job in jobs] == [("retry", "index_mismatch")]
    assert await scalar(saving, "SELECT count(*) FROM other_dims") == 0
    # Switched back: the worker does not keep the plan of the index it could not fit.
    async with saving.database.unit_of_work() as uow:
        await switch_alias(session_of(uow), DEFAULT_ALIAS, fitting)
    await scalar(  # due now rather than after the backoff
        saving, "UPDATE mem_asset_embedding_jobs SET run_after = now() RETURNING 1"
    )
    await worker.run_once()
    assert (await asset_row(saving, asset_id))["embedding_status"] == "ready"


async def test_the_sweep_fails_jobs_abandoned_on_their_last_attempt(
    saving: MemoryServices, alice_caller: Caller
) -> None:
    asset_id = await save(saving, alice_caller, 61)
    async with saving.database.engine.begin() as conn:
        await conn.execute(
            text(
                "UPDATE mem_asset_embedding_jobs SET status = 'running', attempts = 5, "
                "lease_owner = 'dead', lease_until = now() - interval '1 second'"
            )
        )
    await job_worker(saving, FAST).sweep()
    row = await asset_row(saving, asset_id)
    assert (row["status"], row["failure_code"]) == ("failed", "lease_expired")


async def test_the_sweep_removes_old_orphans_but_never_claimed_bytes(
    saving: MemoryServices, alice_caller: Caller
) -> None:
    asset_id = await save(saving, alice_caller, 62)
    async with saving.database.unit_of_work() as uow:
        asset = await uow.assets.get_for_owner("alice@example.com", asset_id)
        assert asset is not None
        stored = await uow.objects.get("alice@example.com", asset.object_id)
    orphan = stored.storage_key.replace(stored.id, "aob_" + "a" * 26)
    await saving.store.put(orphan, b"\x89PNG leftover", content_type="image/png")
    async with saving.database.unit_of_work() as uow:
        await uow.orphans.record("alice@example.com", [orphan, stored.storage_key], reason="test")
    worker = job_worker(saving, FAST)
    await worker.sweep()  # too young: nothing happens
    assert (await saving.store.head(orphan)).exists
    async with saving.database.engine.begin() as conn:
        await conn.execute(
            text("UPDATE mem_asset_orphan_candidates SET created_at = now() - interval '2 hours'")
        )
    await worker.sweep()
    assert not (await saving.store.head(orphan)).exists
    assert (await saving.store.head(stored.storage_key)).exists  # an object owns it
    assert (
        await scalar(
            saving, "SELECT count(*) FROM mem_asset_orphan_candidates WHERE resolved_at IS NULL"
        )
        == 0
    )


async def test_reconciliation_deletes_bytes_nothing_accounts_for_with_provenance(
    saving: MemoryServices, alice_caller: Caller
) -> None:
    asset_id = await save(saving, alice_caller, 63)
    async with saving.database.unit_of_work() as uow:
        asset = await uow.assets.get_for_owner("alice@example.com", asset_id)
        assert asset is not None
        stored = await uow.objects.get("alice@example.com", asset.object_id)
        upload, _ = await uow.quota.open_reservation(
            "alice@example.com",
            operation="asset_upload",
            idempotency_key=None,
            expected_bytes=10,
            expires_at=datetime.now(UTC) + timedelta(hours=1),
        )
    env, namespace = saving.settings.asset_storage_env_prefix, stored.namespace_id
    old_stray = build_object_key(env, namespace, new_id("aob"), "original", "png")
    young_stray = build_object_key(env, namespace, new_id("aob"), "preview")
    closed_staging = build_staging_key(env, namespace, new_id("aur"), "png")
    open_staging = build_staging_key(env, namespace, upload.id, "png")
    for key in (old_stray, young_stray, closed_staging, open_staging):
        await saving.store.put(
            key, b"<html>replayed</html>", content_type=content_type_for_key(key)
        )
    path = saving.store.root / old_stray  # type: ignore[attr-defined]
    two_hours_ago = (datetime.now(UTC) - timedelta(hours=2)).timestamp()
    os.utime(path, (two_hours_ago, two_hours_ago))
    await job_worker(saving, FAST).sweep()
    kept = [stored.storage_key, stored.preview_storage_key, young_stray, open_staging]
    for key in kept:
        assert key is not None and (await saving.store.head(key)).exists, key
    for key in (old_stray, closed_staging):
        assert not (await saving.store.head(key)).exists, key
    async with saving.database.engine.connect() as conn:
        events = (
            await conn.execute(
                text(
                    "SELECT actor_identity, owner_identity, target_kind, detail FROM mem_provenance "
                    "WHERE operation = 'asset_reconcile' ORDER BY target_kind"
                )
            )
        ).all()
    assert [(e[0], e[1], e[2], e[3]["key"], e[3]["reason"]) for e in events] == [
        ("system:worker", "alice@example.com", "object", old_stray, "no object row"),
        ("system:worker", "alice@example.com", "upload", closed_staging, "upload is closed"),
    ]
    assert all(e[3]["bytes"] == len(b"<html>replayed</html>") for e in events)


async def test_the_worker_never_embeds_a_preview_that_fails_the_database_hash(
    saving: MemoryServices, alice_caller: Caller
) -> None:
    asset_id = await save(saving, alice_caller, 65)
    async with saving.database.unit_of_work() as uow:
        asset = await uow.assets.get_for_owner("alice@example.com", asset_id)
        assert asset is not None
        stored = await uow.objects.get("alice@example.com", asset.object_id)
    assert stored.preview_storage_key is not None and stored.preview_sha256 is not None
    preview = saving.store.root / stored.preview_storage_key  # type: ignore[attr-defined]
    replaced = picture(66)
    preview.write_bytes(replaced)  # the sidecar still names the old hash; the database decides
    sidecar = preview.with_name(preview.name + ".json")
    sidecar.write_text(json.dumps({"sha256": hashlib.sha256(replaced).hexdigest()}))
    await job_worker(saving, FAST).drain()
    row = await asset_row(saving, asset_id)
    assert (row["status"], row["failure_code"]) == ("failed", "integrity_failure")
    assert await vectors_of(saving, asset_id) == 0


async def test_reconciliation_reports_keys_it_did_not_make_and_goes_on(
    saving: MemoryServices, alice_caller: Caller, moto_peer: S3Peer
) -> None:
    store, bucket = moto_peer.new_store("rc")
    services = replace(saving, store=store)
    try:
        asset_id = await save(services, alice_caller, 70)
        async with services.database.unit_of_work() as uow:
            asset = await uow.assets.get_for_owner("alice@example.com", asset_id)
            assert asset is not None
            stored = await uow.objects.get("alice@example.com", asset.object_id)
        env, namespace = services.settings.asset_storage_env_prefix, stored.namespace_id
        # A key no builder makes (a shared bucket, a file put there by hand), and an orphan.
        foreign = f"{env}/tenants/{namespace}/notes/readme.txt"
        moto_peer.client().put_object(Bucket=bucket, Key=foreign, Body=b"not ours")
        orphan = build_object_key(env, namespace, new_id("aob"), "preview")
        await store.put(orphan, b"orphaned bytes", content_type="image/webp")
        report = await reconcile_store(services, safety_window=timedelta(0))
        assert (report.foreign, report.removed) == (1, 1)
        assert not (await store.head(orphan)).exists
        assert (await store.head(stored.storage_key)).exists
        kept = moto_peer.client().get_object(Bucket=bucket, Key=foreign)["Body"].read()
        assert kept == b"not ours"
    finally:
        await store.close()


# --- jobs of other kinds ---------------------------------------------------------------------


class RecordingHandler:
    """A real handler of the ``ocr`` kind: reads the preview, then fails or writes as told."""

    kind = "ocr"

    def __init__(self, services: MemoryServices, failures: Sequence[JobFailed] = ()) -> None:
        self._services = services
        self._failures = list(failures)
        self.written: list[tuple[str, int]] = []

    async def run(self, subject: JobSubject) -> JobResult:
        preview = await read_subject_preview(self._services, subject)
        if self._failures:
            raise self._failures.pop(0)

        async def write(uow: Any, asset: Any) -> None:
            # Inside the completion's transaction: the asset row is locked by now.
            assert session_of(uow).in_transaction()
            self.written.append((asset.id, len(preview)))

        return JobResult(write=write, usage={"characters": 7})


async def queue_kind(services: MemoryServices, asset_id: str, kind: str = "ocr") -> str | None:
    async with services.database.unit_of_work() as uow:
        job = await uow.jobs.create_kind("alice@example.com", asset_id, kind=kind, model="engine-1")
    return None if job is None else job.id


async def test_a_job_of_another_kind_runs_through_its_handler_after_the_lease_check(
    saving: MemoryServices, alice_caller: Caller
) -> None:
    asset_id = await save(saving, alice_caller, 81)
    handler = RecordingHandler(saving)
    worker = job_worker(saving, FAST, handlers={"ocr": handler})
    await worker.drain()
    job_id = await queue_kind(saving, asset_id)
    assert job_id is not None
    assert await queue_kind(saving, asset_id) is None  # one active job per asset and kind
    assert await worker.drain() == 1
    assert [written[0] for written in handler.written] == [asset_id]
    async with saving.database.unit_of_work() as uow:
        job = await uow.jobs.get(job_id)
        listed = await uow.work.list(kinds=("ocr",))
    assert job is not None
    assert (job.kind, job.status, job.representation, job.usage) == (
        "ocr",
        "done",
        None,
        {"characters": 7},
    )
    assert [(item.kind, item.id) for item in listed] == [("ocr", job_id)]
    row = await asset_row(saving, asset_id)
    assert (row["status"], row["embedding_status"]) == ("ready", "ready")


async def test_a_failed_job_of_another_kind_records_its_reason_and_the_image_stays_ready(
    saving: MemoryServices, alice_caller: Caller
) -> None:
    asset_id = await save(saving, alice_caller, 82)
    failures = [
        JobFailed("engine_busy", "try later", retryable=True),
        JobFailed("engine_broken", "the engine cannot read it"),
    ]
    handler = RecordingHandler(saving, failures)
    worker = job_worker(saving, FAST, handlers={"ocr": handler})
    await worker.drain()
    job_id = await queue_kind(saving, asset_id)
    assert job_id is not None
    await worker.run_once()
    async with saving.database.unit_of_work() as uow:
        job = await uow.jobs.get(job_id)
    assert job is not None and (job.status, job.last_error_code) == ("retry", "engine_busy")
    await scalar(  # due now rather than after the backoff
        saving,
        "UPDATE mem_asset_embedding_jobs SET run_after = now() WHERE id = :i RETURNING 1",
        i=job_id,
    )
    await worker.drain()
    async with saving.database.unit_of_work() as uow:
        job = await uow.jobs.get(job_id)
    assert job is not None
    assert (job.status, job.last_error_code, job.attempts) == ("failed", "engine_broken", 2)
    assert handler.written == []
    row = await asset_row(saving, asset_id)
    assert (row["status"], row["embedding_status"], row["failure_code"]) == (
        "ready",
        "ready",
        None,
    )


async def test_a_worker_without_a_handler_leaves_the_kind_to_workers_that_have_one(
    saving: MemoryServices, alice_caller: Caller
) -> None:
    asset_id = await save(saving, alice_caller, 83)
    await job_worker(saving, FAST, handlers={}).drain()
    job_id = await queue_kind(saving, asset_id)
    assert await job_worker(saving, FAST, handlers={}).drain() == 0
    async with saving.database.unit_of_work() as uow:
        job = await uow.jobs.get(job_id or "")
    assert job is not None and job.status == "queued"


class HeldHandler:
    """An ``ocr`` handler that works until the test lets it finish (OCR of a large image)."""

    kind = "ocr"

    def __init__(self) -> None:
        self.started = anyio.Event()
        self.release = anyio.Event()

    async def run(self, subject: JobSubject) -> JobResult:
        self.started.set()
        await self.release.wait()
        return JobResult(usage={"words": 0})


async def test_a_saves_embedding_never_waits_behind_ocr_work(
    saving: MemoryServices, alice_caller: Caller
) -> None:
    # One embedding slot: before, it claimed the OCR job with the embeddings and ran it after
    # them, so the next save's embedding waited until the OCR finished. Now OCR has a lane of
    # its own and the slot only embeds.
    ocr_on = replace(saving, settings=saving.settings.model_copy(update={"asset_ocr": "all"}))
    handler = HeldHandler()
    config = replace(FAST, concurrency=1, sweep_seconds=60)
    worker = job_worker(ocr_on, config, handlers={"ocr": handler})
    ready = anyio.Event()
    async with anyio.create_task_group() as group:
        group.start_soon(lambda: worker.run(ready=ready))
        await ready.wait()
        first = await save(ocr_on, alice_caller, 90)
        with anyio.fail_after(120):
            await handler.started.wait()  # its OCR holds its lane from now on
        second = await save(ocr_on, alice_caller, 91)
        with anyio.fail_after(120):  # generous: this waits for the embedding, not for the OCR
            while (await asset_row(ocr_on, second))["embedding_status"] != "ready":
                await anyio.sleep(0.05)
        assert not handler.release.is_set()
        handler.release.set()
        with anyio.fail_after(120):
            while (
                await scalar(
                    ocr_on,
                    "SELECT count(*) FROM mem_asset_embedding_jobs WHERE kind = 'ocr' "
                    "AND status = 'done'",
                )
                < 2
            ):
                await anyio.sleep(0.05)
        assert (await asset_row(ocr_on, first))["embedding_status"] == "ready"
        group.cancel_scope.cancel()
