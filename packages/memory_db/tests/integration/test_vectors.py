"""The versioned vector index: registry and aliases, scoped writes, filtered ANN, isolation."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from sqlalchemy import text
from structlog.testing import capture_logs

from memory_db import Conflict, Database, InvalidInput, NotFound, VaultScope
from memory_db.database import create_engine
from memory_db.ids import new_id
from memory_db.migrate import downgrade, upgrade
from memory_db.repositories import FILTER_FIELDS, AssetFilter
from memory_db.storage import build_object_key
from memory_db.testing import PostgresForTests
from memory_db.testing.vector_rows import vector_row
from memory_db.unit_of_work import session_of
from memory_db.vectors import (
    SearchTuning,
    VectorIndex,
    VectorRecord,
    create_index,
    drop_index,
    ensure_default_index,
    resolve_alias,
    switch_alias,
    vector_codes,
    vector_id,
)
from memory_db.vectors.ddl import hnsw_index_sql

A = VaultScope("alice@example.com", "alice@example.com/Library")
B = VaultScope("bob@example.com", "bob@example.com/Library")
NOW = datetime.now(UTC)
MODEL = "local-hash-v1"


def _unit(rng: np.random.Generator, n: int, dims: int = 1024) -> np.ndarray[Any, Any]:
    vectors = rng.standard_normal((n, dims))
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _record(
    asset: str, vector: Any, representation: str = "visual", project: str | None = None
) -> VectorRecord:
    return vector_row(
        asset,
        vector,
        representation=representation,
        project_id=project,
        model=MODEL,
        created_at=NOW,
    )


async def _index(database: Database, name: str = "memory_assets_v1") -> None:
    async with database.unit_of_work() as uow:
        await ensure_default_index(session_of(uow), name, dimensions=1024)


def test_vector_id_is_the_spec_formula() -> None:
    expected = hashlib.sha256(b"asset-v1::ast_x::visual::local-hash-v1::1024").hexdigest()
    assert vector_id("ast_x", "visual", "local-hash-v1", 1024) == expected


async def test_registry_aliases_and_names(database: Database) -> None:
    await _index(database)
    async with database.unit_of_work() as uow:
        assert await resolve_alias(session_of(uow)) == "memory_assets_v1"
        assert (
            await ensure_default_index(session_of(uow), "other", dimensions=1024)
            == "memory_assets_v1"
        )
        with pytest.raises(Conflict):
            await create_index(session_of(uow), "memory_assets_v1", dimensions=1024)
        # SQL keywords, and names too long for their indexes' names (PostgreSQL cuts those at
        # 63 bytes, onto the table's own name), are refused before any SQL runs.
        bad_names = ("Memory", "1abc", "mem_assets", "pg_x", "a-b", "x" * 64, "drop table x")
        for bad in (*bad_names, "order", "user", "select", "x" * 50):
            with pytest.raises(InvalidInput):
                await create_index(session_of(uow), bad, dimensions=1024)
        await create_index(session_of(uow), "taken_asset", dimensions=8, element="vector")
        with pytest.raises(Conflict, match="taken_asset"):  # would be the new one's asset index
            await create_index(session_of(uow), "taken", dimensions=8, element="vector")
        with pytest.raises(InvalidInput):
            await create_index(session_of(uow), "too_big", dimensions=2001, element="vector")
        await create_index(session_of(uow), "memory_assets_v2", dimensions=1024, element="vector")
        with pytest.raises(Conflict):  # an alias still points at v1
            await drop_index(session_of(uow), "memory_assets_v1")
        await switch_alias(session_of(uow), "memory_assets", "memory_assets_v2")
        assert await resolve_alias(session_of(uow)) == "memory_assets_v2"
        await drop_index(session_of(uow), "memory_assets_v1")
        with pytest.raises(NotFound):
            await VectorIndex.open(session_of(uow), "memory_assets_v1")
        with pytest.raises(NotFound):
            await switch_alias(session_of(uow), "memory_assets", "never_made")
        # Alias and index names never overlap: each command taking a name means one thing.
        with pytest.raises(Conflict, match="name of an alias"):
            await create_index(session_of(uow), "memory_assets", dimensions=8, element="vector")
        with pytest.raises(Conflict, match="name of an index"):
            await switch_alias(session_of(uow), "memory_assets_v2", "memory_assets_v2")


async def test_alias_switch_is_atomic(database: Database) -> None:
    await _index(database)
    async with database.unit_of_work() as uow:
        await create_index(session_of(uow), "memory_assets_v2", dimensions=1024)
    with pytest.raises(RuntimeError):
        async with database.unit_of_work() as uow:
            await switch_alias(session_of(uow), "memory_assets", "memory_assets_v2")
            raise RuntimeError("verification failed after the switch")
    async with database.unit_of_work() as uow:
        assert await resolve_alias(session_of(uow)) == "memory_assets_v1"


async def test_upsert_is_idempotent_and_scoped(database: Database) -> None:
    await _index(database)
    rng = np.random.default_rng(1)
    v1, v2 = _unit(rng, 2)
    async with database.unit_of_work() as uow:
        index = await VectorIndex.open(session_of(uow), "memory_assets_v1")
        ids = await index.upsert(A, [_record("ast_one", v1), _record("ast_one", v1, "fused")])
        again = await index.upsert(A, [_record("ast_one", v2)])
        assert again[0] == ids[0] == vector_id("ast_one", "visual", MODEL, 1024)
        assert await index.count_asset(A, "ast_one") == 2
        assert await index.count_asset(B, "ast_one") == 0  # not visible from another scope
        # the same vector id cannot be re-homed into another owner's vault
        await index.upsert(B, [_record("ast_one", v1)])
        owner = await session_of(uow).scalar(
            text("SELECT owner_identity FROM memory_assets_v1 WHERE id = :i"), {"i": ids[0]}
        )
        assert owner == A.owner_identity
        (hit,) = await index.search(list(v2), [A], model=MODEL, limit=1)
        assert hit.vector_id == ids[0] and hit.score == pytest.approx(1.0, abs=1e-3)
        assert await index.delete_asset(B, "ast_one") == 0
        assert await index.move_asset(A, "ast_one", "apr_p", None) == 2
        assert await index.delete_asset(A, "ast_one") == 2
        assert await index.count_asset(A, "ast_one") == 0


@pytest.mark.parametrize(
    ("embedding", "message"),
    [
        ([0.0] * 1023, "1023 dimensions"),
        ([0.0] * 1025, "1025 dimensions"),
        ([float("nan")] + [0.0] * 1023, "non-finite"),
        ([0.0] * 1023 + [float("-inf")], "non-finite"),
        # Half precision stops at 65,504: larger values would be stored as infinity.
        ([70000.0] + [0.0] * 1023, "beyond the range of halfvec"),
    ],
)
async def test_malformed_vectors_are_refused(
    database: Database, embedding: list[float], message: str
) -> None:
    await _index(database)
    async with database.unit_of_work() as uow:
        index = await VectorIndex.open(session_of(uow), "memory_assets_v1")
        with pytest.raises(InvalidInput, match=message):
            await index.upsert(A, [_record("ast_bad", embedding)])
        with pytest.raises(InvalidInput, match=message):
            await index.search(embedding, [A], model=MODEL)
        with pytest.raises(InvalidInput, match=message):
            await index.distances(embedding, [A], ["ast_bad"], model=MODEL)
        assert await index.count_asset(A, "ast_bad") == 0


async def test_a_query_for_vault_a_never_returns_vault_b(database: Database) -> None:
    await _index(database)
    rng = np.random.default_rng(2)
    vectors = _unit(rng, 40)
    async with database.unit_of_work() as uow:
        index = await VectorIndex.open(session_of(uow), "memory_assets_v1")
        await index.upsert(A, [_record(f"ast_a{i}", v) for i, v in enumerate(vectors[:20])])
        await index.upsert(B, [_record(f"ast_b{i}", v) for i, v in enumerate(vectors[20:])])
        for query in vectors[20:]:  # each query is *identical* to one of bob's vectors
            for strategy in ("ann", "scan", "exact", "auto"):
                hits = await index.search(
                    list(query), [A], model=MODEL, limit=30, strategy=strategy
                )
                assert hits and all(h.asset_id.startswith("ast_a") for h in hits)
        assert await index.search(list(vectors[0]), [], model=MODEL) == []
        shared = await index.search(list(vectors[25]), [A, B], model=MODEL, limit=1)
        assert shared[0].asset_id == "ast_b5"


async def test_graph_nearest_ranks_as_the_graph_does_ties_included(database: Database) -> None:
    """The reference of reindex's recall: the graph's own distance, every tie of the tenth.

    Twelve copies of one vector tie for the first place: all twelve are right answers for a
    limit of ten. The graph search of a small vault (it meets every node) lists only ids this
    reference holds; another vault and another model are never in it.
    """
    await _index(database)
    rng = np.random.default_rng(5)
    vectors = _unit(rng, 40)
    copies = [vectors[0]] * 12
    async with database.unit_of_work() as uow:
        index = await VectorIndex.open(session_of(uow), "memory_assets_v1")
        await index.upsert(A, [_record(f"ast_c{i}", v) for i, v in enumerate(copies)])
        await index.upsert(A, [_record(f"ast_a{i}", v) for i, v in enumerate(vectors[1:30])])
        await index.upsert(B, [_record(f"ast_b{i}", v) for i, v in enumerate(vectors[30:])])
    async with database.unit_of_work() as uow:
        index = await VectorIndex.open(session_of(uow), "memory_assets_v1")
        tied = await index.graph_nearest(list(vectors[0]), A, model=MODEL, limit=10)
        assert tied == {vector_id(f"ast_c{i}", "visual", MODEL, 1024) for i in range(12)}
        for query in vectors[1:40]:
            nearest = await index.graph_nearest(list(query), A, model=MODEL, limit=10)
            assert len(nearest) >= 10  # more when the twelve copies tie at the tenth place
            walked = await index.search(list(query), [A], model=MODEL, limit=10, strategy="ann")
            assert {hit.vector_id for hit in walked} <= nearest
        everything = await index.graph_nearest(list(vectors[35]), B, model=MODEL, limit=20)
        assert everything == {vector_id(f"ast_b{i}", "visual", MODEL, 1024) for i in range(10)}
        assert await index.graph_nearest(list(vectors[35]), B, model="other", limit=10) == set()
        with pytest.raises(InvalidInput):
            await index.graph_nearest(list(vectors[0]), A, model=MODEL, limit=0)


async def test_selective_filter_still_fills_an_ordered_result(database: Database) -> None:
    await _index(database)
    rng = np.random.default_rng(3)
    crowd = _unit(rng, 1500)
    few = _unit(rng, 15)
    async with database.unit_of_work() as uow:
        index = await VectorIndex.open(session_of(uow), "memory_assets_v1")
        await index.upsert(A, [_record(f"ast_c{i}", v) for i, v in enumerate(crowd)])
        await index.upsert(
            B, [_record(f"ast_f{i}", v, project="apr_small") for i, v in enumerate(few)]
        )
        await session_of(uow).execute(text("ANALYZE memory_assets_v1"))
    query = list(_unit(rng, 1)[0])
    expected = [f"ast_f{i}" for i in np.argsort(-(few @ np.array(query)))[:10]]
    async with database.unit_of_work() as uow:
        index = await VectorIndex.open(session_of(uow), "memory_assets_v1")
        approximate = await index.search(query, [B], model=MODEL, limit=10, strategy="ann")
        exact = await index.search(
            query,
            [B],
            model=MODEL,
            limit=10,
            strategy="exact",
            filters=AssetFilter(project_id="apr_small"),
        )
        auto = await index.search(query, [B], model=MODEL, limit=10)  # 15 rows: exact
        seqscan = await session_of(uow).scalar(text("SELECT current_setting('enable_seqscan')"))
        # Small tables make a sequential scan cheaper; forbid it to prove the index is usable.
        await session_of(uow).execute(text("SET LOCAL enable_seqscan = off"))
        plan = "\n".join(
            row[0]
            for row in await session_of(uow).execute(
                text(
                    "EXPLAIN SELECT id FROM memory_assets_v1 ORDER BY embedding <=> "
                    "CAST(:q AS halfvec(1024)) LIMIT 10"
                ),
                {"q": query},
            )
        )
    assert "memory_assets_v1_hnsw" in plan  # the unfiltered query uses the HNSW index
    assert [h.asset_id for h in exact] == expected == [h.asset_id for h in auto]
    assert seqscan == "on"  # the exact path does not leak its planner setting
    assert len(approximate) == 10  # iterative scan: a 1 % filter still fills the page
    assert [h.distance for h in approximate] == sorted(h.distance for h in approximate)
    assert len({h.asset_id for h in approximate} & set(expected)) >= 9


async def test_downgrade_drops_registered_index_tables(postgres: PostgresForTests) -> None:
    name = await postgres.create_empty()
    engine = create_engine(postgres.url(name), pool_size=1)
    database = Database(engine)
    try:
        await upgrade(engine)
        await _index(database)
        await downgrade(engine, "base")
        async with engine.connect() as conn:
            left = await conn.scalar(text("SELECT to_regclass('memory_assets_v1')"))
        assert left is None
        await upgrade(engine)
    finally:
        await database.close()
        await postgres.drop(name)


async def test_scan_reads_codes_index_only_and_matches_the_exact_result(
    database: Database,
) -> None:
    await _index(database)
    rng = np.random.default_rng(5)
    centers = _unit(rng, 12)
    crowd = centers[rng.integers(0, 12, 600)] + rng.standard_normal((600, 1024)) * 0.02
    crowd /= np.linalg.norm(crowd, axis=1, keepdims=True)
    async with database.unit_of_work() as uow:
        index = await VectorIndex.open(session_of(uow), "memory_assets_v1")
        await index.upsert(A, [_record(f"ast_a{i}", v) for i, v in enumerate(crowd[:400])])
        await index.upsert(B, [_record(f"ast_b{i}", v) for i, v in enumerate(crowd[400:])])
        codes = await session_of(uow).scalar(
            text("SELECT embedding_bits::text FROM memory_assets_v1 WHERE asset_id = 'ast_a0'")
        )
    # Steady state (autovacuum's visibility map), so index-only scans are what they cost.
    async with database.engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(text("VACUUM ANALYZE memory_assets_v1"))
    # One bit per dimension: the signs of the vector's fixed projection, written with it.
    assert codes == vector_codes([crowd[0]], 1024)[0]
    whole = SearchTuning(rescore_min=400)  # a pool as large as the vault: re-scores every row
    for query in _unit(rng, 5) * 0.2 + centers[:5]:
        q = [float(x) for x in query / np.linalg.norm(query)]
        async with database.unit_of_work() as uow:
            index = await VectorIndex.open(session_of(uow), "memory_assets_v1")
            exact = await index.search(q, [A], model=MODEL, limit=10, strategy="exact")
            scan = await index.search(q, [A], model=MODEL, limit=10, strategy="scan")
            auto = await index.search(q, [A], model=MODEL, limit=10)  # 400 rows: the scan
            full = await index.search(q, [A], model=MODEL, limit=10, strategy="scan", tuning=whole)
        assert [h.vector_id for h in full] == [h.vector_id for h in exact]
        assert [h.vector_id for h in auto] == [h.vector_id for h in scan]
        truth = {h.vector_id: h.distance for h in exact}
        assert len(truth.keys() & {h.vector_id for h in scan}) >= 9  # recall@10 of the codes
        assert [h.distance for h in scan] == sorted(h.distance for h in scan)
        for hit in scan:  # re-scored with the full vector: the exact distance
            if hit.vector_id in truth:
                assert hit.distance == pytest.approx(truth[hit.vector_id], abs=1e-6)
        assert all(h.asset_id.startswith("ast_a") for h in scan)
    async with database.unit_of_work() as uow:
        await session_of(uow).execute(text("SET LOCAL enable_seqscan = off"))
        await session_of(uow).execute(text("SET LOCAL enable_bitmapscan = off"))
        plan = "\n".join(
            row[0]
            for row in await session_of(uow).execute(
                text(
                    "EXPLAIN SELECT id FROM memory_assets_v1 WHERE vault = :v AND "
                    "owner_identity = :o AND model = :m AND mime_type = 'image/png' "
                    "ORDER BY embedding_bits <~> CAST(CAST(:b AS text) AS bit(1024)) LIMIT 40"
                ),
                {"v": A.physical_vault, "o": A.owner_identity, "m": MODEL, "b": codes},
            )
        )
    # The codes and the filter columns come from the scope B-tree alone.
    assert "Index Only Scan using memory_assets_v1_scope on" in plan


async def test_ann_walks_the_graph_whatever_the_filter_estimate(database: Database) -> None:
    """A filter over several vaults (one owner each) is estimated at a fraction of its rows:
    the planner multiplies the vault and owner selectivities. It used to answer "ann" by
    scoring and sorting every matching row from the scope B-tree instead of walking the
    graph (200 ms where the graph takes 10 at 100,000 vectors); now the graph is walked, and
    the caller's transaction gets its sorts back afterwards."""
    await _index(database)
    rng = np.random.default_rng(5)
    scopes = [VaultScope(f"o{v}@example.com", f"o{v}@example.com/Library") for v in range(10)]
    async with database.unit_of_work() as uow:
        index = await VectorIndex.open(session_of(uow), "memory_assets_v1")
        for v, scope in enumerate(scopes):
            rows = _unit(rng, 60)
            await index.upsert(scope, [_record(f"ast_{v}x{i}", x) for i, x in enumerate(rows)])
    async with database.engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(text("VACUUM ANALYZE memory_assets_v1"))
    # This transaction's scans of the graph, as PostgreSQL counts them.
    graph_scans = text("SELECT pg_stat_get_xact_numscans('memory_assets_v1_hnsw'::regclass)")
    query = [float(x) for x in _unit(rng, 1)[0]]
    async with database.unit_of_work() as uow:
        index = await VectorIndex.open(session_of(uow), "memory_assets_v1")
        walked = await index.search(query, scopes[:3], model=MODEL, limit=10, strategy="ann")
        assert await session_of(uow).scalar(graph_scans) == 1
        assert await session_of(uow).scalar(text("SHOW enable_sort")) == "on"
        exact = await index.search(query, scopes[:3], model=MODEL, limit=10, strategy="exact")
        assert await session_of(uow).scalar(graph_scans) == 1
    assert len(walked) == 10
    assert len({h.vector_id for h in walked} & {h.vector_id for h in exact}) >= 8
    assert {h.asset_id[:6] for h in walked} <= {"ast_0x", "ast_1x", "ast_2x"}


