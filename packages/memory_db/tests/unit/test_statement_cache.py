"""Statements kept by shape (``memory_db.statement_cache``): found again, and bounded."""

from __future__ import annotations

from memory_db.statement_cache import StatementCache


def test_a_kept_statement_is_found_by_its_shape() -> None:
    cache: StatementCache[tuple[str, ...], str] = StatementCache(4)
    assert cache.get(("visual",)) is None
    assert cache.keep(("visual",), "claim visual") == "claim visual"
    assert cache.get(("visual",)) == "claim visual"
    assert cache.get(("fused",)) is None


def test_a_full_cache_starts_again_and_never_holds_more_than_its_bound() -> None:
    cache: StatementCache[int, str] = StatementCache(3)
    for shape in range(10):
        cache.keep(shape, f"statement {shape}")
        assert len(cache) <= 3
        assert cache.get(shape) == f"statement {shape}"
    assert cache.get(0) is None
