"""The near-duplicate table in ``docs/embeddings.md`` is the one ``benchmarks/near_duplicates.py`` keeps.

The script holds the figures the docs give (``DOCUMENTED_SWEEP``, ``DOCUMENTED_DISTANCE``) and
``make bench`` prints FAIL when a run measures anything else; this test keeps the docs' table,
its chosen distance and its pair counts equal to those figures, so the docs cannot drift from
what the script checks. It embeds nothing (the measurement itself is
``tests/benchmarks/test_near_duplicates_benchmark.py``).
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
near_duplicates: Any = importlib.import_module("near_duplicates")

ROW = re.compile(
    r"^\| (\**)([0-9.]+)\** \| ([0-9,]+) \| ([0-9,]+) \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+) \|$",
    re.M,
)


def _section() -> str:
    text = (ROOT / "docs" / "embeddings.md").read_text(encoding="utf-8")
    start = text.index("\n## Near-duplicate distance\n")
    return text[start : text.index("\n## ", start + 1)]


def test_the_docs_table_is_the_documented_sweep() -> None:
    rows = ROW.findall(_section())
    shown = [
        (float(d), int(found.replace(",", "")), int(false.replace(",", "")), *map(float, rest))
        for _, d, found, false, *rest in rows
    ]
    expected = [
        (s.distance, s.found, s.false, s.precision, s.recall, s.f1)
        for s in near_duplicates.documented_scores()
    ]
    assert shown == expected
    bold = [float(d) for stars, d, *_ in rows if stars]
    assert bold == [near_duplicates.DOCUMENTED_DISTANCE], "the chosen row is the one in bold"


def test_the_docs_name_the_chosen_distance_and_the_pair_counts() -> None:
    prose = " ".join(_section().split())  # line breaks fall anywhere in a paragraph
    assert f"the distance is **{near_duplicates.DOCUMENTED_DISTANCE}**" in prose
    assert f"({near_duplicates.IN_PAIRS:,} pairs)" in prose
    assert f"({near_duplicates.OUT_PAIRS:,} pairs)" in prose
    assert f"package ({len(near_duplicates.PHOTOS)}: " in prose
