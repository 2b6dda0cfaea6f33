"""``image_asset_get`` with ``waitSeconds``: the answer comes when a worker settles the state,
without polling, without holding a connection or an admission turn while waiting; a timeout
returns the state then; cancelling leaks nothing; a lost listener is replaced."""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import anyio
import pytest
from fastmcp import Client
from sqlalchemy import text
from sqlalchemy.pool import QueuePool

from memory_db import Database
from memory_db.database import create_engine
from memory_db.testing.statements import statements_sent
from memory_tools import MemoryServices
from memory_tools.mcp.tools import run_as_caller
from memory_tools.serving.job_worker import job_worker
from memory_tools.workflows.assets import get_asset_waiting

from ..pictures import picture
from ..state_waits import Waits, record_waits
from ..tool_calls import call, error


async def _save(client: Client[Any], seed: int) -> str:
    saved = await call(
        client, "image_asset_save", {"imageBase64": base64.b64encode(picture(seed)).decode()}
    )
    return str(saved["assetId"])


def _checked_out(database: Database) -> int:
    pool = database.engine.pool
    assert isinstance(pool, QueuePool)
    return pool.checkedout()


@pytest.fixture
async def worker_services(
    saving: MemoryServices, database_url: str
) -> Any:  # the worker on an engine of its own: its statements are not the waiter's
    database = Database(create_engine(database_url, pool_size=3))
    try:
        yield replace(saving, database=database)
    finally:
        await database.close()


@pytest.fixture
async def waits(monkeypatch: pytest.MonkeyPatch) -> Waits:
    """How each wait of the test's calls ended (made in the test's event loop)."""
    return record_waits(monkeypatch)


async def _until(condition: Callable[[], bool], within: float = 10.0) -> None:
    with anyio.fail_after(within):
        while not condition():
            await anyio.sleep(0.02)


async def test_a_wait_returns_when_the_worker_finishes_without_polling(
    client_as: Callable[[str], Client[Any]],
    alice: Any,
    saving: MemoryServices,
    worker_services: MemoryServices,
    waits: Waits,
) -> None:
    watch = saving.database.asset_states
    async with client_as(alice.key) as client:
        asset_id = await _save(client, 11)
        answers: list[dict[str, Any]] = []

        async def wait() -> None:
            answers.append(
                await call(client, "image_asset_get", {"assetId": asset_id, "waitSeconds": 25})
            )

        async with anyio.create_task_group() as group:
            group.start_soon(wait)
            with anyio.fail_after(30):  # a hang guard
                await waits.began.wait()  # its reads are done; the call waits
            # While it waits: no statement at all, no pooled connection but the one
            # listener, and no admission turn.
            with statements_sent(saving.database) as idle:
                await anyio.sleep(1.5)
            assert idle == []
            assert _checked_out(saving.database) == 1 and watch.listening
            assert saving.call_admission.running == 0
            # A worker started after the call began, on another engine, settles the state.
            await job_worker(worker_services).drain()
    assert answers[0]["embeddingStatus"] == "ready" and answers[0]["status"] == "ready"
    # Ended by the worker's notifications, never by the call's 25 s deadline.
    assert waits.ended and set(waits.ended) == {"notified"}, waits.ended
    assert watch.waiters == 0 and not watch.listening
    assert _checked_out(saving.database) == 0


async def test_a_wait_times_out_with_the_state_then(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices, waits: Waits
) -> None:
    async with client_as(alice.key) as client:
        asset_id = await _save(client, 12)
        started = anyio.current_time()
        # Nothing settles the state: only the call's own deadline can end it (60 s: hang guard).
        with anyio.fail_after(60):
            answer = await call(client, "image_asset_get", {"assetId": asset_id, "waitSeconds": 1})
        waited = anyio.current_time() - started
        timed_out = list(waits.ended)
        # A settled asset answers at once, whatever the wait: it does not wait at all.
        await job_worker(saving).drain()
        listened = saving.database.asset_states.generation
        settled = await call(client, "image_asset_get", {"assetId": asset_id, "waitSeconds": 30})
    assert answer["embeddingStatus"] == "pending"  # still pending: the time ran out
    assert timed_out == ["cancelled"]  # by its deadline
    assert waited >= 1.0, waited  # not before it (a timer never fires early)
    assert settled["embeddingStatus"] == "ready"
    assert waits.ended == timed_out  # the settled asset's call never waited
    assert saving.database.asset_states.generation == listened  # answered without listening
    assert saving.database.asset_states.waiters == 0
    assert not saving.database.asset_states.listening


