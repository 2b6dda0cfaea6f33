"""The job queue's repository on a real PostgreSQL: the wake-up channel, leases, asset locks."""

from __future__ import annotations

import hashlib
from typing import Any

import anyio
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from memory_db import Database, JobRecord, VaultScope, new_id
from memory_db.repositories import JOB_CHANNEL, listen_for_jobs
from memory_db.unit_of_work import session_of

A = "alice@example.com"
B = "bob@example.com"


async def _asset(database: Database, owner: str) -> str:
    """A new identity ``owner`` with an object and an asset; returns the asset id."""
    async with database.unit_of_work() as uow:
        namespace = (await uow.identities.create(owner, 10**9)).namespace_id
        object_id = new_id("aob")
        await uow.objects.create(
            object_id=object_id,
            owner=owner,
            namespace_id=namespace,
            sha256=hashlib.sha256(object_id.encode()).hexdigest(),
            storage_key=f"k/{object_id}",
            preview_storage_key=f"k/{object_id}.preview",
            preview_sha256="0" * 64,
            mime_type="image/png",
            extension="png",
            nbytes=10,
            preview_bytes=10,
            width=1,
            height=1,
            etag=None,
            version_id=None,
        )
        asset = await uow.assets.create(
            VaultScope(owner, f"{owner}/Library"),
            object_id=object_id,
            project_id=None,
            folder_id=None,
            title="t",
            description=None,
            alt_text=None,
            source_url=None,
            source_url_hash=None,
            source_kind="upload",
            source_ref={},
            tags=[],
            metadata={},
            created_by=owner,
        )
    return asset.id


async def _queue(database: Database, owner: str, asset_id: str) -> list[JobRecord]:
    async with database.unit_of_work() as uow:
        return [
            await uow.jobs.create(
                owner, asset_id, representation=representation, model="m", dimensions=4
            )
            for representation in ("visual", "fused")
        ]


async def _jobs(database: Database, owner: str, asset_id: str) -> dict[str, JobRecord]:
    async with database.unit_of_work() as uow:
        return {job.id: job for job in await uow.jobs.for_asset(owner, asset_id)}


async def test_a_notify_reaches_whoever_listens_on_the_job_channel(database: Database) -> None:
    received: list[str] = []
    arrived = anyio.Event()

    def heard(_conn: Any, _pid: int, channel: str, _payload: str) -> None:
        received.append(channel)
        arrived.set()

    # A plain LISTEN, not the worker's helper: this checks the name, whoever listens.
    async with database.engine.connect() as conn:
        driver: Any = (await conn.get_raw_connection()).driver_connection
        await driver.add_listener(JOB_CHANNEL, heard)
        try:
            async with database.unit_of_work() as uow:
                await uow.jobs.notify()
                await anyio.sleep(0.2)
                assert received == []  # delivered on commit, not before
            with anyio.fail_after(5):
                await arrived.wait()
        finally:
            await driver.remove_listener(JOB_CHANNEL, heard)
    assert received == [JOB_CHANNEL]


async def test_listening_wakes_at_once_on_each_notify_and_ends_with_its_connection(
    database: Database,
) -> None:
    wakes = 0
    woken = anyio.Event()
    ended = anyio.Event()

    def wake() -> None:
        nonlocal wakes, woken
        wakes += 1
        woken.set()

    async def listen() -> None:
        await listen_for_jobs(database, wake)
        ended.set()

    async with anyio.create_task_group() as group:
        group.start_soon(listen)
        with anyio.fail_after(5):
            await woken.wait()  # at once, for what was queued while nobody listened
        assert wakes == 1
        woken = anyio.Event()
        async with database.unit_of_work() as uow:
            await uow.jobs.notify()
        with anyio.fail_after(5):
            await woken.wait()
        assert wakes == 2
        async with database.unit_of_work() as uow:  # the server drops the listening session
            killed = await session_of(uow).scalar(
                text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND query LIKE 'LISTEN %'"
                )
            )
        assert killed == 1
        with anyio.fail_after(5):
            await ended.wait()