async def test_the_graph_walk_is_as_broad_as_the_table_is_large(database: Database) -> None:
    """``hnsw.ef_search`` follows the table's size and its graph: at 300,000 clustered vectors
    recall@10 was 0.87-0.92 with 250 and 0.957 with 1,000 on a graph of 16 neighbours per node,
    0.961 with 200 on one of 32 (benchmarks/scale.py, docs/scaling.md). The search reads
    PostgreSQL's row estimate and the graph's ``m`` in the statement that sets its settings; an
    explicit breadth still wins."""
    async with database.unit_of_work() as uow:
        await ensure_default_index(session_of(uow), "memory_assets_v1", dimensions=1024, m=16)
    rng = np.random.default_rng(8)
    scopes = [VaultScope(f"o{v}@example.com", f"o{v}@example.com/Library") for v in range(3)]
    async with database.unit_of_work() as uow:
        index = await VectorIndex.open(session_of(uow), "memory_assets_v1")
        for v, scope in enumerate(scopes):
            rows = _unit(rng, 20)
            await index.upsert(scope, [_record(f"ast_{v}y{i}", x) for i, x in enumerate(rows)])
    query = [float(x) for x in _unit(rng, 1)[0]]

    async def breadth(tuning: SearchTuning | None = None) -> str:
        async with database.unit_of_work() as uow:
            index = await VectorIndex.open(session_of(uow), "memory_assets_v1")
            hits = await index.search(
                query, scopes, model=MODEL, limit=10, strategy="ann", tuning=tuning
            )
            assert len(hits) == 10
            # SET LOCAL: what the search's statements ran with, until this transaction ends.
            return str(await session_of(uow).scalar(text("SHOW hnsw.ef_search")))

    async def estimate(rows: int) -> None:
        # The planner's estimate of a library this test cannot afford to write.
        async with database.engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.execute(
                text("UPDATE pg_class SET reltuples = :n WHERE oid = 'memory_assets_v1'::regclass"),
                {"n": rows},
            )

    # A graph of 16 neighbours per node (ASSET_VECTOR_GRAPH_M=16, and graphs built before 32
    # became the default).
    assert await breadth() == "250"
    await estimate(100_000)
    assert await breadth() == "250"
    await estimate(200_000)
    assert await breadth() == "625"
    await estimate(300_000)
    assert await breadth() == "1000"
    await estimate(5_000_000)
    assert await breadth() == "1000"  # pgvector's maximum
    assert await breadth(SearchTuning(ef_search=40)) == "40"
    # A graph of 32 (the default) reaches the same recall with a narrower walk.
    async with database.engine.begin() as conn:
        await conn.execute(text("DROP INDEX memory_assets_v1_hnsw"))
        await conn.execute(text(hnsw_index_sql("memory_assets_v1", "halfvec", m=32)))
    await estimate(100_000)
    assert await breadth() == "100"
    await estimate(200_000)
    assert await breadth() == "175"
    await estimate(300_000)
    assert await breadth() == "250"


