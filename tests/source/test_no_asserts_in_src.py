"""No ``assert`` statement in any package's or app's source.

``python -O`` strips asserts, so one that guards input or runtime state silently stops guarding;
one that narrows a type fails as ``internal`` instead of a stable code (issue 30: the asset
page's retry without a representation did). Every check in ``src`` is an explicit ``if`` that
raises a real error. The scan reads the syntax tree, so a word "assert" in a docstring or a
comment is not counted, and a new package or app is scanned without editing this test.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _sources() -> list[Path]:
    return sorted(
        path
        for pattern in ("packages/*/src/**/*.py", "apps/*/src/**/*.py")
        for path in ROOT.glob(pattern)
    )


def asserts_in(source: str, name: str) -> list[int]:
    """Line numbers of the ``assert`` statements in ``source``."""
    tree = ast.parse(source, filename=name)
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Assert)]


def test_the_scan_finds_an_assert_and_ignores_the_word() -> None:
    source = '"""Do not assert here."""\n# assert nothing\ndef f(x):\n    assert x, "x"\n'
    assert asserts_in(source, "example.py") == [4]


def test_no_source_file_has_an_assert_statement() -> None:
    sources = _sources()
    assert len(sources) > 100  # the globs found the workspace, not an empty folder
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sources
        for line in asserts_in(path.read_text(encoding="utf-8"), str(path))
    ]
    assert found == [], "replace each with an explicit check raising a real error: " + ", ".join(
        found
    )
