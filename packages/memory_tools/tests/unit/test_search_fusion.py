"""Search fusion and ordering, without a database: ranked lists in, candidates best first out."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memory_db.repositories import TextMatch
from memory_db.vectors import VectorHit
from memory_tools.workflows.search import (
    PRECISE_MATCH_BONUS,
    PRECISE_WORD_MATCHES,
    RRF_K,
    Evidence,
    SearchHit,
    best_first,
    fuse,
    relevance_ceiling,
    verdict,
)

FIRST, SECOND = 1 / (RRF_K + 1), 1 / (RRF_K + 2)
TEXT, IMAGE = relevance_ceiling(words=True), relevance_ceiling(words=False)


def fuse_text(
    hits: list[VectorHit], words: list[TextMatch], word_hits: list[VectorHit], floor: float = 0.0
) -> dict[str, Evidence]:
    return fuse(hits, words, word_hits, evidence_floor=floor, text_query=True)


def hit(asset_id: str, representation: str, score: float) -> VectorHit:
    return VectorHit(f"vec_{asset_id}_{representation}", asset_id, representation, 1 - score)


def test_visual_and_fused_hits_rank_as_two_lists_plus_the_best_similarity() -> None:
    hits = [
        hit("a", "fused", 0.9),
        hit("b", "visual", 0.6),
        hit("a", "visual", 0.5),
        hit("b", "fused", 0.4),
    ]
    fusion = fuse(hits, [], [], evidence_floor=0.0, text_query=False)
    a, b = fusion["a"], fusion["b"]
    # a: first of the fused list, second of the visual list; b: the other way round.
    assert a.relevance == pytest.approx(FIRST + SECOND + 0.9)
    assert b.relevance == pytest.approx(SECOND + FIRST + 0.6)
    assert (a.similarity, b.similarity) == pytest.approx((0.9, 0.6))
    assert a.score == pytest.approx(a.relevance / IMAGE, abs=1e-6)
    assert a.matched == b.matched == {"visual", "fused"}


def test_a_word_match_ranks_in_its_own_list_and_its_similarity_counts_without_ranking() -> None:
    fusion = fuse_text(
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
    fusion = fuse_text([], [TextMatch("c", 1.0, False)], [])
    assert fusion["c"].similarity is None and fusion["c"].relevance == pytest.approx(FIRST)
    assert best_first(fusion, evidence_floor=0.1, min_score=None) == []


def test_a_few_assets_holding_every_word_come_first_and_many_do_not() -> None:
    close = [hit("x", "fused", 0.9), hit("exact", "fused", 0.4)]
    precise = fuse_text(close, [TextMatch("exact", 0.5, True), TextMatch("x", 0.4, False)], [])
    assert precise["exact"].relevance == pytest.approx(SECOND + FIRST + 0.4 + PRECISE_MATCH_BONUS)
    assert best_first(precise, evidence_floor=0.1, min_score=None) == ["exact", "x"]
    # Every word held by more assets than that: common words, similarity decides.
    many = [TextMatch(f"m{i}", 0.5, True) for i in range(PRECISE_WORD_MATCHES + 1)]
    common = fuse_text([hit("m0", "fused", 0.9), hit("m1", "fused", 0.4)], many, [])
    assert common["m1"].relevance == pytest.approx(SECOND + SECOND + 0.4)


def test_exactly_as_many_assets_holding_every_word_as_the_gate_allows_all_come_first() -> None:
    """The gate's boundary: three assets holding every word are still precise (``<=``), so
    each gets the bonus and all three outrank a closer vector that holds only some words."""
    assert PRECISE_WORD_MATCHES == 3  # docs/tools.md: "at most three"
    exact = [TextMatch(f"e{i}", 0.5, True) for i in range(PRECISE_WORD_MATCHES)]
    close = [hit("x", "fused", 0.9), *(hit(f"e{i}", "fused", 0.3) for i in range(3))]
    fusion = fuse_text(close, [*exact, TextMatch("x", 0.4, False)], [])
    for i in range(PRECISE_WORD_MATCHES):
        places = fusion[f"e{i}"].relevance - PRECISE_MATCH_BONUS
        assert places == pytest.approx(1 / (RRF_K + 2 + i) + 1 / (RRF_K + 1 + i) + 0.3), i
    assert best_first(fusion, evidence_floor=0.1, min_score=None) == ["e0", "e1", "e2", "x"]


def evidence(relevance: float, similarity: float | None, *matched: str) -> Evidence:
    return Evidence(
        relevance=relevance, similarity=similarity, matched=set(matched), score=relevance / TEXT
    )


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


def result(similarity: float, *matched: str) -> SearchHit:
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
        score=0.5,
        similarity=similarity,
        match_representations=list(matched),
        embedding_model="m",
        preview=None,
    )


def test_a_good_match_is_a_similarity_at_the_line_or_a_word_match() -> None:
    fusion = {"ast_1": evidence(1.0, 0.5, "visual")}
    assert verdict([result(0.5, "visual")], fusion, good_line=0.5) == (True, 0.5)
    assert verdict([result(0.49, "visual")], fusion, good_line=0.5) == (False, 0.49)
    assert verdict([result(0.2, "metadata")], fusion, good_line=0.5) == (True, 0.2)


def test_with_no_result_the_best_similarity_seen_is_still_reported() -> None:
    fusion = {"x": evidence(1.0, 0.123456789, "visual"), "y": evidence(0.5, None, "metadata")}
    assert verdict([], fusion, good_line=0.5) == (False, 0.123457)
    assert verdict([], {}, good_line=0.5) == (False, None)


def test_a_word_match_against_image_only_vectors_scores_above_zero_in_order() -> None:
    """Issue 30: a text query against image-only vectors is 0.0 for local-hash-v1 (and the index
    returns its nearest 50 whatever they score); the word matches must still score, in order."""
    nearest = [hit(name, "visual", 0.0) for name in ("c", "b", "a")]
    words = [TextMatch("a", 0.6, True), TextMatch("b", 0.3, False)]
    fusion = fuse_text(nearest, words, [hit("a", "fused", 0.1), hit("b", "fused", 0.05)], 0.2)
    a, b, c = fusion["a"], fusion["b"], fusion["c"]
    assert a.score == pytest.approx((FIRST + PRECISE_MATCH_BONUS + 0.1) / TEXT, abs=1e-6)
    assert b.score == pytest.approx((SECOND + 0.05) / TEXT, abs=1e-6)
    assert 1 > a.score > b.score > 0
    # A similarity at or below the evidence floor neither ranks nor is named.
    assert a.matched == b.matched == {"metadata"} and c.matched == set()
    assert c.similarity == 0.0 and c.score == 0.0
    assert best_first(fusion, evidence_floor=0.2, min_score=None) == ["a", "b"]


def test_scores_lie_in_zero_to_one_and_order_the_results() -> None:
    best = fuse_text(
        [hit("top", "visual", 1.0), hit("top", "fused", 1.0)], [TextMatch("top", 1, True)], []
    )
    assert best["top"].score == pytest.approx(1.0)
    image = fuse(
        [hit("same", "visual", 1.0), hit("same", "fused", 1.0)],
        [],
        [],
        evidence_floor=0.0,
        text_query=False,
    )
    assert image["same"].score == pytest.approx(1.0)
    # A negative similarity is no evidence against a word match: the score stays above 0.
    negative = fuse_text([], [TextMatch("w", 0.1, False)], [hit("w", "fused", -0.4)])
    assert negative["w"].similarity == pytest.approx(-0.4) and negative["w"].score > 0
    mixed = fuse_text(
        [hit("v1", "fused", 0.8), hit("v2", "fused", 0.5), hit("w", "visual", 0.3)],
        [TextMatch("w", 0.4, False), TextMatch("v2", 0.2, False)],
        [hit("v2", "fused", 0.5), hit("w", "fused", 0.1)],
    )
    order = best_first(mixed, evidence_floor=0.0, min_score=None)
    scores = [mixed[asset_id].score for asset_id in order]
    assert scores == sorted(scores, reverse=True) and all(0 < s < 1 for s in scores)
