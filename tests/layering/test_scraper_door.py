"""scraper_mcp imports memory_tools only through its root and ``memory_tools.mcp.for_scrapers``.

``scripts/check_layering.py`` refuses any other memory_tools module in scraper_mcp's source,
however it is named; and the door exports exactly what the scraper uses, so it stays small.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from .test_import_rules import ROOT, check

SCRAPER = "packages/scraper_mcp/src/scraper_mcp"
MEMORY_TOOLS = "packages/memory_tools/src/memory_tools"
DOOR = "memory_tools.mcp.for_scrapers"


def _workspace(root: Path, source: str) -> Path:
    """memory_tools with a few submodules, and one scraper_mcp module holding ``source``."""
    package = root / MEMORY_TOOLS
    (package / "mcp").mkdir(parents=True)
    (package / "ingest").mkdir()
    for module in ("__init__.py", "policy.py", "mcp/__init__.py", "mcp/for_scrapers.py"):
        (package / module).write_text("", encoding="utf-8")
    (package / "ingest" / "__init__.py").write_text("", encoding="utf-8")
    scraper = root / SCRAPER
    scraper.mkdir(parents=True)
    (scraper / "module.py").write_text(textwrap.dedent(source), encoding="utf-8")
    return root


@pytest.mark.parametrize(
    ("source", "module"),
    [
        ("from memory_tools.ingest.fetch import check_url\n", "memory_tools.ingest.fetch"),
        ("import memory_tools.errors\n", "memory_tools.errors"),
        ("from memory_tools import MemoryServices, policy\n", "memory_tools.policy"),
        ("from memory_tools import ingest\n", "memory_tools.ingest"),
        ("from memory_tools.mcp import for_scrapers\n", "memory_tools.mcp"),
        (
            "def later():\n    from memory_tools.mcp.tools import run_as_caller\n"
            "    return run_as_caller\n",
            "memory_tools.mcp.tools",
        ),
    ],
    ids=["submodule", "import", "submodule-via-root", "package-via-root", "door-parent", "lazy"],
)
def test_scraper_importing_another_memory_tools_module_is_refused(
    tmp_path: Path, source: str, module: str
) -> None:
    found = check.violations(_workspace(tmp_path, source))
    assert len(found) == 1
    assert found[0].startswith(f"{SCRAPER}/module.py:")
    assert f"imports {module} (" in found[0] and DOOR in found[0]


@pytest.mark.parametrize(
    "source",
    [
        "from memory_tools import Caller, MemoryServices, ToolFailure\n",
        "import memory_tools\n",
        f"from {DOOR} import check_url, run_as_caller\n",
        f"import {DOOR}\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from memory_tools.ingest.fetch import SafeFetcher\n",
        "import memory_tools_elsewhere\n",
    ],
    ids=["root", "root-module", "door", "door-module", "type-checking", "prefix-only"],
)
def test_what_the_scraper_may_import(tmp_path: Path, source: str) -> None:
    assert check.violations(_workspace(tmp_path, source)) == []


def test_memory_tools_itself_is_not_held_to_the_door(tmp_path: Path) -> None:
    root = _workspace(tmp_path, "")
    # A workflow (a module of memory_tools sits in a room: the rooms rule refuses one in none).
    (root / MEMORY_TOOLS / "workflows").mkdir()
    (root / MEMORY_TOOLS / "workflows" / "module.py").write_text(
        "from memory_tools.ingest.fetch import check_url\n", encoding="utf-8"
    )
    assert check.violations(root) == []


def _door_exports() -> set[str]:
    tree = ast.parse((ROOT / MEMORY_TOOLS / "mcp" / "for_scrapers.py").read_text("utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
        ):
            return set(ast.literal_eval(node.value))
    raise AssertionError("for_scrapers declares no __all__")


def _scraper_imports_through_door() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / SCRAPER).glob("**/*.py"):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == DOOR:
                names.update(alias.name for alias in node.names)
    return names


def test_the_door_exports_exactly_what_the_scraper_uses() -> None:
    exported = _door_exports()
    used = _scraper_imports_through_door()
    assert used - exported == set(), "imported from the door but not in its __all__"
    assert exported - used == set(), "exported for the scraper but no longer used: drop it"
