"""The ranking statement built once per shape (``memory_db.vectors.ranking``) runs each search
with that search's values: the statement built for one search, given another's parameters,
is the statement built for the other, parameter for parameter. No value of the first search
(a scope, the query, the words, the metering) survives into the second."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import pytest
from sqlalchemy import bindparam, literal_column, select
from sqlalchemy.dialects.postgresql.asyncpg import dialect as asyncpg_dialect

from memory_db import VaultScope
from memory_db.errors import MemoryDbError
from memory_db.repositories import AssetFilter
from memory_db.statement_cache import StatementCache
from memory_db.vectors import SearchTuning, VectorIndex, ranking
from memory_db.vectors.ranking import (
    FusionWeights,
    Metering,
    NamedScope,
    SearchStart,
    kept_for_others,
    planned_once,
    ranking_statement,
)

_DIALECT = asyncpg_dialect()


@pytest.fixture(autouse=True)
def _no_statement_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each test starts from an empty cache: another test may have built the same shape.
    monkeypatch.setattr(ranking, "_STATEMENTS", StatementCache(256))


def _index() -> VectorIndex:
    # The session is never used: building a statement sends nothing.
    session: Any = None
    return VectorIndex(session, "memory_assets_v1", 1024, "halfvec")


def _call(
    *,
    owner: str,
    strategy: Literal["ann", "scan"],
    words: str | None,
    scopes: int,
    seed: int,
    filters: AssetFilter | None = None,
    reuse: bool = True,
) -> tuple[Any, dict[str, object]]:
    """One search's statement and values; every value differs from one ``seed`` to another."""
    return ranking_statement(
        _index(),
        SearchStart(vaults=None, strategy=strategy),
        [VaultScope(f"{owner}{i}@example.com", f"{owner}{i}/Library") for i in range(scopes)],
        vector=[((seed + i) % 7 - 3) / 10 for i in range(1024)],
        model=f"model-{seed}",
        filters=filters or AssetFilter(),
        vector_filters=AssetFilter(),
        words=None if words is None else f"{words} {seed}",
        overfetch=50 + seed,
        text_hits=50 + 2 * seed,
        evidence_floor=0.1 * seed,
        min_score=None if seed % 2 else 0.05 * seed,
        limit=10 + seed,
        fusion=FusionWeights(20 + seed, 3 + seed, 1.0 + seed),
        tuning=SearchTuning(),
        metering=Metering(
            identity=f"{owner}0@example.com",
            model=f"model-{seed}",
            total_tokens=seed,
            prompt_tokens=seed + 1,
            image_tokens=seed + 2,
            request_id=None if seed % 2 else f"req-{seed}",
            detail={"mode": "text", "seed": seed},
        ),
        reuse=reuse,
    )


def _compiled(statement: Any, values: dict[str, object] | None) -> tuple[str, dict[str, Any]]:
    compiled = statement.compile(dialect=_DIALECT)
    params = compiled.construct_params(values)
    # The query vector goes as a float32 array (memory_db.vector_wire): compared by its values.
    return str(compiled), {
        k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in params.items()
    }


@pytest.mark.parametrize("strategy", ["ann", "scan"])
@pytest.mark.parametrize("words", [None, "red kite"])
@pytest.mark.parametrize("scopes", [1, 3])
def test_the_statement_of_a_shape_runs_another_search_as_its_own_statement(
    strategy: Literal["ann", "scan"], words: str | None, scopes: int
) -> None:
    first, first_values = _call(
        owner="alice", strategy=strategy, words=words, scopes=scopes, seed=1
    )
    reused, values = _call(owner="bob", strategy=strategy, words=words, scopes=scopes, seed=2)
    again, _ = _call(owner="bob", strategy=strategy, words=words, scopes=scopes, seed=2)
    fresh, fresh_values = _call(
        owner="bob", strategy=strategy, words=words, scopes=scopes, seed=2, reuse=False
    )
    # Built once for the shape (the first search ran the statement it built, with its values;
    # the others run the copy kept without them).
    assert again is reused and reused is not first
    assert fresh is not reused
    sql, params = _compiled(reused, values)
    fresh_sql, fresh_params = _compiled(fresh, None)  # the values it was built with
    assert sql == fresh_sql
    # The ids are fresh per call; everything else is the second search's.
    for name in ("usage_id", "provenance_id"):
        assert params[name] == values[name] != first_values[name]
        params[name] = fresh_params[name] = fresh_values[name]
    assert params == fresh_params
    # And nothing of the first search is left in what the second sends.
    sent = repr(params)
    assert "alice" not in sent
    assert "bob" in sent


def test_a_search_with_exact_filters_is_built_afresh() -> None:
    tagged = AssetFilter(tags=("kite",))
    first, _ = _call(owner="alice", strategy="ann", words="red", scopes=1, seed=1, filters=tagged)
    second, _ = _call(owner="bob", strategy="ann", words="red", scopes=1, seed=2, filters=tagged)
    assert second is not first


def test_shapes_do_not_share_a_statement() -> None:
    built = {
        id(_call(owner="a", strategy=strategy, words=words, scopes=scopes, seed=1)[0])
        for strategy in ("ann", "scan")
        for words in (None, "kite")
        for scopes in (1, 2)
    }
    assert len(built) == 8


@pytest.mark.parametrize("words", [None, "red kite"])
def test_a_statement_kept_for_a_shape_holds_no_value_of_the_search_that_built_it(
    words: str | None,
) -> None:
    _call(owner="carol", strategy="ann", words=words, scopes=2, seed=3)
    kept, first_values = _call(owner="erin", strategy="ann", words=words, scopes=2, seed=4)
    _, unbound = _compiled(kept, None)  # what a search that passed nothing would send
    assert all(unbound[name] is None for name in first_values if name in unbound)
    assert "carol" not in repr(unbound) and "erin" not in repr(unbound)
    # Only the statement's own constants keep a value.
    assert {name for name, value in unbound.items() if value is not None} <= {
        name for name in unbound if name not in first_values
    }


def test_a_parameter_that_is_not_a_search_value_is_refused() -> None:
    statement = select(literal_column("1")).where(bindparam("owner", "dave") == "x")
    with pytest.raises(MemoryDbError, match="owner"):
        kept_for_others(statement, {"vaults": []})
    assert kept_for_others(statement, {"owner": "dave"}) is not statement


@pytest.mark.parametrize(
    ("filters", "vector_filters", "named", "once"),
    [
        (AssetFilter(), AssetFilter(), None, True),
        (AssetFilter(), AssetFilter(), NamedScope(vault_owner="a", vault_name="v"), True),
        (AssetFilter(tags=("red",)), AssetFilter(), None, False),
        (AssetFilter(project_id="prj_1"), AssetFilter(project_id="prj_1"), None, False),
        (AssetFilter(), AssetFilter(asset_ids=("ast_1",)), None, False),
        (AssetFilter(), AssetFilter(), NamedScope(project_id="p", folder_id="f"), False),
        (AssetFilter(), AssetFilter(), NamedScope(candidates=AssetFilter(untagged=True)), False),
    ],
)
def test_only_a_search_that_runs_the_statement_kept_for_its_shape_is_planned_once(
    filters: AssetFilter, vector_filters: AssetFilter, named: NamedScope | None, once: bool
) -> None:
    """A named folder or candidate list becomes a filter after the start statement: such a
    search, like one with filters, keeps a plan made for its values."""
    assert planned_once(filters, vector_filters, named) is once
