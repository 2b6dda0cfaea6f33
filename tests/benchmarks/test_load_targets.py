"""``benchmarks/load.py`` judges issue 31's many-clients targets from a run's figures.

The figures are made up here: the test checks the verdicts, not the machine.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the benchmark scripts import each other from it
load: Any = importlib.import_module("load")


def _phase(clients: int, throughput: float, search_p95: float, errors: int = 0) -> Any:
    phase = load.Phase(clients=clients, processes=1, window=10.0, throughput=throughput)
    phase.latency = {"search": {"p50": search_p95 / 2, "p95": search_p95, "p99": search_p95}}
    phase.errors = {"timeout": errors} if errors else {}
    return phase


def _verdicts(phases: dict[int, Any], after: Any) -> dict[str, object]:
    return {what: ok for what, ok, _ in load.targets(phases, after)}


def test_the_many_clients_targets_of_issue_31() -> None:
    # 16 clients at 20 calls/s: 16 / 20 = 0.8 s per call, so a search p95 up to 1.2 s is fair.
    phases = {
        1: _phase(1, 10.0, 100.0),
        4: _phase(4, 15.0, 300.0),
        16: _phase(16, 20.0, 1_100.0),
        64: _phase(64, 20.0, 4_000.0),
    }
    after = load.Afterwards(saves=10)
    verdicts = _verdicts(phases, after)
    assert verdicts == {
        "zero errors at 1, 4, 16 and 64 clients": True,
        "throughput at 16 >= 1.8x one client's": True,
        "search p95 at 16 <= 1.5 x 16 / throughput": True,
        "every acknowledged save readable and found by its title": True,
        "counters with zero drift, nothing left reserved": True,
        "save -> searchable p95 < 2 s at 16": None,  # no saves in these phases
        "search p95 with OCR on <= 1.3x with OCR off": None,  # not compared in this run
    }
    phases[16] = _phase(16, 17.0, 1_500.0, errors=1)  # 1.7x; 1.5 x 16 / 17 = 1.41 s
    after = load.Afterwards(saves=10, unsearchable=["ast_x"], drift_bytes=8)
    verdicts = _verdicts(phases, after)
    assert not any(verdicts[what] for what in list(verdicts)[:5]), verdicts


def test_an_n_not_run_is_not_judged_as_passing() -> None:
    verdicts = _verdicts({1: _phase(1, 10.0, 100.0), 16: _phase(16, 20.0, 900.0)}, None)
    assert verdicts["zero errors at 1, 4, 16 and 64 clients"] is None
    assert verdicts["every acknowledged save readable and found by its title"] is None


def test_the_ocr_target_compares_search_p95_with_ocr_on_and_off() -> None:
    phases = {16: _phase(16, 20.0, 1_100.0)}
    what = "search p95 with OCR on <= 1.3x with OCR off"
    met = load.OcrComparison(clients=16, on=[120.0, 140.0], off=[110.0])  # 1.18x
    met.ocr_jobs_on, met.ocr_jobs_off = [40, 38], [0]
    missed = load.OcrComparison(clients=16, on=[150.0, 160.0], off=[110.0])  # 1.41x
    missed.ocr_jobs_on, missed.ocr_jobs_off = [40, 38], [0]
    assert _verdicts_with(phases, met)[what] is True
    assert _verdicts_with(phases, missed)[what] is False
    assert _verdicts_with(phases, None)[what] is None  # not run is not passing


def test_a_comparison_where_ocr_did_not_run_as_set_is_not_judged() -> None:
    phases = {16: _phase(16, 20.0, 1_100.0)}
    what = "search p95 with OCR on <= 1.3x with OCR off"
    never_read = load.OcrComparison(clients=16, on=[100.0, 100.0], off=[110.0])
    never_read.ocr_jobs_on, never_read.ocr_jobs_off = [0, 0], [0]
    read_while_off = load.OcrComparison(clients=16, on=[100.0, 100.0], off=[110.0])
    read_while_off.ocr_jobs_on, read_while_off.ocr_jobs_off = [30, 30], [12]
    assert _verdicts_with(phases, never_read)[what] is None
    assert _verdicts_with(phases, read_while_off)[what] is None


def _verdicts_with(phases: dict[int, Any], ocr: Any) -> dict[str, object]:
    return {what: ok for what, ok, _ in load.targets(phases, None, ocr)}
