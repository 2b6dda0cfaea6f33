"""One unit of work per task: a second one opened inside the first is refused at once.

Holding a pooled connection while waiting for another is how a full pool deadlocks (16
concurrent searches did, each holding one connection and waiting for a second).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest
from sqlalchemy import text

from memory_db import Database, NestedUnitOfWork
from memory_db.database import create_engine
from memory_db.unit_of_work import session_of


@pytest.fixture
async def one_connection(database_url: str) -> AsyncIterator[Database]:
    database = Database(create_engine(database_url, pool_size=1, max_overflow=0))
    try:
        yield database
    finally:
        await database.close()


async def _select_one(database: Database) -> int:
    async with database.unit_of_work() as uow:
        return int((await session_of(uow).execute(text("SELECT 1"))).scalar_one())


async def test_a_unit_of_work_inside_another_is_refused_and_the_outer_one_still_works(
    one_connection: Database,
) -> None:
    with anyio.fail_after(5):  # without the guard this would wait for the one connection
        async with one_connection.unit_of_work() as outer:
            with pytest.raises(NestedUnitOfWork):
                await _select_one(one_connection)
            assert (await session_of(outer).execute(text("SELECT 2"))).scalar_one() == 2
        assert await _select_one(one_connection) == 1  # sequential units of work are fine


async def test_a_task_started_inside_a_unit_of_work_may_not_open_another(
    one_connection: Database,
) -> None:
    failures: list[BaseException] = []

    async def side_query() -> None:
        try:
            await _select_one(one_connection)
        except NestedUnitOfWork as exc:
            failures.append(exc)

    with anyio.fail_after(5):
        async with one_connection.unit_of_work(), anyio.create_task_group() as group:
            group.start_soon(side_query)
    assert len(failures) == 1


async def test_tasks_started_outside_any_unit_of_work_each_hold_their_own(
    database: Database,
) -> None:
    results: list[int] = []

    async def query() -> None:
        results.append(await _select_one(database))

    async with anyio.create_task_group() as group:
        for _ in range(6):  # more than the pool of 3 connections: they take turns
            group.start_soon(query)
    assert results == [1] * 6


async def test_the_marker_is_cleared_when_a_unit_of_work_fails(one_connection: Database) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        async with one_connection.unit_of_work():
            raise RuntimeError("boom")
    assert await _select_one(one_connection) == 1


async def test_after_commit_runs_only_when_the_transaction_committed(
    one_connection: Database,
) -> None:
    ran: list[str] = []
    async with one_connection.unit_of_work() as uow:
        uow.after_commit(lambda: ran.append("committed"))
        await session_of(uow).execute(text("SELECT 1"))
        assert ran == []  # not before the commit
    assert ran == ["committed"]
    with pytest.raises(RuntimeError, match="boom"):
        async with one_connection.unit_of_work() as uow:
            uow.after_commit(lambda: ran.append("rolled back"))
            raise RuntimeError("boom")
    # A commit the database refuses (a deferred check fails at COMMIT) runs nothing either.
    with pytest.raises(Exception, match="violates"):
        async with one_connection.unit_of_work() as uow:
            uow.after_commit(lambda: ran.append("refused at commit"))
            await session_of(uow).execute(
                text(
                    "CREATE TEMP TABLE t_after (v int CONSTRAINT one UNIQUE "
                    "DEFERRABLE INITIALLY DEFERRED) ON COMMIT DROP"
                )
            )
            await session_of(uow).execute(text("INSERT INTO t_after VALUES (1), (1)"))
    async with one_connection.single_statements() as uow:
        uow.after_commit(lambda: ran.append("autocommitted"))
    assert ran == ["committed", "autocommitted"]
