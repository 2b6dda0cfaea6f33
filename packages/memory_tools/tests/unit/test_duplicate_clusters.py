"""Clusters from pairs (``memory_tools.workflows.duplicates.clusters_of``), without a database:
connected components, newest first, each cluster's closest distance."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from memory_db.repositories import OpenPair, PairedAsset
from memory_tools.workflows.duplicates import clusters_of

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _asset(n: int) -> PairedAsset:
    return PairedAsset(f"ast_{n:026d}", f"Image {n}", T0 + timedelta(minutes=n))


def _pair(a: int, b: int, distance: float) -> OpenPair:
    return OpenPair(_asset(a), _asset(b), distance)


def test_chains_join_into_one_cluster_newest_first() -> None:
    # 1-2 and 2-3 chain (1 and 3 are not near each other); 4-5 stand apart; 6 has none.
    clusters = clusters_of([_pair(1, 2, 0.004), _pair(2, 3, 0.002), _pair(4, 5, 0.009)])
    assert [[a.asset_id for a in c.assets] for c in clusters] == [
        [_asset(5).asset_id, _asset(4).asset_id],
        [_asset(3).asset_id, _asset(2).asset_id, _asset(1).asset_id],
    ]
    assert [c.distance for c in clusters] == [0.009, 0.002]


def test_same_time_ties_break_by_id_descending() -> None:
    same = T0
    a = PairedAsset("ast_" + "a" * 26, "A", same)
    b = PairedAsset("ast_" + "b" * 26, "B", same)
    c = PairedAsset("ast_" + "c" * 26, "C", same)
    d = PairedAsset("ast_" + "d" * 26, "D", same)
    clusters = clusters_of([OpenPair(a, b, 0.001), OpenPair(c, d, 0.001)])
    assert [[m.asset_id for m in cl.assets] for cl in clusters] == [
        [d.asset_id, c.asset_id],
        [b.asset_id, a.asset_id],
    ]


def test_no_pairs_no_clusters() -> None:
    assert clusters_of([]) == []