async def test_a_new_index_gets_the_configured_graph(database: Database) -> None:
    async def graph_m(name: str) -> str:
        async with database.unit_of_work() as uow:
            return str(
                await session_of(uow).scalar(
                    text(
                        "SELECT o.option_value FROM pg_class i, pg_options_to_table(i.reloptions) o "
                        "WHERE i.oid = CAST(:n AS regclass) AND o.option_name = 'm'"
                    ),
                    {"n": f"{name}_hnsw"},
                )
            )

    async with database.unit_of_work() as uow:
        await ensure_default_index(session_of(uow), "memory_assets_v1", dimensions=1024, m=16)
        await create_index(session_of(uow), "memory_assets_v2", dimensions=1024)
    assert await graph_m("memory_assets_v1") == "16"
    assert await graph_m("memory_assets_v2") == "32"
    async with database.unit_of_work() as uow:
        with pytest.raises(InvalidInput, match="not 24"):
            await create_index(session_of(uow), "memory_assets_v3", dimensions=1024, m=24)


async def test_migration_adds_codes_to_existing_index_tables(postgres: PostgresForTests) -> None:
    name = await postgres.create_empty()
    engine = create_engine(postgres.url(name), pool_size=1)
    database = Database(engine)
    vector = _unit(np.random.default_rng(9), 1)[0]
    try:
        await upgrade(engine)
        await _index(database)
        async with database.unit_of_work() as uow:
            index = await VectorIndex.open(session_of(uow), "memory_assets_v1")
            await index.upsert(A, [_record("ast_old", vector)])
        await downgrade(engine, "0004")  # the table as revision 0004 left it: no codes
        async with engine.connect() as conn:
            columns = set(
                (
                    await conn.execute(
                        text(
                            "SELECT column_name FROM information_schema.columns "
                            "WHERE table_name = 'memory_assets_v1'"
                        )
                    )
                ).scalars()
            )
        assert "embedding_bits" not in columns and "embedding" in columns
        await upgrade(engine)
        async with database.unit_of_work() as uow:
            codes = await session_of(uow).scalar(
                text("SELECT embedding_bits::text FROM memory_assets_v1 WHERE asset_id = 'ast_old'")
            )
            definition = await session_of(uow).scalar(
                text("SELECT indexdef FROM pg_indexes WHERE indexname = 'memory_assets_v1_scope'")
            )
            keys = await session_of(uow).scalar(
                text("SELECT to_regclass('memory_assets_v1_scope_keys')")
            )
            index = await VectorIndex.open(session_of(uow), "memory_assets_v1")
            hits = await index.search(list(vector), [A], model=MODEL, limit=1, strategy="scan")
        # Revision 0006 wrote the code of the stored (half precision) vector.
        stored = vector.astype(np.float32).astype(np.float16).astype(np.float32)
        assert codes == vector_codes([stored], 1024)[0]
        assert "INCLUDE" in str(definition) and "embedding_bits" in str(definition)
        assert keys is not None
        assert [h.asset_id for h in hits] == ["ast_old"]
    finally:
        await database.close()
        await postgres.drop(name)


