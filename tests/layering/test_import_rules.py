"""The import rules of ``scripts/check_layering.py`` hold, and the check catches what it should."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_layering.py"


def _load_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_layering", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while defining
    spec.loader.exec_module(module)
    return module


check = _load_check()


def _tree(
    root: Path, source: str, where: str = "packages/memory_tools/src/memory_tools/workflows"
) -> Path:
    package = root / where
    package.mkdir(parents=True, exist_ok=True)
    (package / "module.py").write_text(textwrap.dedent(source), encoding="utf-8")
    return root


def test_the_repository_keeps_its_import_rules() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    "source",
    [
        "from sqlalchemy import select\n",
        "import sqlalchemy.orm\n",
        "from sqlalchemy.ext.asyncio import AsyncSession\n",
        "import asyncpg\n",
        "def later():\n    from sqlalchemy import text\n    return text\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    pass\nelse:\n"
        "    import sqlalchemy\n",
    ],
    ids=["from-import", "submodule", "nested-module", "driver", "in-a-function", "else-branch"],
)
def test_sql_imported_above_memory_db_is_refused(tmp_path: Path, source: str) -> None:
    found = check.violations(_tree(tmp_path, source))
    assert len(found) == 1
    assert found[0].startswith("packages/memory_tools/src/memory_tools/workflows/module.py:")
    assert "repository" in found[0]


@pytest.mark.parametrize(
    "where",
    [
        "packages/memory_tools/src/memory_tools/ingest",
        "packages/scraper_mcp/src/scraper_mcp",
        "apps/memory_server/src/memory_server",
        "apps/aggregate_server/src/aggregate_server",
    ],
)
def test_every_layer_above_memory_db_is_checked(tmp_path: Path, where: str) -> None:
    assert len(check.violations(_tree(tmp_path, "import sqlalchemy\n", where))) == 1


@pytest.mark.parametrize(
    "source",
    [
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from sqlalchemy.ext.asyncio import AsyncSession\n",
        "import typing\nif typing.TYPE_CHECKING:\n    import sqlalchemy\n",
        "import sqlalchemy_utils_is_another_package\n",
        "from memory_db import Database\n",
        "from . import sqlalchemy\n",
    ],
    ids=["type-checking", "typing-type-checking", "prefix-only", "memory-db", "relative"],
)
def test_what_the_rules_allow(tmp_path: Path, source: str) -> None:
    assert check.violations(_tree(tmp_path, source)) == []


def test_memory_db_itself_may_speak_sql(tmp_path: Path) -> None:
    root = _tree(tmp_path, "import sqlalchemy\n", "packages/memory_db/src/memory_db")
    assert check.violations(root) == []


def test_the_script_exits_non_zero_and_names_the_import(tmp_path: Path) -> None:
    root = _tree(tmp_path, "x = 1\nfrom sqlalchemy import select\n")
    result = subprocess.run(
        [sys.executable, str(SCRIPT), str(root)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 1
    assert "packages/memory_tools/src/memory_tools/workflows/module.py:2: imports sqlalchemy" in (
        result.stdout
    )
