"""The files marked ``slow`` are handed out first (root conftest.py), each file kept whole.

`make test` gives files to its two pytest-xdist workers in collection order: a long
end-to-end file handed out last would leave one worker running alone at the end.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
QUICK = "packages/memory_tools/tests/unit/test_search_fusion.py"
SLOW = "tests/e2e/test_killed_servers.py"


def _tests_in(path: str) -> list[str]:
    """The test functions of ``path`` in the order they are written."""
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    return [
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("test_")
    ]


BROWSER = "tests/web/test_sign_in.py"


def test_slow_and_browser_files_come_first_whole_and_in_their_own_order() -> None:
    # One collection (a pytest process costs seconds of imports), named quick first: the slow
    # file and the browser file, which has no `slow` marker of its own (the web conftest's
    # pytestmark does not reach it) but whose tests use the `browser` fixture, are handed out
    # before it, each whole, in the order they were named.
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [*command, QUICK, SLOW, BROWSER], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    collected = [line for line in done.stdout.splitlines() if "::" in line]
    files = [test_id.split("::", 1)[0] for test_id in collected]
    counts = {path: files.count(path) for path in (SLOW, BROWSER, QUICK)}
    assert all(counts.values()), counts
    assert files == [SLOW] * counts[SLOW] + [BROWSER] * counts[BROWSER] + [QUICK] * counts[QUICK], (
        files
    )
    # Within the slow file, the written order.
    assert [test_id.split("::", 1)[1] for test_id in collected if test_id.startswith(SLOW)] == (
        _tests_in(SLOW)
    )