async def test_start_up_prepares_the_configured_index(database: Database, tmp_path: Any) -> None:
    from memory_db import MemorySettings
    from memory_db.embedding import EmbedderIdentity, LocalEmbedder, ScriptedEmbedder
    from memory_db.runtime import prepare_vector_index
    from memory_db.vectors import index_identity

    settings = MemorySettings(memory_data_dir=tmp_path)
    assert await prepare_vector_index(database, settings, LocalEmbedder()) == "memory_assets_v1"
    assert await prepare_vector_index(database, settings, LocalEmbedder()) == "memory_assets_v1"
    # The index records the embedder that fills it; a process configured for another one
    # (after a reindex switched models, say) starts, and the index keeps its identity.
    assert await prepare_vector_index(database, settings, ScriptedEmbedder(dims=512)) == (
        "memory_assets_v1"
    )
    async with database.unit_of_work() as uow:
        assert await index_identity(session_of(uow), "memory_assets_v1") == EmbedderIdentity(
            "local", "local-hash-v1", 1024
        )
        assert await uow.vector_indexes.graph_m("memory_assets_v1") == 32
    # A graph narrower than the setting (built with 16, before 32 became the default) is kept
    # and named at start-up, with what rebuilds it.
    narrow = MemorySettings(memory_data_dir=tmp_path, asset_vector_graph_m=16)
    with capture_logs() as logs:
        await prepare_vector_index(database, narrow, LocalEmbedder())
    assert not [e for e in logs if e["event"] == "vector_index_graph_narrower"]
    async with database.engine.begin() as conn:
        await conn.execute(text("DROP INDEX memory_assets_v1_hnsw"))
        await conn.execute(text(hnsw_index_sql("memory_assets_v1", "halfvec", m=16)))
    with capture_logs() as logs:
        assert await prepare_vector_index(database, settings, LocalEmbedder()) == (
            "memory_assets_v1"
        )
    [notice] = [e for e in logs if e["event"] == "vector_index_graph_narrower"]
    assert notice["graph_m"] == 16 and notice["configured_m"] == 32
    assert "memory-server reindex" in notice["advice"]