async def test_only_the_worker_holding_a_job_changes_it(database: Database) -> None:
    asset_id = await _asset(database, A)
    first, second = (job.id for job in await _queue(database, A, asset_id))
    async with database.unit_of_work() as uow:
        claimed = await uow.jobs.claim("w1", limit=10, lease_seconds=30)
    assert {job.id for job in claimed} == {first, second}
    job = next(job for job in claimed if job.id == first)
    async with database.unit_of_work() as uow:  # another worker: nothing it asks happens
        assert await uow.jobs.heartbeat("w2", [first, second], lease_seconds=30) == set()
        assert await uow.jobs.release("w2", [first, second]) == set()
        assert await uow.jobs.complete_many("w2", {first: {"total_tokens": 1}}) == set()
        assert not await uow.jobs.retry_later(job, "w2", code="c", message="m", delay=1)
        assert not await uow.jobs.fail(first, "w2", code="c", message="m")
        assert not await uow.jobs.cancel(first, "w2", reason="r")
    before = await _jobs(database, A, asset_id)
    assert {(j.status, j.lease_owner, j.attempts) for j in before.values()} == {
        ("running", "w1", 1)
    }
    async with database.unit_of_work() as uow:
        assert await uow.jobs.heartbeat("w1", [first, second], lease_seconds=60) == {
            first,
            second,
        }
        assert await uow.jobs.release("w1", [first]) == {first}
        assert await uow.jobs.fail(second, "w1", code="bad", message="broken")
        # Neither is held any more: a second outcome changes nothing.
        assert await uow.jobs.heartbeat("w1", [first, second], lease_seconds=60) == set()
        assert not await uow.jobs.cancel(second, "w1", reason="r")
    after = await _jobs(database, A, asset_id)
    released, failed = after[first], after[second]
    assert (released.status, released.attempts, released.lease_owner) == ("retry", 0, None)
    assert (failed.status, failed.last_error_code, failed.lease_owner) == ("failed", "bad", None)
    assert failed.completed_at is not None and released.completed_at is None


async def test_a_claim_takes_every_due_embedding_job_of_the_assets_it_takes(
    database: Database,
) -> None:
    # Two batches at once, each holding one of a save's jobs, would each send its image.
    first_asset, second_asset = await _asset(database, A), await _asset(database, B)
    first = {job.representation: job.id for job in await _queue(database, A, first_asset)}
    second = {job.representation: job.id for job in await _queue(database, B, second_asset)}
    async with database.unit_of_work() as uow:
        one = await uow.jobs.claim("w1", limit=1, lease_seconds=30)
    assert {job.asset_id for job in one} == {first_asset}
    assert {job.id for job in one} == set(first.values())  # visual and fused together
    async with database.unit_of_work() as uow:
        other = await uow.jobs.claim("w2", limit=1, lease_seconds=30)
    assert {job.id for job in other} == set(second.values())


async def _ocr_queued(database: Database, stem: str, count: int) -> list[JobRecord]:
    """``count`` new owners named after ``stem``, each with an asset and its queued OCR job."""
    owners = [f"{stem}{n}@example.com" for n in range(count)]
    assets = [await _asset(database, owner) for owner in owners]
    async with database.unit_of_work() as uow:
        jobs = [
            await uow.jobs.create_kind(owner, asset, kind="ocr", model="tesseract")
            for owner, asset in zip(owners, assets, strict=True)
        ]
    return [job for job in jobs if job is not None]


