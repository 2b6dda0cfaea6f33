"""``docs/acceptance.md`` points every acceptance criterion at tests that exist.

Each ``path::test_name`` the page cites must name a test function defined at the top level of
that file (read with ``ast``, no import), so a renamed or deleted test breaks this test instead
of leaving the page pointing at nothing. Every one of the twelve criteria cites at least one
test, and the README links the page.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "acceptance.md"
CITATION = re.compile(r"([A-Za-z0-9_./-]+\.py)::(test_[A-Za-z0-9_]+)")
CRITERION = re.compile(r'^<a id="c(\d+)"></a>$', re.MULTILINE)


@functools.cache
def _tests_in(path: Path) -> frozenset[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return frozenset(
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("test_")
    )


def _sections() -> dict[int, str]:
    text = PAGE.read_text(encoding="utf-8")
    starts = [(int(m.group(1)), m.start()) for m in CRITERION.finditer(text)]
    ends = [start for _number, start in starts[1:]] + [text.index('<a id="known-gaps">')]
    return {number: text[start:end] for (number, start), end in zip(starts, ends, strict=True)}


def test_every_cited_test_exists() -> None:
    citations = set(CITATION.findall(PAGE.read_text(encoding="utf-8")))
    assert len(citations) > 50
    missing = []
    for path, name in sorted(citations):
        source = ROOT / path
        if not source.is_file() or name not in _tests_in(source):
            missing.append(f"{path}::{name}")
    assert missing == [], "docs/acceptance.md cites tests that do not exist"


def test_every_criterion_cites_a_test_and_the_readme_links_the_page() -> None:
    sections = _sections()
    assert sorted(sections) == list(range(1, 13))
    uncited = [number for number, body in sections.items() if not CITATION.search(body)]
    assert uncited == []
    assert "docs/acceptance.md" in (ROOT / "README.md").read_text(encoding="utf-8")
