"""Every benchmark command the docs show starts, and knows the flags the docs give it.

An operator copies ``python benchmarks/<name>.py --flag ...`` from ``docs/``; each such script
must answer ``--help`` (argparse formats every help string there, so a stray ``%`` fails it)
and list each flag the docs pass it. Running ``--help`` starts no database and no server.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMAND = re.compile(r"python benchmarks/([a-z_]+\.py)((?: --[a-z][a-z-]*)*)")


def _documented() -> dict[str, set[str]]:
    flags: dict[str, set[str]] = defaultdict(set)
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for script, given in COMMAND.findall(doc.read_text(encoding="utf-8")):
            flags[script].update(given.split())
    return flags


def test_every_documented_benchmark_answers_help_with_its_documented_flags() -> None:
    documented = _documented()
    assert documented, "the docs show no benchmark command: the pattern is stale"
    for script, flags in sorted(documented.items()):
        path = ROOT / "benchmarks" / script
        assert path.is_file(), f"docs name benchmarks/{script}, which does not exist"
        answer = subprocess.run(
            [sys.executable, str(path), "--help"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert answer.returncode == 0, f"{script} --help: {answer.stderr[-400:]}"
        for flag in flags:
            assert re.search(rf"{re.escape(flag)}\b", answer.stdout), f"{script} lacks {flag}"
