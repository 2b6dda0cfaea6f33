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

Inside ``memory_tools`` the modules live in rooms by role, and an import may only run down
(:data:`ROOMS`, bottom to top): the base modules, then ``ingest/`` (the input pipeline),
``workflows/``, ``jobs/``, ``operations/``, the adapters ``mcp/`` and ``web/`` (side by side:
neither imports the other), ``serving/`` (composes everything) and ``testing/`` (may import
anything). An import inside a function counts too: moving it there would hide a circle, not
remove it. For the same reason no two modules of ``memory_tools`` may import each other, directly
or round a longer circle, even within one room.

An import inside ``if TYPE_CHECKING:`` is allowed: it exists only for the type checker.

The SQLAlchemy session stays behind memory_db's unit of work: above memory_db no code reads a
``.session`` attribute or uses ``memory_db.unit_of_work.session_of`` (``session_violations``).

scraper_mcp reaches memory_tools only through the package root and one public module,
``memory_tools.mcp.for_scrapers`` (:func:`scraper_violations`).

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
    # A model provider keeps its request, its status table and its answer parser; keys,
    # retries, backoff and the wire are memory_db.provider_http's, the same for every provider.
    Rule(
        sources=(
            "packages/memory_db/src/memory_db/describing",
            "packages/memory_db/src/memory_db/embedding",
        ),
        forbidden=("httpx",),
        reason="a provider speaks HTTP only through memory_db.provider_http.ProviderHttpClient",
    ),
)


