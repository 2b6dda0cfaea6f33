"""A search's two statements (``memory_db.vectors.ranking``): the strategy the scope count
chooses is the one the ranking statement runs, the graph walk keeps its plan inside the larger
statement, and a moved alias is noticed before anything is ranked or metered."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sqlalchemy import event, text
from sqlalchemy.sql.elements import TextClause

from memory_db import Database, MemoryDbError, VaultScope
from memory_db.repositories import AssetFilter
from memory_db.testing.vector_rows import vector_row
from memory_db.unit_of_work import session_of
from memory_db.vectors import (
    DEFAULT_ALIAS,
    SearchTuning,
    VectorIndex,
    create_index,
    ensure_default_index,
    ranking,
)
from memory_db.vectors.ranking import (
    AliasMoved,
    FusionWeights,
    Metering,
    rank_and_meter,
    start_search,
)

MODEL = "local-hash-v1"
OWNERS = [f"o{v}@example.com" for v in range(10)]
SCOPES = [VaultScope(owner, f"{owner}/Library") for owner in OWNERS]


def _unit(rng: np.random.Generator, n: int) -> np.ndarray[Any, Any]:
    vectors = rng.standard_normal((n, 1024))
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


async def _library(database: Database) -> list[float]:
    rng = np.random.default_rng(5)
    async with database.unit_of_work() as uow:
        await ensure_default_index(session_of(uow), "memory_assets_v1", dimensions=1024)
        await uow.identities.create(OWNERS[0], 10)
        index = await VectorIndex.open(session_of(uow), "memory_assets_v1")
        for v, scope in enumerate(SCOPES):
            records = [
                vector_row(f"ast_{v}x{i}", vector, model=MODEL)
                for i, vector in enumerate(_unit(rng, 60))
            ]
            await index.upsert(scope, records)
    async with database.engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(text("VACUUM ANALYZE memory_assets_v1"))
    return [float(x) for x in _unit(rng, 1)[0]]


async def _start(
    session: Any,
    index: VectorIndex,
    tuning: SearchTuning,
    *,
    plan_once: bool = False,
    scopes: tuple[VaultScope, ...] = tuple(SCOPES[:3]),
    viewer: str | None = None,
) -> Any:
    """A search's start over ``scopes`` (the first three vaults, given) or ``viewer``'s vaults."""
    return await start_search(
        session,
        index,
        DEFAULT_ALIAS,
        viewer=viewer,
        scopes=scopes,
        filters=AssetFilter(),
        tuning=tuning,
        plan_once=plan_once,
    )


def _vector_scans() -> TextClause:
    """How many scans of the vector table and its indexes this transaction made."""
    return text(
        "SELECT pg_stat_get_xact_numscans('memory_assets_v1'::regclass) + "
        "(SELECT sum(pg_stat_get_xact_numscans(indexrelid)) FROM pg_index "
        "WHERE indrelid = 'memory_assets_v1'::regclass)"
    )


async def _counts_of_starts(
    database: Database, viewer: str | None, tuning: SearchTuning, starts: int
) -> list[tuple[int, str]]:
    """For each of ``starts`` searches' starts: the vector table's scans, and the strategy."""
    seen: list[tuple[int, str]] = []
    for _ in range(starts):
        async with database.unit_of_work() as uow:
            index = await VectorIndex.open(session_of(uow), "memory_assets_v1")
            before = (await session_of(uow).execute(_vector_scans())).scalar_one()
            start = await _start(session_of(uow), index, tuning, viewer=viewer)
            after = (await session_of(uow).execute(_vector_scans())).scalar_one()
            seen.append((after - before, start.strategy))
    return seen


async def _rank(
    session: Any,
    index: VectorIndex,
    start: Any,
    query: list[float],
    tuning: SearchTuning,
    *,
    filters: AssetFilter | None = None,
) -> Any:
    """The ranking of an image-like query over the first three vaults, limit 10."""
    return await rank_and_meter(
        session,
        index,
        start,
        SCOPES[:3],
        vector=query,
        model=MODEL,
        filters=filters or AssetFilter(),
        vector_filters=AssetFilter(),
        words=None,
        overfetch=10,
        text_hits=10,
        evidence_floor=-1.0,
        min_score=None,
        limit=10,
        fusion=FusionWeights(20, 3, 1.0),
        tuning=tuning,
        metering=_metering(),
    )


def _metering() -> Metering:
    return Metering(
        identity=OWNERS[0],
        model=MODEL,
        total_tokens=0,
        prompt_tokens=0,
        image_tokens=0,
        request_id=None,
        detail={"mode": "image"},
    )


@pytest.mark.parametrize(
    ("scan_max_rows", "strategy", "walks"), [(50, "ann", 1), (8000, "scan", 0)]
)
async def test_the_counted_strategy_runs_inside_the_ranking_statement(
    database: Database, scan_max_rows: int, strategy: str, walks: int
) -> None:
    query = await _library(database)
    tuning = SearchTuning(scan_max_rows=scan_max_rows)
    graph_scans = text("SELECT pg_stat_get_xact_numscans('memory_assets_v1_hnsw'::regclass)")
    async with database.unit_of_work() as uow:
        index = await VectorIndex.open(session_of(uow), "memory_assets_v1")
        start = await _start(session_of(uow), index, tuning)
        assert start.strategy == strategy
        # The graph walk is planned without sorts (the filter estimate would pick a sort).
        assert await session_of(uow).scalar(text("SHOW enable_sort")) == (
            "off" if strategy == "ann" else "on"
        )
        ranked = await _rank(session_of(uow), index, start, query, tuning)
        assert await session_of(uow).scalar(graph_scans) == walks
        exact = await index.search(query, SCOPES[:3], model=MODEL, limit=10, strategy="exact")
    assert [h.distance for h in ranked.hits] == sorted(h.distance for h in ranked.hits)
    assert len({h.vector_id for h in ranked.hits} & {h.vector_id for h in exact}) >= 8
    assert {h.asset_id[:6] for h in ranked.hits} <= {"ast_0x", "ast_1x", "ast_2x"}
    async with database.unit_of_work() as uow:
        written = await session_of(uow).scalar(
            text("SELECT detail FROM mem_provenance WHERE operation = 'asset_search'")
        )
    # No asset rows exist here, so none is reloaded: the count the statement wrote.
    assert written == {"mode": "image", "results": 0}


async def _rank_three_times(
    database: Database, query: list[float], tuning: SearchTuning, *, plan_once: bool
) -> tuple[list[list[str]], set[str], tuple[int, int]]:
    """Three searches in one transaction (one connection): their answers, the plan cache
    modes they ran under, and the ranking statement's generic and custom plans so far."""
    answers: list[list[str]] = []
    modes: set[str] = set()
    async with database.unit_of_work() as uow:
        session = session_of(uow)
        index = await VectorIndex.open(session, "memory_assets_v1")
        for _ in range(3):
            start = await _start(session, index, tuning, plan_once=plan_once)
            modes.add(str(await session.scalar(text("SHOW plan_cache_mode"))))
            ranked = await _rank(session, index, start, query, tuning)
            answers.append([hit.vector_id for hit in ranked.hits])
        # The prepared ranking statement of this connection (the one writing usage entries).
        plans = (
            await session.execute(
                text(
                    "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                    "WHERE statement LIKE '%INSERT INTO mem_usage_ledger%' "
                    "AND statement NOT LIKE '%pg_prepared_statements%'"
                )
            )
        ).one()
    return answers, modes, (int(plans[0]), int(plans[1]))


