"""``benchmarks/near_duplicates.py`` on a fixed subset of four photos gives exactly these figures.

Exact, not approximate: the local embedder is deterministic (hand-built features, no weights,
no randomness), the photos are fixed (scikit-image's bundled files, encoded by the locked
libvips) and distances are rounded to six places, so the same checkout measures the same pairs
to the last digit. A change to the stored preview, the embedding call, the copies made or the
pair rule shows here as a changed figure. The subset holds the set's hardest different pair
(the grass and gravel screenshots, 0.0139 apart), so the chosen distance is the full set's.
The full set's figures are ``make bench``'s (checked there against the docs); the docs give
this subset's too, and the test checks they are these.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memory_db.testing.clip_model import write_tiny_model

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the benchmark scripts import each other from it
near_duplicates: Any = importlib.import_module("near_duplicates")

SUBSET = "astronaut,coffee,grass,gravel"


@pytest.fixture(autouse=True)
def _default_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The figures are those of the default settings (the preview edge changes them)."""
    for name in [n for n in os.environ if n.startswith(("ASSET_", "MEMORY_"))]:
        monkeypatch.delenv(name)


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert near_duplicates.main([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_subset_measures_the_documented_distance_exactly(
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = _json(capsys, "--photos", SUBSET)
    assert report["model"] == "local-hash-v1"
    assert report["pairs"] == {"in": 480, "out": 1734, "mirrored": 64}
    assert report["chosen"] == {
        "distance": near_duplicates.DOCUMENTED_DISTANCE,
        "found": 180,
        "false": 0,
        "precision": 1.0,
        "recall": 0.375,
        "f1": 0.5455,
    }
    assert report["closest_out"] == [
        0.013933,
        "grass screenshot (80 % on a border)",
        "gravel screenshot (80 % on a border)",
    ]
    # Every re-encode and thumbnail of these four is found; no crop nor screenshot is.
    found = {kind for kind, recall in report["recall_by_kind"].items() if recall == 1.0}
    missed = {kind for kind, recall in report["recall_by_kind"].items() if recall == 0.0}
    assert found == {
        *("JPEG q90", "JPEG q70", "JPEG q50", "JPEG q30", "WebP q75", "PNG"),
        *("thumbnail 0.5", "thumbnail 0.25", "thumbnail 256 px"),
    }
    assert missed == set(near_duplicates.VARIANTS) - found
    assert (report["mirrored_within"], report["mirrored_min"]) == (0.0, 0.132409)
    one_above = next(row for row in report["sweep"] if row["distance"] == 0.02)
    assert (one_above["found"], one_above["false"]) == (185, 1)
    # docs/embeddings.md#near-duplicate-distance gives these figures.
    docs = " ".join((ROOT / "docs" / "embeddings.md").read_text(encoding="utf-8").split())
    assert (
        "480 near-duplicate pairs and 1,734 different-photo pairs, precision 1.0 and recall "
        f"0.375 at {near_duplicates.DOCUMENTED_DISTANCE}"
    ) in docs


def test_a_distance_on_the_boundary_counts_as_within_and_one_false_pair_stops_the_choice() -> None:
    pairs = near_duplicates.Pairs(
        inside=np.array([0.0, 0.01, 0.02]),
        outside=np.array([0.0201, 0.5]),
        mirrored=np.array([]),
        closest_out=(0.0201, "a", "b"),
        farthest_in=(0.02, "c", "d"),
        by_kind={},
    )
    assert near_duplicates.chosen(pairs) == near_duplicates.Score(0.02, 3, 0, 1.0, 1.0, 1.0)
    assert near_duplicates.score(pairs, 0.025).false == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--photos", "astronaut,nosuch"], "unknown: ['nosuch']"),
        (["--photos", "astronaut,astronaut"], "two or more different names"),
        (["--photos", "astronaut"], "two or more different names"),
        (["--provider", "clip"], "--provider clip needs --model"),
        (["--provider", "clip", "--model", "../escape"], "is not a model directory name"),
        (["--provider", "clip", "--model", "absent"], "no model directory"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_measured(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        near_duplicates.main([*args, "--model-dir", str(tmp_path)])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_a_clip_model_is_measured_and_the_random_test_model_is_called_meaningless(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_tiny_model(tmp_path / "tiny")
    args = ["--provider", "clip", "--model-dir", str(tmp_path), "--model", "tiny"]
    assert near_duplicates.main([*args, "--photos", "astronaut,coffee"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("tiny on 2 photographs")
    assert "random ones, so its table means nothing" in out
    assert "chosen distance" in out
    # Its figures are not local-hash-v1's: no target is judged.
    assert "n/a" in out and "PASS" not in out and "FAIL" not in out