async def test_a_claim_takes_embedding_jobs_before_older_jobs_of_other_kinds(
    database: Database,
) -> None:
    # OCR queued first (earlier saves, or a whole vault read again), then a new save's
    # embeddings: what makes the new save searchable is claimed first, whatever waited longer.
    ocr = await _ocr_queued(database, "reader", 3)
    new_asset = await _asset(database, A)
    embeds = {job.id for job in await _queue(database, A, new_asset)}
    other = await _asset(database, B)
    later = {job.id for job in await _queue(database, B, other)}
    async with database.unit_of_work() as uow:
        first = await uow.jobs.claim("w1", limit=2, lease_seconds=30, kinds=("embed", "ocr"))
        # The lane of other kinds takes them while embedding jobs are still due: never starved.
        lane = await uow.jobs.claim("w2", limit=8, lease_seconds=30, kinds=("ocr",))
        rest = await uow.jobs.claim("w3", limit=8, lease_seconds=30, kinds=("embed", "ocr"))
    assert {job.id for job in first} == embeds
    assert {job.id for job in lane} == {job.id for job in ocr}
    assert {job.id for job in rest} == later


async def test_each_claim_takes_its_own_owner_limit_and_lease_length(
    database: Database,
) -> None:
    # The claim statement is built once per set of kinds and run with each claim's values: a
    # claim after another of the same kinds leases as many jobs, to whom and for how long it
    # asks, never as the first one did.
    await _ocr_queued(database, "lease", 4)
    async with database.unit_of_work() as uow:
        first = await uow.jobs.claim("w1", limit=1, lease_seconds=30, kinds=("ocr",))
        second = await uow.jobs.claim("w2", limit=2, lease_seconds=600, kinds=("ocr",))
        leases = dict(
            (
                await session_of(uow).execute(
                    text(
                        "SELECT lease_owner, max(extract(epoch FROM lease_until - now())) "
                        "FROM mem_asset_embedding_jobs WHERE status = 'running' "
                        "GROUP BY lease_owner"
                    )
                )
            ).all()
        )
    assert [job.lease_owner for job in first] == ["w1"]
    assert [job.lease_owner for job in second] == ["w2", "w2"]
    assert 0 < leases["w1"] <= 30 < 500 < leases["w2"] <= 600


async def test_a_lapsed_lease_is_claimed_again_or_failed_after_the_last_attempt(
    database: Database,
) -> None:
    asset_id = await _asset(database, A)
    first, second = (job.id for job in await _queue(database, A, asset_id))
    async with database.unit_of_work() as uow:
        await uow.jobs.claim("w1", limit=10, lease_seconds=30)
        assert await uow.jobs.claim("w2", limit=10, lease_seconds=30) == []  # still leased
        await session_of(uow).execute(
            text(
                "UPDATE mem_asset_embedding_jobs SET lease_until = now() - interval '1 second', "
                "attempts = CASE WHEN id = :last THEN max_attempts ELSE attempts END"
            ),
            {"last": second},
        )
    async with database.unit_of_work() as uow:
        assert await uow.jobs.fail_abandoned() == [(A, asset_id)]
        reclaimed = await uow.jobs.claim("w2", limit=10, lease_seconds=30)
        assert [(job.id, job.lease_owner, job.attempts) for job in reclaimed] == [(first, "w2", 2)]
        assert await uow.jobs.heartbeat("w1", [first], lease_seconds=30) == set()
    jobs = await _jobs(database, A, asset_id)
    assert (jobs[second].status, jobs[second].last_error_code) == ("failed", "lease_expired")


async def test_locking_assets_for_completion_takes_the_owner_into_account(
    database: Database,
) -> None:
    alices = await _asset(database, A)
    bobs = await _asset(database, B)
    async with database.unit_of_work() as uow:
        assert set(await uow.assets.lock_many_for_owners([(A, alices), (A, bobs)])) == {
            (A, alices)  # bob's asset is not alice's, whatever its id
        }
        locked = await uow.assets.lock_many_for_owners([(B, bobs), (A, alices)])
        assert set(locked) == {(A, alices), (B, bobs)}
        assert locked[(A, alices)].owner_identity == A
        assert await uow.assets.lock_many_for_owners([]) == {}
        # While this transaction holds the rows, nobody else can change them.
        async with database.engine.connect() as other:
            await other.execute(text("SET lock_timeout = '200ms'"))
            with pytest.raises(DBAPIError, match="lock"):
                await other.execute(
                    text("UPDATE mem_assets SET status = 'deleting' WHERE id = :id"),
                    {"id": alices},
                )