@pytest.mark.parametrize(
    ("scan_max_rows", "plan_once", "generic"),
    [(50, True, True), (50, False, False), (8000, True, False)],
)
async def test_an_unfiltered_graph_walk_is_planned_once_per_connection(
    database: Database, scan_max_rows: int, plan_once: bool, generic: bool
) -> None:
    """Asked for (``planned_once``) and on the graph, the ranking statement runs a generic
    plan; the bits scan, or a search not asking, keeps a plan made for its values. The
    answers are the same either way."""
    query = await _library(database)
    tuning = SearchTuning(scan_max_rows=scan_max_rows)
    answers, modes, plans = await _rank_three_times(database, query, tuning, plan_once=plan_once)
    assert modes == {"force_generic_plan" if generic else "force_custom_plan"}
    assert plans == ((3, 0) if generic else (0, 3))
    custom, _, _ = await _rank_three_times(database, query, tuning, plan_once=False)
    assert answers == custom and len(answers[0]) == 10


async def test_a_ranking_statement_with_filters_refuses_a_generic_plan(database: Database) -> None:
    """``planned_once`` and the statement kept for a shape disagreeing would hand the first
    search's filter values to the plan of every later one: refused before it runs."""
    query = await _library(database)
    tuning = SearchTuning(scan_max_rows=50)
    async with database.unit_of_work() as uow:
        session = session_of(uow)
        index = await VectorIndex.open(session, "memory_assets_v1")
        start = await _start(session, index, tuning, plan_once=True)
        assert start.plan_once
        with pytest.raises(MemoryDbError, match="generic plan"):
            await _rank(session, index, start, query, tuning, filters=AssetFilter(tags=("red",)))


