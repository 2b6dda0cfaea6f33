"""Check which modules each layer may import; run by ``scripts/test-isolated.sh`` and the tests.

The isolated environments of ``test-isolated.sh`` prove that a library imports nothing it does
not declare. Some rules cannot be proven that way, because the module is installed anyway as a
dependency of a lower layer: SQL is memory_db's business, yet SQLAlchemy is importable wherever
memory_db is. Those rules are listed here and checked on the source (``ast``), so a violation
fails the day it is written.

An import inside ``if TYPE_CHECKING:`` is allowed: it exists only for the type checker.

Usage: ``python scripts/check_layering.py [ROOT]`` (ROOT defaults to the repository); exits 1
and names each offending import when a rule is broken.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Rule:
    """Source trees (globs relative to the root) that must not import ``forbidden``, and why."""

    sources: tuple[str, ...]
    forbidden: tuple[str, ...]
    reason: str


# Every layer above memory_db reaches the database only through its repositories and unit of
# work: a query written elsewhere escapes the tenancy predicates the repositories hold.
RULES = (
    Rule(
        sources=(
            "packages/memory_tools/src",
            "packages/scraper_mcp/src",
            "apps/*/src",
        ),
        forbidden=("sqlalchemy", "asyncpg"),
        reason="SQL lives behind memory_db's repositories: add a repository method instead",
    ),
)


def _is_type_checking(test: ast.expr) -> bool:
    """Whether an ``if`` tests ``TYPE_CHECKING`` (bare or as ``typing.TYPE_CHECKING``)."""
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def runtime_imports(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """``(line, module)`` of every absolute import that runs (not under ``TYPE_CHECKING``)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for branch in node.orelse:  # the else branch runs
                yield from runtime_imports(ast.Module(body=[branch], type_ignores=[]))
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            yield node.lineno, node.module
        yield from runtime_imports(node)


def _matches(module: str, forbidden: str) -> bool:
    return module == forbidden or module.startswith(forbidden + ".")


def violations(root: Path, rules: tuple[Rule, ...] = RULES) -> list[str]:
    """One line per import that breaks a rule: ``path:line: imports module (reason)``."""
    found: list[str] = []
    for rule in rules:
        files = sorted(
            {path for pattern in rule.sources for path in root.glob(f"{pattern}/**/*.py")}
        )
        for path in files:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for line, module in runtime_imports(tree):
                if any(_matches(module, name) for name in rule.forbidden):
                    relative = path.relative_to(root)
                    found.append(f"{relative}:{line}: imports {module} ({rule.reason})")
    return found


def main(argv: list[str]) -> int:
    """Print every violation; the exit status says whether there was one."""
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[1]
    found = violations(root)
    for line in found:
        print(line)
    if found:
        print(f"layering: {len(found)} forbidden import(s)")
        return 1
    print("layering: every layer imports only what it may")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
