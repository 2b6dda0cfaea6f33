"""A search reloads only the candidates it can answer, and answers what it answered before.

The ranking statement (``memory_db.vectors.ranking``) orders the candidates by the fusion's
relevance in floating point, checks them against the scope and the filters best first, and
reloads the ``limit`` most relevant it admits, with any within ``TIE_MARGIN`` of the last. The
server then fuses exactly (:func:`fuse`, :func:`best_first`): scores rounded to six decimals,
ties by id. These tests compare every limit's answer with the answer of a search that reloads
every candidate (a limit above the candidates' count), over a library where candidates are
not ready, where many relevances tie exactly, and where two differ by less than the rounding.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
from sqlalchemy import text

from memory_db import Database, VaultScope
from memory_db.embedding import match_thresholds
from memory_db.repositories import AssetFilter
from memory_db.testing.library_rows import fill_library
from memory_db.testing.vector_rows import vector_row
from memory_db.unit_of_work import session_of
from memory_db.vectors import (
    DEFAULT_ALIAS,
    Metering,
    SearchTuning,
    VectorIndex,
    VectorRecord,
    ensure_default_index,
)
from memory_db.vectors.ranking import Ranked, rank_and_meter, start_search
from memory_tools.workflows.search import (
    FUSION_WEIGHTS,
    OVERFETCH,
    TEXT_HITS,
    Evidence,
    answered,
    best_first,
    fuse,
)

OWNER = "cut@example.com"
MODEL = "local-hash-v1"
INDEX = "memory_assets_v1"
FLOOR = match_thresholds(MODEL, "text").evidence
# Half-precision steps: the index stores halfvec, so the vectors are made of them.
HALF = np.float16


def _unit(vector: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return (vector / np.linalg.norm(vector)).astype(HALF).astype(np.float64)


def _similarity(query: np.ndarray[Any, Any], vector: np.ndarray[Any, Any]) -> float:
    return float(query @ vector / (np.linalg.norm(query) * np.linalg.norm(vector)))


def _just_below(query: np.ndarray[Any, Any], vector: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``vector`` with one component moved one half-precision step: 1-5e-7 less similar.

    A near tie: two assets whose relevance differs by less than the score's rounding.
    """
    base = _similarity(query, vector)
    best: tuple[float, np.ndarray[Any, Any]] | None = None
    for j in np.argsort(-np.abs(query))[:200]:
        for toward in (-np.inf, np.inf):
            moved = vector.copy()
            moved[j] = float(np.nextafter(HALF(vector[j]), HALF(toward)))
            drop = base - _similarity(query, moved)
            if 1e-7 <= drop <= 5e-7 and (best is None or abs(drop - 3e-7) < abs(best[0] - 3e-7)):
                best = (drop, moved)
    assert best is not None, "no half-precision step lowers the similarity by 1-5e-7"
    return best[1]


async def _library(database: Database) -> tuple[VaultScope, list[float]]:
    """100 assets of one vault (six not ready), each pair's vectors swapped between them.

    Asset ``2k`` has visual ``y'`` and fused ``x``, asset ``2k+1`` visual ``x`` and fused
    ``y``, where ``y'`` is ``y`` a little less similar to the query: both lists hold the same
    similarities in the same order, so the pair's places sum to the same relevance, and their
    best similarities differ by ``y - y'`` when ``y`` is the closer (else not at all).
    """
    [vault] = await fill_library(database, OWNER, {"Library": 100}, projects_per_vault=1)
    rng = np.random.default_rng(31)
    query = _unit(rng.standard_normal(1024))
    async with database.unit_of_work() as uow:
        session = session_of(uow)
        rows = (
            await session.execute(
                text("SELECT id, object_id FROM mem_assets WHERE vault = :v ORDER BY id"),
                {"v": vault.scope.physical_vault},
            )
        ).all()
        await ensure_default_index(session, INDEX, dimensions=1024)
        index = await VectorIndex.open(session, INDEX)
        records = []

        def record(row: Any, representation: str, vector: np.ndarray[Any, Any]) -> VectorRecord:
            return vector_row(
                row.id, vector, object_id=row.object_id, representation=representation, model=MODEL
            )

        for first, second in zip(rows[::2], rows[1::2], strict=True):
            x, y = (_unit(query + rng.standard_normal(1024) * 0.04) for _ in range(2))
            if _similarity(query, x) > _similarity(query, y):
                x, y = y, x
            records += [
                record(first, "visual", _just_below(query, y)),
                record(first, "fused", x),
                record(second, "visual", x),
                record(second, "fused", y),
            ]
        await index.upsert(vault.scope, records)
    return vault.scope, [float(v) for v in query]


async def _search(
    database: Database, scope: VaultScope, query: list[float], words: str | None, limit: int
) -> tuple[Ranked, dict[str, Evidence], list[str]]:
    tuning = SearchTuning()
    async with database.unit_of_work() as uow:
        index = await VectorIndex.open(session_of(uow), INDEX)
        start = await start_search(
            session_of(uow),
            index,
            DEFAULT_ALIAS,
            viewer=None,
            scopes=[scope],
            filters=AssetFilter(),
            tuning=tuning,
        )
        ranked = await rank_and_meter(
            session_of(uow),
            index,
            start,
            [scope],
            vector=query,
            model=MODEL,
            filters=AssetFilter(),
            vector_filters=AssetFilter(),
            words=words,
            overfetch=OVERFETCH,
            text_hits=TEXT_HITS,
            evidence_floor=FLOOR,
            min_score=None,
            limit=limit,
            fusion=FUSION_WEIGHTS,
            tuning=tuning,
            metering=Metering(OWNER, MODEL, 0, 0, 0, None, {"mode": "image"}),
        )
    fusion = fuse(
        ranked.hits, ranked.words, ranked.word_hits, evidence_floor=FLOOR, text_query=bool(words)
    )
    ordered = best_first(fusion, evidence_floor=FLOOR, min_score=None)
    return ranked, fusion, [row.asset.id for row in answered(ranked, ordered, limit)]


async def test_every_limit_answers_what_reloading_every_candidate_answers(
    database: Database,
) -> None:
    scope, query = await _library(database)
    for words in (None, "image 12", "image"):
        _, _, everything = await _search(database, scope, query, words, 1000)
        assert len(everything) >= 30, (words, len(everything))
        for limit in range(1, len(everything) + 1):
            ranked, _, got = await _search(database, scope, query, words, limit)
            assert got == everything[:limit], (words, limit)
            # Only about as many rows as answered are reloaded, never every candidate.
            assert len(ranked.reloaded) <= limit + 2, (words, limit, len(ranked.reloaded))


async def test_a_near_tie_at_the_limit_is_answered_in_the_servers_order(
    database: Database,
) -> None:
    scope, query = await _library(database)
    ranked, fusion, everything = await _search(database, scope, query, None, 1000)
    # The set-up's own check: pairs whose scores round alike while the second of the pair is
    # the more relevant, so the float order and the answer's order disagree.
    near = [
        (a, b)
        for a, b in itertools.pairwise(everything)
        if fusion[a].score == fusion[b].score and fusion[b].relevance > fusion[a].relevance
    ]
    assert near, "the library holds no near tie"
    for first, _ in near:
        limit = everything.index(first) + 1
        _, _, got = await _search(database, scope, query, None, limit)
        assert got == everything[:limit], limit
    # And the provenance counts what was answered, capped by the limit.
    assert len(ranked.reloaded) == len(everything)