async def test_a_moved_alias_is_noticed_before_anything_is_ranked(database: Database) -> None:
    await _library(database)
    async with database.unit_of_work() as uow:
        index = await VectorIndex.open(session_of(uow), "memory_assets_v1")
        moved = VectorIndex(session_of(uow), "memory_assets_v9", 1024, "halfvec")
        with pytest.raises(AliasMoved):  # its table does not exist (dropped after a switch)
            await start_search(
                session_of(uow),
                moved,
                DEFAULT_ALIAS,
                viewer=OWNERS[0],
                scopes=[],
                filters=AssetFilter(),
                tuning=SearchTuning(),
            )
    async with database.unit_of_work() as uow:
        await create_index(session_of(uow), "memory_assets_v2", dimensions=1024)
        other = await VectorIndex.open(session_of(uow), "memory_assets_v2")
        with pytest.raises(AliasMoved):  # the alias points at v1
            await start_search(
                session_of(uow),
                other,
                DEFAULT_ALIAS,
                viewer=OWNERS[0],
                scopes=[],
                filters=AssetFilter(),
                tuning=SearchTuning(),
            )
        start = await start_search(
            session_of(uow),
            index.bound(session_of(uow)),
            DEFAULT_ALIAS,
            viewer=OWNERS[0],
            scopes=[],
            filters=AssetFilter(),
            tuning=SearchTuning(),
        )
    assert [v.physical_vault for v in start.vaults or []] == [SCOPES[0].physical_vault]


async def test_the_ranking_start_sizes_the_graph_walk_to_the_table(database: Database) -> None:
    """The server's search (not only ``VectorIndex.search``) walks the graph as broadly as the
    table is large: ``start_search`` sets ``hnsw.ef_search`` from the row estimate and the
    graph's ``m``."""
    await _library(database)

    async def breadth() -> str:
        async with database.unit_of_work() as uow:
            index = await VectorIndex.open(session_of(uow), "memory_assets_v1")
            await _start(session_of(uow), index, SearchTuning())
            return str(await session_of(uow).scalar(text("SHOW hnsw.ef_search")))

    # The default graph keeps 32 neighbours per node: 100 up to 100,000 vectors.
    assert await breadth() == "100"
    async with database.engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        # The planner's estimate of a library this test cannot afford to write.
        await conn.execute(
            text("UPDATE pg_class SET reltuples = 300000 WHERE oid = 'memory_assets_v1'::regclass")
        )
    assert await breadth() == "250"


@pytest.mark.parametrize("viewer", [None, OWNERS[0]])
async def test_the_start_counts_the_scope_once(database: Database, viewer: str | None) -> None:
    """The count chooses the strategy and whether sorts are planned: one scan serves both.

    Read twice from a subquery the planner pulled up, it was computed twice: about 1.2 ms of
    PostgreSQL per search at 100,000 assets (EXPLAIN ANALYZE).
    """
    await _library(database)
    tuning = SearchTuning(scan_max_rows=50)
    assert await _counts_of_starts(database, viewer, tuning, 1) == [(1, "ann")]