async def test_migration_rewrites_element_sign_codes_as_projection_codes(
    postgres: PostgresForTests,
) -> None:
    name = await postgres.create_empty()
    engine = create_engine(postgres.url(name), pool_size=1)
    database = Database(engine)
    rng = np.random.default_rng(10)
    vectors = _unit(rng, 5)
    stored = vectors.astype(np.float32).astype(np.float16).astype(np.float32)

    async def column() -> tuple[str, str, dict[str, str]]:
        async with engine.connect() as conn:
            generated, nullable = (
                await conn.execute(
                    text(
                        "SELECT is_generated, is_nullable FROM information_schema.columns "
                        "WHERE table_name = 'memory_assets_v1' AND column_name = 'embedding_bits'"
                    )
                )
            ).one()
            codes = dict(
                (
                    await conn.execute(
                        text("SELECT asset_id, embedding_bits::text FROM memory_assets_v1")
                    )
                ).all()
            )
        return str(generated), str(nullable), codes

    try:
        await upgrade(engine)
        await _index(database)
        async with database.unit_of_work() as uow:
            index = await VectorIndex.open(session_of(uow), "memory_assets_v1")
            await index.upsert(A, [_record(f"ast_{i}", v) for i, v in enumerate(vectors)])
        generated, nullable, codes = await column()
        assert (generated, nullable) == ("NEVER", "NO")
        assert codes == {f"ast_{i}": vector_codes([v], 1024)[0] for i, v in enumerate(vectors)}

        await downgrade(engine, "0005")  # back to the generated element-sign codes
        generated, _nullable, codes = await column()
        assert generated == "ALWAYS"
        assert codes == {
            f"ast_{i}": "".join("1" if x > 0 else "0" for x in v) for i, v in enumerate(stored)
        }

        await upgrade(engine)
        generated, nullable, codes = await column()
        assert (generated, nullable) == ("NEVER", "NO")
        assert codes == {f"ast_{i}": vector_codes([v], 1024)[0] for i, v in enumerate(stored)}
        async with database.unit_of_work() as uow:
            index = await VectorIndex.open(session_of(uow), "memory_assets_v1")
            for i, vector in enumerate(vectors):
                (hit,) = await index.search(list(vector), [A], model=MODEL, limit=1)
                assert hit.asset_id == f"ast_{i}"
            definition = await session_of(uow).scalar(
                text("SELECT indexdef FROM pg_indexes WHERE indexname = 'memory_assets_v1_scope'")
            )
            graph = await session_of(uow).scalar(
                text("SELECT indexdef FROM pg_indexes WHERE indexname = 'memory_assets_v1_hnsw'")
            )
            ann = await index.search(list(vectors[0]), [A], model=MODEL, limit=1, strategy="ann")
        assert "embedding_bits" in str(definition)
        # The graph was dropped for the rewrite and built again.
        assert "USING hnsw (embedding halfvec_cosine_ops)" in str(graph)
        assert [h.asset_id for h in ann] == ["ast_0"]
    finally:
        await database.close()
        await postgres.drop(name)