async def test_a_wait_is_bounded_and_only_on_readable_assets(
    client_as: Callable[[str], Client[Any]],
    alice: Any,
    bob: Any,
    saving: MemoryServices,
    waits: Waits,
) -> None:
    async with client_as(alice.key) as client:
        asset_id = await _save(client, 13)
        too_long = await error(client, "image_asset_get", {"assetId": asset_id, "waitSeconds": 31})
        negative = await error(client, "image_asset_get", {"assetId": asset_id, "waitSeconds": -1})
    listened = saving.database.asset_states.generation
    async with client_as(bob.key) as client:
        theirs = await error(client, "image_asset_get", {"assetId": asset_id, "waitSeconds": 20})
    assert "waitSeconds" in too_long and "waitSeconds" in negative
    assert theirs.startswith("not_found:")
    # Refused at its first read: it neither listened nor waited.
    assert saving.database.asset_states.generation == listened and waits.ended == []
    assert saving.database.asset_states.waiters == 0
    assert _checked_out(saving.database) == 0


async def test_cancelling_a_wait_leaks_no_connection_waiter_or_turn(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices
) -> None:
    watch = saving.database.asset_states
    async with client_as(alice.key) as client:
        asset_id = await _save(client, 14)
    key_saving = replace(saving, default_api_key=alice.key)
    with anyio.move_on_after(5):
        async with anyio.create_task_group() as group:
            for _ in range(3):  # three waiters share one listener
                group.start_soon(
                    lambda: run_as_caller(
                        key_saving,
                        get_asset_waiting,
                        key_saving,
                        asset_id=asset_id,
                        include_preview=False,
                        wait_seconds=25,
                    )
                )
            await _until(lambda: watch.waiters == 3)
            # Once their first reads are done: one listener, however many wait, and no turn.
            await _until(lambda: _checked_out(saving.database) == 1)
            await _until(lambda: saving.call_admission.running == 0)
            group.cancel_scope.cancel()
    assert watch.waiters == 0 and not watch.listening
    assert _checked_out(saving.database) == 0
    assert saving.call_admission.running == 0


async def test_a_lost_listener_is_replaced_and_the_wait_still_ends(
    client_as: Callable[[str], Client[Any]],
    alice: Any,
    saving: MemoryServices,
    worker_services: MemoryServices,
) -> None:
    watch = saving.database.asset_states
    async with client_as(alice.key) as client:
        asset_id = await _save(client, 15)
        answers: list[dict[str, Any]] = []

        async def wait() -> None:
            answers.append(
                await call(client, "image_asset_get", {"assetId": asset_id, "waitSeconds": 25})
            )

        async with anyio.create_task_group() as group:
            group.start_soon(wait)
            await _until(lambda: watch.waiters == 1)
            first = watch.generation
            # What a PostgreSQL restart does to the listening session.
            async with worker_services.database.engine.connect() as conn:
                killed = (
                    await conn.execute(
                        text(
                            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                            "WHERE query ILIKE 'LISTEN%memory_asset_states%' "
                            "AND datname = current_database()"
                        )
                    )
                ).scalar_one()
            assert killed == 1
            await _until(lambda: watch.generation > first and watch.listening)
            await job_worker(worker_services).drain()
    assert answers[0]["embeddingStatus"] == "ready"
    assert watch.waiters == 0 and not watch.listening
    assert _checked_out(saving.database) == 0


async def test_a_delete_ends_a_wait_at_once(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices, waits: Waits
) -> None:
    """A deleted image is an answer (not_found), not something to wait for until the deadline."""
    async with client_as(alice.key) as client:
        asset_id = await _save(client, 14)
        answers: list[str] = []

        async def wait() -> None:
            answers.append(
                await error(client, "image_asset_get", {"assetId": asset_id, "waitSeconds": 25})
            )

        async with anyio.create_task_group() as group:
            group.start_soon(wait)
            with anyio.fail_after(30):  # a hang guard
                await waits.began.wait()
            await call(client, "image_asset_delete", {"assetId": asset_id})
    assert answers == ["not_found: asset not found"]
    assert waits.ended == ["notified"]  # by the delete, not by the 25 s deadline


async def test_a_key_revoked_during_a_wait_gets_no_answer(
    client_as: Callable[[str], Client[Any]], alice: Any, saving: MemoryServices
) -> None:
    """The key was good when the call began; revoked meanwhile, it gets no state and no link."""
    watch = saving.database.asset_states
    async with client_as(alice.key) as client:
        asset_id = await _save(client, 15)
        answers: list[str] = []

        async def wait() -> None:
            arguments = {"assetId": asset_id, "waitSeconds": 2, "includeOriginal": True}
            answers.append(await error(client, "image_asset_get", arguments))

        async with anyio.create_task_group() as group:
            group.start_soon(wait)
            await _until(lambda: watch.waiters == 1)
            async with saving.database.unit_of_work() as uow:
                await uow.api_keys.revoke(alice.key_id)
    assert answers == ["unauthenticated: the API key was revoked or paused during the call"]
