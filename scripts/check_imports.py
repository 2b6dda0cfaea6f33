"""Check that every module a library's code and tests import can be found in this environment.

``scripts/test-isolated.sh`` runs it with the Python of an environment that holds one library,
its declared dependencies and its dev group, and nothing else. Every ``import`` in the library's
source and tests is found with ``ast`` — at module level, inside functions (imported lazily
when a command or a code path first needs it) and under ``if TYPE_CHECKING:`` alike — and its
top-level module is looked up with ``importlib.util.find_spec``. A module that is missing there
is a dependency the library uses without declaring it: the day a lower layer stops pulling it
in, the library breaks. Importing every module of the package (the second check) proves the
module-level imports also load, not only resolve.

The standard library and relative imports are skipped; so is the library's own package.

Usage: ``python scripts/check_imports.py PACKAGE_DIR`` (e.g. ``packages/memory_tools``); exits 1
and names each missing module and a file that imports it.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
import sys
from collections.abc import Iterator
from pathlib import Path


def imported_modules(path: Path) -> Iterator[str]:
    """Top-level names of the absolute imports in ``path``, wherever they stand in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0]


def missing_imports(package_dir: Path) -> dict[str, Path]:
    """Each module imported under ``package_dir`` that cannot be found, with one importing file."""
    local = {path.stem for path in package_dir.glob("tests/**/*.py")}
    local |= {path.name for path in package_dir.glob("tests/**") if path.is_dir()}
    missing: dict[str, Path] = {}
    for path in sorted(package_dir.rglob("*.py")):
        if ".venv" in path.parts:
            continue
        for name in imported_modules(path):
            # Test helpers import each other by module name (pytest puts the test root on
            # sys.path); those are files of this package, not dependencies.
            if name in sys.stdlib_module_names or name in local or name in missing:
                continue
            if importlib.util.find_spec(name) is None:
                missing[name] = path
    return missing


def unimportable_modules(package_dir: Path) -> dict[str, str]:
    """Each module of the library's import package that fails to import, with the error."""
    failures: dict[str, str] = {}
    for init in sorted(package_dir.glob("src/*/__init__.py")):
        package = importlib.import_module(init.parent.name)
        for module in pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}."):
            if module.name.endswith(".migrations.env"):
                continue  # Alembic's entry script: it runs only inside an Alembic command
            try:
                importlib.import_module(module.name)
            except Exception as exc:  # any failure to load is what this check reports
                failures[module.name] = f"{type(exc).__name__}: {exc}"
    return failures


def main(argv: list[str]) -> int:
    """Check one library directory; print what is wrong and return the exit status."""
    if len(argv) != 1:
        print("usage: check_imports.py PACKAGE_DIR", file=sys.stderr)
        return 2
    package_dir = Path(argv[0])
    status = 0
    for name, path in sorted(missing_imports(package_dir).items()):
        print(f"{path}: imports {name}, which this environment does not have (undeclared?)")
        status = 1
    for module, error in sorted(unimportable_modules(package_dir).items()):
        print(f"{module} does not import here: {error}")
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