async def test_every_vector_predicate_passes_the_assets_its_sql_condition_passes(
    database: Database,
) -> None:
    """A filter means the same in the vector index as in the asset tables (every one declared).

    The candidate reload would hide a vector predicate that passes too much; this compares the
    two directly, over every filter field with a vector column, with both exact strategies.
    """
    owner = "filters@example.com"
    scope = VaultScope(owner, f"{owner}/Library")
    await _index(database)
    rng = np.random.default_rng(11)
    async with database.unit_of_work() as uow:
        namespace = (await uow.identities.create(owner, 10**9)).namespace_id
        project = await uow.projects.create(scope, name="P", description=None, created_by=owner)
        folder = await uow.folders.create(scope, project_id=project.id, parent_id=None, name="f")
        placed = [(None, None), (project.id, None), (project.id, folder.id)]
        ids: list[str] = []
        records: list[VectorRecord] = []
        for i, vector in enumerate(_unit(rng, 6)):
            project_id, folder_id = placed[i % 3]
            kind, mime, extension = (
                ("scrape", "image/jpeg", "jpg") if i % 2 else ("upload", "image/png", "png")
            )
            object_id = new_id("aob")
            await uow.objects.create(
                object_id=object_id,
                owner=owner,
                namespace_id=namespace,
                sha256=f"{i:064x}",
                storage_key=build_object_key("test", namespace, object_id, "original", extension),
                preview_storage_key=build_object_key("test", namespace, object_id, "preview"),
                preview_sha256=f"{i:064x}",
                mime_type=mime,
                extension=extension,
                nbytes=1,
                preview_bytes=1,
                width=1,
                height=1,
                etag=None,
                version_id=None,
            )
            asset = await uow.assets.create(
                scope,
                object_id=object_id,
                project_id=project_id,
                folder_id=folder_id,
                title=f"asset {i}",
                description=None,
                alt_text=None,
                source_url=None,
                source_url_hash=None,
                source_kind=kind,
                source_ref={},
                tags=[],
                metadata={},
                created_by=owner,
            )
            created = NOW - timedelta(hours=i)
            await session_of(uow).execute(
                text("UPDATE mem_assets SET created_at = :t WHERE id = :id"),
                {"t": created, "id": asset.id},
            )
            ids.append(asset.id)
            records.append(
                VectorRecord(
                    asset_id=asset.id,
                    object_id=object_id,
                    project_id=project_id,
                    folder_id=folder_id,
                    representation="visual",
                    model=MODEL,
                    mime_type=mime,
                    source_kind=kind,
                    created_at=created,
                    embedding=[float(x) for x in vector],
                )
            )
        index = await VectorIndex.open(session_of(uow), "memory_assets_v1")
        await index.upsert(scope, records)
    split = NOW - timedelta(hours=2, minutes=30)
    samples: dict[str, Any] = {
        "project_id": project.id,
        "folder_ids": (folder.id,),
        "source_kinds": ("scrape",),
        "mime_types": ("image/jpeg",),
        "created_after": split,
        "created_before": split,
        "asset_ids": (ids[0], ids[3]),
    }
    query = [float(x) for x in _unit(rng, 1)[0]]
    async with database.unit_of_work() as uow:
        index = await VectorIndex.open(session_of(uow), "memory_assets_v1")
        for name, (unset, declared) in FILTER_FIELDS.items():
            if declared.vector is None:
                some: Any = True if unset is False else ("x",) if unset == () else "x"
                narrowed = AssetFilter(**{name: some})
                assert narrowed.outside_vectors() and narrowed.for_vectors() == AssetFilter()
                with pytest.raises(InvalidInput, match=f"cannot filter on {name}"):
                    await index.search(query, [scope], model=MODEL, filters=narrowed)
                continue
            if name not in samples:
                pytest.fail(f"give the vector filter {name!r} a sample value in this test")
            narrowed = AssetFilter(**{name: samples[name]})
            rows = set(await uow.assets.matching_ids([scope], narrowed, limit=100))
            assert rows and rows != set(ids), (name, "the sample must filter")
            for strategy in ("exact", "scan"):
                hits = await index.search(
                    query, [scope], model=MODEL, limit=100, filters=narrowed, strategy=strategy
                )
                assert {hit.asset_id for hit in hits} == rows, (name, strategy)


