"""The graph walk's breadth by table size (``SearchTuning.ef_search_for``)."""

from __future__ import annotations

import pytest

from memory_db.vectors import SearchTuning


@pytest.mark.parametrize(
    ("rows", "ef_search"),
    [
        (-1.0, 100),  # never analysed: PostgreSQL's estimate is -1
        (0.0, 100),
        (75_000.0, 100),
        (100_000.0, 100),
        (150_000.0, 138),
        (200_000.0, 175),
        (300_000.0, 250),
        (10_000_000.0, 1000),  # pgvector refuses more than 1,000
    ],
)
def test_the_breadth_grows_with_the_table_within_its_bounds(rows: float, ef_search: int) -> None:
    # A graph of 32 neighbours per node (ASSET_VECTOR_GRAPH_M=32).
    assert SearchTuning().ef_search_for(rows, m=32) == ef_search
    assert SearchTuning().ef_search_for(rows, m=48) == ef_search


@pytest.mark.parametrize(
    ("rows", "ef_search"),
    [
        (-1.0, 250),
        (100_000.0, 250),
        (150_000.0, 438),
        (200_000.0, 625),
        (300_000.0, 1000),
        (10_000_000.0, 1000),
    ],
)
def test_a_graph_built_with_fewer_neighbours_walks_wider(rows: float, ef_search: int) -> None:
    # A graph of 16 per node (and one that names no m: pgvector builds 16) walks wider.
    assert SearchTuning().ef_search_for(rows, m=16) == ef_search
    assert SearchTuning().ef_search_for(rows) == ef_search


def test_an_explicit_breadth_is_used_whatever_the_size() -> None:
    assert SearchTuning(ef_search=40).ef_search_for(300_000.0) == 40
    assert SearchTuning(ef_search=40).ef_search_for(300_000.0, m=16) == 40
