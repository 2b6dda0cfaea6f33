"""``docs/design.md`` is the design reference the code points at, and every pointer resolves.

Comments, docstrings and docs name a section as ``docs/design.md#<anchor>`` (``design.md#<anchor>``
from inside ``docs/``). The anchors are explicit (``<a id="...">``), so a heading can be reworded
without breaking a pointer. Section numbers (``§``) of documents outside the repository are
refused: a reader of this repository cannot follow them.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"
THIS = str(Path(__file__).resolve().relative_to(ROOT))
SCANNED_DIRS = ("packages", "apps", "tests", "benchmarks", "scripts", "docs")
SCANNED_FILES = ("README.md", "Makefile", "pyproject.toml", "conftest.py")
SUFFIXES = {".py", ".md", ".sh", ".toml", ".sql", ".html", ".js", ".css", ".yml", ".yaml"}
SKIPPED_PARTS = {".venv", "node_modules", "__pycache__", ".cache"}

ANCHOR = re.compile(r'<a id="([^"]+)"></a>')
REFERENCE = re.compile(r"design\.md#([A-Za-z0-9_-]+)")
LOCAL_LINK = re.compile(r"\]\(#([A-Za-z0-9_-]+)\)")


def _sources() -> Iterator[Path]:
    for name in SCANNED_FILES:
        if (ROOT / name).is_file():
            yield ROOT / name
    for top in SCANNED_DIRS:
        for path in sorted((ROOT / top).rglob("*")):
            relative = path.relative_to(ROOT).parts
            if path.is_file() and path.suffix in SUFFIXES and not SKIPPED_PARTS & set(relative):
                yield path


def _lines() -> Iterator[tuple[str, int, str]]:
    for path in _sources():
        text = path.read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), start=1):
            yield str(path.relative_to(ROOT)), number, line


def _anchors() -> list[str]:
    return ANCHOR.findall(DESIGN.read_text(encoding="utf-8"))


def test_the_scan_reads_the_code_and_the_docs() -> None:
    scanned = {str(path.relative_to(ROOT)) for path in _sources()}
    assert "docs/design.md" in scanned
    assert "packages/memory_db/src/memory_db/schema.py" in scanned
    assert "tests/docs/test_design_references.py" in scanned


def test_design_anchors_are_unique_and_its_own_links_resolve() -> None:
    anchors = _anchors()
    assert len(anchors) > 30
    duplicated = [anchor for anchor, count in Counter(anchors).items() if count > 1]
    assert duplicated == []
    broken = set(LOCAL_LINK.findall(DESIGN.read_text(encoding="utf-8"))) - set(anchors)
    assert broken == set()


def test_every_pointer_into_the_design_names_an_anchor_it_has() -> None:
    anchors = set(_anchors())
    pointers = [
        (where, number, anchor)
        for where, number, line in _lines()
        for anchor in REFERENCE.findall(line)
    ]
    assert len(pointers) > 40, "the code points at the design"
    broken = [f"{where}:{number}: #{anchor}" for where, number, anchor in pointers]
    broken = [entry for entry in broken if entry.rsplit("#", 1)[1] not in anchors]
    assert broken == [], "pointers to sections docs/design.md does not have"


def test_no_section_numbers_of_documents_outside_the_repository() -> None:
    found = [f"{where}:{number}: {line.strip()}" for where, number, line in _lines() if "§" in line]
    # This file names the character it refuses; nothing else may hold it.
    found = [entry for entry in found if not entry.startswith(f"{THIS}:")]
    assert found == [], "point at a docs/design.md#<anchor> instead of a section number"


def test_the_design_is_linked_from_the_readme_and_the_architecture_map() -> None:
    assert "docs/design.md" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert "(design.md)" in (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