def _is_type_checking(test: ast.expr) -> bool:
    """Whether an ``if`` tests ``TYPE_CHECKING`` (bare or as ``typing.TYPE_CHECKING``)."""
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _runtime_import_nodes(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement that runs (not under ``TYPE_CHECKING``), functions included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for branch in node.orelse:  # the else branch runs
                yield from _runtime_import_nodes(ast.Module(body=[branch], type_ignores=[]))
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        yield from _runtime_import_nodes(node)


def runtime_imports(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """``(line, module)`` of every absolute import that runs (not under ``TYPE_CHECKING``)."""
    for node in _runtime_import_nodes(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif node.level == 0 and node.module is not None:
            yield node.lineno, node.module


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
# engine pool's ``engines.session(deadline)``) is not a read of one, nor is an MCP request
# context's ``ctx.session`` (the SDK's ``ServerSession``: the client's peer, no database).
SESSION_SOURCES = RULES[0].sources
SESSION_ATTRIBUTES = ("session", "_session")
MCP_CONTEXTS = ("ctx",)
SESSION_REASON = "the session stays behind the unit of work: add a repository method instead"


def session_reads(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """``(line, what)`` of every ``session`` attribute read and every ``session_of`` import."""
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in SESSION_ATTRIBUTES
            and id(node) not in called
            and not (isinstance(node.value, ast.Name) and node.value.id in MCP_CONTEXTS)
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

    ``rules`` defaults to :data:`RULES` plus the app rules found under ``root``, and then the
    rooms of ``memory_tools`` (:func:`room_violations`) are checked too.
    """
    found: list[str] = []
    if rules is None:
        rules = RULES + app_rules(root)
        found.extend(scraper_violations(root))
        found.extend(dependency_violations(root))
        if (root / ROOMS_PACKAGE).is_dir():
            found.extend(room_violations(root))
            found.extend(circle_violations(root))
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


@dataclass(frozen=True)
class Room:
    """Modules of ``memory_tools`` (dotted prefixes) that share a role, at a height.

    A module may import its own room and any room lower than its own; rooms at the same height
    (the two adapters) may not import each other.
    """

    name: str
    height: int
    modules: tuple[str, ...]


# The rooms of memory_tools, bottom to top. The base is split finer because its modules import
# each other in one direction only: the foundations (errors, the wire models, admission,
# metrics ...) import nothing of memory_tools but errors; access checks keys and vault handles;
# the services bundle what a call needs; ingest (the input pipeline) saves under an access and
# with the services. Everything above the base is a role: a workflow is a caller's action, a
# job runs later on the worker, an operation is an operator's task over every tenant, an adapter
# turns a protocol into workflow calls, and serving composes the lot into a process.
ROOMS = (
    Room(
        "base",
        0,
        (
            "memory_tools.errors",
            "memory_tools.wire",
            "memory_tools.text",
            "memory_tools.progress",
            "memory_tools.metrics",
            "memory_tools.policy",
            "memory_tools.capacity",
            "memory_tools.query_cache",
            "memory_tools.key_activity",
        ),
    ),
    Room("access", 1, ("memory_tools.access", "memory_tools.sessions")),
    Room("services", 2, ("memory_tools.services",)),
    Room("ingest", 3, ("memory_tools.ingest",)),
    Room("workflows", 4, ("memory_tools.workflows",)),
    Room("jobs", 5, ("memory_tools.jobs",)),
    Room("operations", 6, ("memory_tools.operations",)),
    Room("mcp", 7, ("memory_tools.mcp",)),
    Room("web", 7, ("memory_tools.web",)),
    Room("serving", 8, ("memory_tools.serving",)),
    Room("testing", 9, ("memory_tools.testing",)),
)
ROOMS_PACKAGE = "packages/memory_tools/src/memory_tools"
# The package itself: its ``__init__`` imports only errors and loads the rest on first use, so
# ``from memory_tools import Forbidden`` is as low as ``memory_tools.errors``.
_PACKAGE_ROOM = ROOMS[0]


def room_of(module: str, rooms: tuple[Room, ...] = ROOMS) -> Room | None:
    """The room a ``memory_tools`` module belongs to (longest prefix), ``None`` outside it."""
    if module == "memory_tools":
        return _PACKAGE_ROOM
    best: tuple[int, Room] | None = None
    for room in rooms:
        for prefix in room.modules:
            if _matches(module, prefix) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), room)
    return None if best is None else best[1]


def _module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root / ROOMS_PACKAGE).with_suffix("").parts
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(("memory_tools", *parts))


def room_violations(root: Path, rooms: tuple[Room, ...] = ROOMS) -> list[str]:
    """One line per ``memory_tools`` import that runs up or sideways between rooms.

    A module outside every room is reported too, so a new top-level module or sub-package is
    placed on purpose rather than escaping the rule.
    """
    package = root / ROOMS_PACKAGE
    found: list[str] = []
    for path in sorted(package.glob("**/*.py")):
        relative = path.relative_to(root)
        module = _module_name(root, path)
        source = room_of(module, rooms)
        if source is None:
            found.append(f"{relative}:1: {module} is in no room (add it to ROOMS)")
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, imported in runtime_imports(tree):
            target = room_of(imported, rooms)
            if target is None or target is source or target.height < source.height:
                continue
            way = "sideways" if target.height == source.height else "up"
            found.append(
                f"{relative}:{line}: imports {imported} ({source.name} may not import "
                f"{target.name}: imports run down the rooms, this one runs {way})"
            )
    return found


def _imported_names(tree: ast.AST) -> Iterator[str]:
    """What each running import may load: ``from a import b`` names ``a`` and ``a.b``."""
    for node in _runtime_import_nodes(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif node.level == 0 and node.module is not None:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def _import_graph(root: Path) -> dict[str, set[str]]:
    """Each ``memory_tools`` module and the ``memory_tools`` modules it imports when it runs.

    An import of a module's own package (``from memory_tools import Forbidden``) is left out:
    a package's ``__init__`` runs before any of its modules, which is how packages load.
    """
    package = root / ROOMS_PACKAGE
    files = {_module_name(root, path): path for path in sorted(package.glob("**/*.py"))}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        targets = {name for name in _imported_names(tree) if name in files}
        graph[module] = {t for t in targets if t != module and not _matches(module, t)}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def circle_violations(root: Path) -> list[str]:
    """One line per import circle among ``memory_tools`` modules.

    Imports inside functions count: that is where a circle hides, and the code it needs
    belongs in a module both sides can import (or the map built where the app is composed).
    """
    return [
        f"{ROOMS_PACKAGE}: import circle {' <-> '.join(group)} (move the shared code to one "
        "module both import; an import inside a function only hides the circle)"
        for group in _circles(_import_graph(root))
    ]


# scraper_mcp builds on memory_tools through its package root and one public module, so what
# it relies on is listed in one place instead of reached for in modules whose insides change.
SCRAPER_SOURCES = "packages/scraper_mcp/src"
SCRAPER_DOOR = ("memory_tools", "memory_tools.mcp.for_scrapers")
SCRAPER_REASON = (
    "scraper_mcp imports memory_tools only from its root and memory_tools.mcp.for_scrapers: "
    "export what it needs there"
)


def _submodules_imported(tree: ast.AST, root: Path) -> Iterator[tuple[int, str]]:
    """``(line, module)`` of each memory_tools submodule a runtime import reaches.

    ``from memory_tools import policy`` reaches the module ``memory_tools.policy``: a submodule
    named through the package root is still that submodule. The root itself is not listed.
    """
    package = root / "packages/memory_tools/src/memory_tools"
    through_root = {
        node.lineno: [alias.name for alias in node.names]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "memory_tools"
    }
    for line, module in runtime_imports(tree):
        if module == "memory_tools":
            for name in through_root.get(line, []):
                if (package / name).is_dir() or (package / f"{name}.py").is_file():
                    yield line, f"memory_tools.{name}"
        elif _matches(module, "memory_tools"):
            yield line, module


def scraper_violations(root: Path) -> list[str]:
    """One line per scraper_mcp import of memory_tools that bypasses :data:`SCRAPER_DOOR`."""
    found: list[str] = []
    for path in sorted(root.glob(f"{SCRAPER_SOURCES}/**/*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, module in _submodules_imported(tree, root):
            if module not in SCRAPER_DOOR:
                relative = path.relative_to(root)
                found.append(f"{relative}:{line}: imports {module} ({SCRAPER_REASON})")
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
