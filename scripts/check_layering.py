"""Check which modules each layer may import; run by ``scripts/test-isolated.sh`` and the tests.

The isolated environments of ``test-isolated.sh`` prove that a library imports nothing it does
not declare. Some rules cannot be proven that way, because the module is installed anyway as a
dependency of a lower layer: SQL is memory_db's business, yet SQLAlchemy is importable wherever
memory_db is. Those rules are listed here and checked on the source (``ast``), so a violation
fails the day it is written.

Apps only wire libraries: no app imports another app, and no library imports an app. What two
apps share (serving MCP over HTTP, the object and upload routes, the worker) lives in a library,
``memory_tools.serving``. The apps are found on disk (``apps/<name>/src/<package>``), so an app
added later is held to this without editing the script; an app's ``pyproject.toml`` may not
declare another app as a dependency either.

An import inside ``if TYPE_CHECKING:`` is allowed: it exists only for the type checker.

The SQLAlchemy session stays behind memory_db's unit of work: above memory_db no code reads a
``.session`` attribute or uses ``memory_db.unit_of_work.session_of`` (``session_violations``).

Usage: ``python scripts/check_layering.py [ROOT]`` (ROOT defaults to the repository); exits 1
and names each offending import when a rule is broken.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
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


APP_REASON = "apps only wire libraries: what two apps share belongs in a library"
LIBRARY_REASON = "a library may not depend on an app"


def apps(root: Path) -> dict[str, Path]:
    """Every app's import package and its source directory: ``apps/<name>/src/<package>``."""
    return {
        package.name: package.relative_to(root)
        for package in sorted(root.glob("apps/*/src/*"))
        if (package / "__init__.py").is_file()
    }


def app_rules(root: Path) -> tuple[Rule, ...]:
    """No library imports an app; no app imports another app."""
    found = apps(root)
    if not found:
        return ()
    rules = [Rule(("packages/*/src",), tuple(sorted(found)), LIBRARY_REASON)]
    for package, source in found.items():
        others = tuple(sorted(set(found) - {package}))
        if others:
            rules.append(Rule((source.as_posix(),), others, APP_REASON))
    return tuple(rules)


def _requirement_name(requirement: str) -> str:
    """The normalised project name of a PEP 508 requirement (``memory-server>=1; ...``)."""
    name = re.split(r"[\s\[<>=!~;@(]", requirement.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def _project(path: Path) -> tuple[str, list[str]]:
    """The normalised name and the dependencies a ``pyproject.toml`` declares."""
    project = tomllib.loads(path.read_text(encoding="utf-8")).get("project", {})
    name = _requirement_name(str(project.get("name", path.parent.name)))
    return name, [_requirement_name(str(d)) for d in project.get("dependencies", [])]


def dependency_violations(root: Path) -> list[str]:
    """One line per library or app whose ``pyproject.toml`` declares an app as a dependency."""
    app_projects = {_project(path)[0] for path in root.glob("apps/*/pyproject.toml")}
    found: list[str] = []
    for layer, reason in (("packages", LIBRARY_REASON), ("apps", APP_REASON)):
        for path in sorted(root.glob(f"{layer}/*/pyproject.toml")):
            name, dependencies = _project(path)
            for dependency in dependencies:
                if dependency != name and dependency in app_projects:
                    found.append(f"{path.relative_to(root)}: depends on {dependency} ({reason})")
    return found


# The SQLAlchemy session stays behind the unit of work: above memory_db nothing reads a
# ``session`` attribute (``uow.session``, ``uow._session``) or imports ``session_of``, so every
# statement goes through a repository method. Calling a method named ``session`` (an OCR
# engine pool's ``engines.session(deadline)``) is not a read of one.
SESSION_SOURCES = RULES[0].sources
SESSION_ATTRIBUTES = ("session", "_session")
SESSION_REASON = "the session stays behind the unit of work: add a repository method instead"


def session_reads(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """``(line, what)`` of every ``session`` attribute read and every ``session_of`` import."""
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in SESSION_ATTRIBUTES
            and id(node) not in called
        ):
            yield node.lineno, f"reads .{node.attr}"
        elif isinstance(node, ast.Attribute) and node.attr == "session_of":
            yield node.lineno, "uses session_of"
        elif isinstance(node, ast.ImportFrom) and any(a.name == "session_of" for a in node.names):
            yield node.lineno, "imports session_of"


def session_violations(root: Path) -> list[str]:
    """One line per read of the unit of work's session above memory_db."""
    found: list[str] = []
    files = {path for pattern in SESSION_SOURCES for path in root.glob(f"{pattern}/**/*.py")}
    for path in sorted(files):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, what in session_reads(tree):
            found.append(f"{path.relative_to(root)}:{line}: {what} ({SESSION_REASON})")
    return found


def _matches(module: str, forbidden: str) -> bool:
    return module == forbidden or module.startswith(forbidden + ".")


def violations(root: Path, rules: tuple[Rule, ...] | None = None) -> list[str]:
    """One line per import or dependency that breaks a rule: ``path:line: imports module (reason)``.

    ``rules`` defaults to :data:`RULES` plus the app rules found under ``root``.
    """
    found: list[str] = []
    if rules is None:
        rules = RULES + app_rules(root)
        found.extend(dependency_violations(root))
        found.extend(session_violations(root))
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
        print(f"layering: {len(found)} forbidden import(s) or dependency(ies)")
        return 1
    print("layering: every layer imports only what it may")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