async def test_superseding_a_representation_takes_its_running_job_from_the_worker(
    database: Database,
) -> None:
    """An edit of an image's words: the fused jobs of the old text end, whatever their state."""
    asset = await _asset(database, A)
    visual, fused = await _queue(database, A, asset)
    async with database.unit_of_work() as uow:
        claimed = await uow.jobs.claim("w1", limit=10, lease_seconds=60)
    assert {job.id for job in claimed} == {visual.id, fused.id}
    async with database.unit_of_work() as uow:
        superseded = await uow.jobs.supersede(A, asset, "fused")
        other_owner = await uow.jobs.supersede(B, asset, "visual")
        fresh = await uow.jobs.create(A, asset, representation="fused", model="m", dimensions=4)
    async with database.unit_of_work() as uow:
        # The worker finishes its batch: only the job it still holds completes.
        done = await uow.jobs.complete_many("w1", {visual.id: {}, fused.id: {}})
        again = await uow.jobs.supersede(A, asset, "fused")
    jobs = await _jobs(database, A, asset)
    assert superseded == 1 and other_owner == 0
    assert done == {visual.id}
    assert jobs[fused.id].status == "cancelled" and jobs[fused.id].lease_owner is None
    assert jobs[fused.id].last_error == "superseded: the asset's text changed"
    assert jobs[visual.id].status == "done"
    # Superseding again ends the new job too, and never touches cancelled ones twice.
    assert again == 1 and jobs[fresh.id].status == "cancelled"


async def test_a_requeue_and_a_cancel_change_only_jobs_in_the_states_they_name(
    database: Database,
) -> None:
    asset_id = await _asset(database, A)
    visual, fused = await _queue(database, A, asset_id)
    async with database.unit_of_work() as uow:
        assert await uow.jobs.requeue(visual.id, attempts=5) is None  # queued: not failed
        cancelled = await uow.jobs.cancel_waiting(visual.id, reason="provider down")
        assert cancelled is not None and cancelled.status == "cancelled"
        assert (cancelled.last_error_code, cancelled.last_error) == ("cancelled", "provider down")
        assert await uow.jobs.cancel_waiting(visual.id, reason="again") is None
        (claimed,) = await uow.jobs.claim("w1", limit=8, lease_seconds=30)
        assert claimed.id == fused.id  # the cancelled job is never claimed
        assert await uow.jobs.cancel_waiting(fused.id, reason="running") is None
        assert await uow.jobs.fail(fused.id, "w1", code="http_400", message="no")
        again = await uow.jobs.requeue(fused.id, attempts=5)
        assert again is not None and again.status == "queued"
        assert (again.attempts, again.max_attempts, again.last_error_code) == (1, 6, None)
        assert again.lease_owner is None and again.completed_at is None
        latest = await uow.jobs.latest(A, asset_id, "fused")
        assert latest is not None and latest.id == fused.id


async def test_the_work_list_orders_newest_first_and_pages_by_keyset(database: Database) -> None:
    first = await _asset(database, A)
    second = await _asset(database, B)
    await _queue(database, A, first)
    await _queue(database, B, second)
    async with database.unit_of_work() as uow:
        everything = await uow.work.list(limit=10)
        keys = [(item.sort_at, item.id) for item in everything]
        assert len(keys) == 4 and keys == sorted(keys, reverse=True)
        assert keys[0][0] == keys[1][0]  # one transaction, one now(): a tie broken by id
        paged: list[str] = []
        before = None
        while True:
            page = await uow.work.list(limit=1, before=before)
            if not page:
                break
            paged.append(page[0].id)
            before = (page[0].sort_at, page[0].id)
        assert paged == [item.id for item in everything]
        queued = await uow.work.list(kinds=("embedding",), statuses=("queued",))
        assert len(queued) == 4
        assert await uow.work.list(kinds=("purge", "reconcile")) == []
        assert await uow.work.list(kinds=()) == []