async def _note_index(engine: Any) -> dict[str, Any]:
    """What a note index named ``memory`` holds: its columns, its indexes and its rows."""
    async with engine.connect() as conn:
        columns = (
            await conn.execute(
                text(
                    "SELECT column_name, format_type(atttypid, atttypmod) FROM "
                    "information_schema.columns JOIN pg_attribute ON attrelid = 'memory'::regclass "
                    "AND attname = column_name WHERE table_name = 'memory' ORDER BY column_name"
                )
            )
        ).all()
        indexes = (
            await conn.execute(
                text("SELECT indexdef FROM pg_indexes WHERE tablename = 'memory' ORDER BY 1")
            )
        ).scalars()
        rows = (
            await conn.execute(
                text("SELECT vector_id, embedding::text, metadata FROM memory ORDER BY vector_id")
            )
        ).all()
        return {"columns": columns, "indexes": list(indexes), "rows": rows}


async def test_a_note_index_named_memory_in_the_same_database_is_left_alone(
    postgres: PostgresForTests,
) -> None:
    """The image index lives beside a product's note index ``memory`` and never touches it.

    The note index is made as the notes' vector store makes it (pgvector installed first, a
    ``vector(1024)`` column, rows); then the image memory is migrated in, used, and migrated out
    again. The note table's columns, indexes and rows stay exactly as they were, the image index
    refuses the name ``memory`` (to make, drop or point the alias at), and the pgvector extension
    that the notes still use stays installed.
    """
    name = await postgres.create_empty()
    engine = create_engine(postgres.url(name), pool_size=1)
    database = Database(engine)
    rng = np.random.default_rng(7)
    try:
        async with engine.begin() as conn:
            await conn.execute(text("CREATE EXTENSION vector"))
            await conn.execute(
                text(
                    "CREATE TABLE memory (id serial PRIMARY KEY, vector_id text UNIQUE NOT NULL,"
                    " embedding vector(1024), metadata jsonb)"
                )
            )
            for number, vector in enumerate(_unit(rng, 3)):
                await conn.execute(
                    text("INSERT INTO memory (vector_id, embedding, metadata) VALUES (:i, :e, :m)"),
                    {
                        "i": f"note-{number}",
                        "e": "[" + ",".join(f"{x:.6f}" for x in vector) + "]",
                        "m": f'{{"thread": "t{number}"}}',
                    },
                )
        before = await _note_index(engine)
        await upgrade(engine)
        await _index(database)
        async with database.unit_of_work() as uow:
            index = await VectorIndex.open(session_of(uow), "memory_assets_v1")
            (vector,) = _unit(rng, 1)
            await index.upsert(A, [_record("ast_one", vector)])
            (hit,) = await index.search(list(vector), [A], model=MODEL, limit=5)
            assert hit.asset_id == "ast_one"
        async with database.unit_of_work() as uow:
            with pytest.raises(Conflict):
                await create_index(session_of(uow), "memory", dimensions=1024)
            with pytest.raises(Conflict):  # a configured ASSET_EMBED_INDEX=memory: refused
                await ensure_default_index(session_of(uow), "memory", dimensions=1024, alias="x")
            with pytest.raises(NotFound):
                await drop_index(session_of(uow), "memory")
            with pytest.raises(NotFound):
                await switch_alias(session_of(uow), "memory_assets", "memory")
        assert await _note_index(engine) == before
        await downgrade(engine, "base")
        assert await _note_index(engine) == before
        async with engine.connect() as conn:
            assert await conn.scalar(text("SELECT to_regclass('memory_assets_v1')")) is None
            assert await conn.scalar(text("SELECT extversion FROM pg_extension")) is not None
    finally:
        await database.close()
        await postgres.drop(name)
