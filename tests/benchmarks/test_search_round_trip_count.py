"""How ``benchmarks/search.py`` counts a call's round trips: the background taken away by text.

Issue 31's run printed 4.0 round trips per search and judged it above 4: the idle worker's
poll was subtracted at a rate read over a few idle seconds (a poll or two off), and its sweep,
every 30 s, not at all. Now every call of a statement text the idle server sent is taken away,
exactly, and no text a call also sends (``BEGIN``, ``COMMIT``).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the benchmark scripts import each other from it
search: Any = importlib.import_module("search")

POLL = "UPDATE mem_asset_embedding_jobs SET status=$1"
RANK = "WITH ann AS (...)"
START = "WITH vaults AS MATERIALIZED (...)"


def _sample(at: float, counts: dict[str, int]) -> Any:
    return search.Sample(
        at=at,
        statements=sum(counts.values()),
        dealloc=0,
        server_cpu=0.0,
        pg_cpu=0.0,
        by_statement=counts,
    )


def test_the_background_is_taken_away_by_text_not_at_a_rate() -> None:
    # 200 searches of four round trips each; the worker's poll ran 3 times meanwhile, while
    # the idle window (5 s, 2 polls) gave a rate of 0.4 per second over a 5.6 s window.
    before = _sample(0.0, {"BEGIN": 10, "COMMIT": 10, RANK: 10, START: 10, POLL: 7})
    after = _sample(5.6, {"BEGIN": 210, "COMMIT": 210, RANK: 210, START: 210, POLL: 10})
    # The idle server sent its poll, and (once, by chance) opened a transaction.
    background = {POLL: 0.4, "BEGIN": 0.2, "COMMIT": 0.2}
    assert search._own_statements(before, after, background) == 800
    figures = search._statement_deltas(before, after, 200)
    assert figures == {"BEGIN": 1.0, "COMMIT": 1.0, RANK: 1.0, START: 1.0, POLL: 0.015}
