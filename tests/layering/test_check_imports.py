"""``scripts/check_imports.py`` finds undeclared imports wherever they stand.

``scripts/test-isolated.sh`` runs it on every library, in the library's own environment.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_imports.py"


def _check(package_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(package_dir)],
        capture_output=True,
        text=True,
        check=False,
        cwd=package_dir,
    )


def _library(root: Path, source: str, test_source: str = "") -> Path:
    package = root / "src" / "sample_library"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "module.py").write_text(textwrap.dedent(source), encoding="utf-8")
    tests = root / "tests"
    tests.mkdir()
    (tests / "helpers.py").write_text("", encoding="utf-8")
    (tests / "test_sample.py").write_text(textwrap.dedent(test_source), encoding="utf-8")
    return root


def test_a_lazy_import_of_a_missing_module_is_reported(tmp_path: Path) -> None:
    library = _library(
        tmp_path,
        """
        import json

        def later():
            from not_installed_anywhere.sub import thing
            return thing
        """,
    )
    result = _check(library)
    assert result.returncode == 1
    assert "imports not_installed_anywhere" in result.stdout
    assert "module.py" in result.stdout


def test_a_missing_module_in_the_tests_is_reported(tmp_path: Path) -> None:
    library = _library(tmp_path, "import json\n", "import helpers\nimport missing_test_tool\n")
    result = _check(library)
    assert result.returncode == 1
    assert "imports missing_test_tool" in result.stdout
    assert "helpers" not in result.stdout  # a test helper of the package is not a dependency


def test_a_module_that_fails_to_import_is_reported(tmp_path: Path) -> None:
    library = _library(tmp_path, "raise RuntimeError('broken at import')\n")
    result = subprocess.run(
        [sys.executable, str(SCRIPT), str(library)],
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(library / "src")},
    )
    assert result.returncode == 1
    assert "sample_library.module does not import here: RuntimeError" in result.stdout
