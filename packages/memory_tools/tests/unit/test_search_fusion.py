"""Search fusion and ordering, without a database: ranked lists in, candidates best first out."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memory_db.repositories import TextMatch
from memory_db.vectors import VectorHit
from memory_tools.search import (
    PRECISE_MATCH_BONUS,
    PRECISE_WORD_MATCHES,
    RRF_K,
    Evidence,
    SearchHit,
    best_first,
    fuse,
    reload_batches,
    verdict,
)

FIRST, SECOND = 1 / (RRF_K + 1), 1 / (RRF_K + 2)


def hit(asset_id: str, representation: str, score: float) -> VectorHit:
    return VectorHit(f"vec_{asset_id}_{representation}", asset_id, representation, 1 - score)


def test_visual_and_fused_hits_rank_as_two_lists_plus_the_best_similarity() -> None:
    hits = [
        hit("a", "fused", 0.9),
        hit("b", "visual", 0.6),
        hit("a", "visual", 0.5),
        hit("b", "fused", 0.4),
    ]
    fusion = fuse(hits, [], [])
    a, b = fusion["a"], fusion["b"]
    # a: first of the fused list, second of the visual list; b: the other way round.
    assert a.relevance == pytest.approx(FIRST + SECOND + 0.9)
    assert b.relevance == pytest.approx(SECOND + FIRST + 0.6)
    assert (a.score, b.score) == pytest.approx((0.9, 0.6))
    assert a.matched == b.matched == {"visual", "fused"}


def test_a_word_match_ranks_in_its_own_list_and_its_similarity_counts_without_ranking() -> None:
    fusion = fuse(
        [hit("a", "visual", 0.3)],
        [TextMatch("b", 0.8, False), TextMatch("a", 0.2, False)],
        [hit("b", "fused", 0.25), hit("a", "fused", 0.35)],
    )
    assert fusion["b"].matched == {"metadata"}
    assert fusion["b"].relevance == pytest.approx(FIRST + 0.25)
    assert fusion["a"].matched == {"visual", "metadata"}
    # a's similarity is its best vector's (0.35, not ranked), added once.
    assert fusion["a"].relevance == pytest.approx(FIRST + SECOND + 0.35)


def test_a_word_match_without_a_vector_has_no_score() -> None:
    fusion = fuse([], [TextMatch("c", 1.0, False)], [])
    assert fusion["c"].score is None and fusion["c"].relevance == pytest.approx(FIRST)
    assert best_first(fusion, evidence_floor=0.1, min_score=None) == []


def test_a_few_assets_holding_every_word_come_first_and_many_do_not() -> None:
    close = [hit("x", "fused", 0.9), hit("exact", "fused", 0.4)]
    precise = fuse(close, [TextMatch("exact", 0.5, True), TextMatch("x", 0.4, False)], [])
    assert precise["exact"].relevance == pytest.approx(SECOND + FIRST + 0.4 + PRECISE_MATCH_BONUS)
    assert best_first(precise, evidence_floor=0.1, min_score=None) == ["exact", "x"]
    # Every word held by more assets than that: common words, similarity decides.
    many = [TextMatch(f"m{i}", 0.5, True) for i in range(PRECISE_WORD_MATCHES + 1)]
    common = fuse([hit("m0", "fused", 0.9), hit("m1", "fused", 0.4)], many, [])
    assert common["m1"].relevance == pytest.approx(SECOND + SECOND + 0.4)


def evidence(relevance: float, score: float | None, *matched: str) -> Evidence:
    return Evidence(relevance=relevance, score=score, matched=set(matched))


def test_candidates_need_evidence_and_come_most_relevant_first() -> None:
    fusion = {
        "weak": evidence(2.0, 0.10, "visual"),  # at the evidence floor: dropped
        "word": evidence(0.5, 0.05, "metadata"),  # a word match is evidence by itself
        "close": evidence(1.0, 0.60, "visual"),
        "closer": evidence(1.2, 0.70, "fused"),
    }
    assert best_first(fusion, evidence_floor=0.10, min_score=None) == ["closer", "close", "word"]


def test_min_score_applies_to_every_candidate_even_a_word_match() -> None:
    fusion = {
        "word": evidence(3.0, 0.20, "metadata"),
        "close": evidence(1.0, 0.60, "visual"),
    }
    assert best_first(fusion, evidence_floor=0.1, min_score=0.5) == ["close"]
    assert best_first(fusion, evidence_floor=0.1, min_score=0.6) == ["close"]  # inclusive


def test_equal_relevance_is_ordered_by_asset_id() -> None:
    fusion = {name: evidence(1.0, 0.5, "visual") for name in ("c", "a", "b")}
    assert best_first(fusion, evidence_floor=0.1, min_score=None) == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("count", "limit", "sizes"),
    [
        (0, 10, []),
        (5, 10, [5]),
        (100, 10, [20, 40, 40]),
        (100, 1, [10, 20, 40, 30]),
        (70, 30, [60, 10]),
    ],
)
def test_reload_batches_start_at_twice_the_limit_and_double(
    count: int, limit: int, sizes: list[int]
) -> None:
    ordered = [f"ast_{i:03}" for i in range(count)]
    batches = list(reload_batches(ordered, limit))
    assert [len(batch) for batch in batches] == sizes
    assert [asset_id for batch in batches for asset_id in batch] == ordered


def result(score: float, *matched: str) -> SearchHit:
    return SearchHit(
        asset_id="ast_1",
        vault="Library",
        title="t",
        mime_type="image/png",
        width=1,
        height=1,
        project_id=None,
        folder_id=None,
        source_url=None,
        tags=[],
        created_at=datetime.now(UTC),
        score=score,
        match_representations=list(matched),
        embedding_model="m",
        preview=None,
    )


def test_a_good_match_is_a_score_at_the_line_or_a_word_match() -> None:
    fusion = {"ast_1": evidence(1.0, 0.5, "visual")}
    assert verdict([result(0.5, "visual")], fusion, good_line=0.5) == (True, 0.5)
    assert verdict([result(0.49, "visual")], fusion, good_line=0.5) == (False, 0.49)
    assert verdict([result(0.2, "metadata")], fusion, good_line=0.5) == (True, 0.2)


def test_with_no_result_the_best_score_seen_is_still_reported() -> None:
    fusion = {"x": evidence(1.0, 0.123456789, "visual"), "y": evidence(0.5, None, "metadata")}
    assert verdict([], fusion, good_line=0.5) == (False, 0.123457)
    assert verdict([], {}, good_line=0.5) == (False, None)
