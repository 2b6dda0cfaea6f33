"""`-m "not s3rver"` leaves out exactly the cases that need s3rver (Node.js), and only them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TARGETS = [
    "packages/memory_db/tests/integration/test_object_store_contract.py",
    "packages/memory_tools/tests/serving/test_uploads.py",
]


def _collected(marker: str) -> list[str]:
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [*command, "-m", marker, *TARGETS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_the_s3rver_marker_selects_the_s3rver_cases_and_nothing_else() -> None:
    marked = _collected("s3rver")
    unmarked = _collected("not s3rver")
    assert marked and unmarked
    assert all("s3rver" in test_id for test_id in marked), marked
    assert not any("s3rver" in test_id for test_id in unmarked), unmarked