async def test_the_start_reads_the_graphs_neighbours_once(database: Database) -> None:
    """The walk's breadth depends on the graph's m: read once per search, not once per use.

    The planner pulled the subquery that reads it up into each of its four uses: about 80
    microseconds of PostgreSQL per search.
    """
    await _library(database)
    reads = text("SELECT pg_stat_get_xact_numscans('pg_index_indrelid_index'::regclass)")
    async with database.unit_of_work() as uow:
        index = await VectorIndex.open(session_of(uow), "memory_assets_v1")
        # The first start of a connection also reads it to plan (the server's connections are
        # long-lived): counted from the second.
        await _start(session_of(uow), index, SearchTuning(scan_max_rows=50))
        before = await session_of(uow).scalar(reads)
        await _start(session_of(uow), index, SearchTuning(scan_max_rows=50))
        assert await session_of(uow).scalar(reads) - before == 1


async def test_the_start_is_built_once_for_its_text_and_run_with_each_searchs_values(
    database: Database,
) -> None:
    """A start without typed filter values keeps its statement; each run sends its own values.

    Before, a new text clause was made, parsed and walked for its cache key on every search
    (about 0.1 ms of the server's CPU).
    """
    await _library(database)
    run: list[object] = []

    def seen(state: Any) -> None:
        run.append(state.statement)

    tuning = SearchTuning(scan_max_rows=50)
    empty = VaultScope("nobody@example.com", "nobody@example.com/Library")
    async with database.unit_of_work() as uow:
        session = session_of(uow)
        index = await VectorIndex.open(session, "memory_assets_v1")
        event.listen(session.sync_session, "do_orm_execute", seen)
        starts = [
            await _start(session, index, tuning, scopes=(scope,))
            for scope in (SCOPES[0], empty, SCOPES[0])
        ]
        event.remove(session.sync_session, "do_orm_execute", seen)
    # 60 vectors in the first vault: above 50, the graph; none in the other, the scan.
    assert [start.strategy for start in starts] == ["ann", "scan", "ann"]
    assert len(run) == 3 and run[0] is run[1] is run[2]


@pytest.mark.parametrize("viewer", [None, OWNERS[0]])
async def test_a_scope_counted_large_is_not_counted_again_for_a_while(
    database: Database, viewer: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The count of a large scope (about 0.8 ms at 100,000 assets) is remembered, then lapses."""
    await _library(database)
    large = SearchTuning(scan_max_rows=50)  # 60 entries per vault
    assert await _counts_of_starts(database, viewer, large, 3) == [
        (1, "ann"),
        (0, "ann"),
        (0, "ann"),
    ]
    monkeypatch.setattr(ranking, "LARGE_SCOPE_SECONDS", 0.0)
    async with database.unit_of_work() as uow:
        ranking.large_scopes(session_of(uow)).forget()
    # Remembered for no time: every start counts.
    assert await _counts_of_starts(database, viewer, large, 2) == [(1, "ann"), (1, "ann")]


async def test_a_scope_counted_small_is_counted_every_time(database: Database) -> None:
    await _library(database)
    small = SearchTuning(scan_max_rows=1000)
    assert await _counts_of_starts(database, OWNERS[0], small, 2) == [(1, "scan"), (1, "scan")]


async def test_other_vaults_are_counted_again(database: Database) -> None:
    """The caller's vaults are resolved by the statement: new ones are counted, not assumed."""
    await _library(database)
    large = SearchTuning(scan_max_rows=50)
    assert await _counts_of_starts(database, OWNERS[0], large, 2) == [(1, "ann"), (0, "ann")]
    async with database.unit_of_work() as uow:
        await uow.vaults.create(OWNERS[0], "Work")
    assert await _counts_of_starts(database, OWNERS[0], large, 2) == [(1, "ann"), (0, "ann")]
    # Another caller's starts are their own.
    assert await _counts_of_starts(database, None, large, 1) == [(1, "ann")]
