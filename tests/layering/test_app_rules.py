"""Apps only wire: ``scripts/check_layering.py`` refuses an app importing another app.

No app imports another app, no library imports an app, and neither declares an app as a
dependency; what two apps share lives in a library (``memory_tools.serving``). The apps are
found on disk, so the rule holds for an app added later without editing the script.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .test_import_rules import ROOT, SCRIPT, check

APPS = {
    "memory_server": "memory-server",
    "aggregate_server": "aggregate-server",
}


def _workspace(root: Path, apps: dict[str, str] = APPS) -> Path:
    """Two libraries and the given apps (``package: project name``), each importing nothing."""
    for library in ("memory_tools", "scraper_mcp"):
        package = root / "packages" / library / "src" / library
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("", encoding="utf-8")
    for package, project in apps.items():
        app = root / "apps" / package
        (app / "src" / package).mkdir(parents=True)
        (app / "src" / package / "__init__.py").write_text("", encoding="utf-8")
        _pyproject(app, project, ["memory-tools"])
    return root


def _pyproject(directory: Path, name: str, dependencies: list[str]) -> None:
    listed = ", ".join(f'"{d}"' for d in dependencies)
    (directory / "pyproject.toml").write_text(
        f'[project]\nname = "{name}"\ndependencies = [{listed}]\n', encoding="utf-8"
    )


def _module(root: Path, package_dir: str, source: str) -> None:
    (root / package_dir / "module.py").write_text(textwrap.dedent(source), encoding="utf-8")


AGGREGATE = "apps/aggregate_server/src/aggregate_server"
MEMORY_SERVER = "apps/memory_server/src/memory_server"


@pytest.mark.parametrize(
    "source",
    [
        "from memory_server.bootstrap import running\n",
        "import memory_server\n",
        "import memory_server.links as links\n",
        "def serve():\n    from memory_server.cli import run_command\n    return run_command\n",
    ],
    ids=["from-submodule", "package", "aliased-submodule", "in-a-function"],
)
def test_an_app_importing_another_app_is_refused(tmp_path: Path, source: str) -> None:
    root = _workspace(tmp_path)
    _module(root, AGGREGATE, source)
    found = check.violations(root)
    assert len(found) == 1
    assert found[0].startswith(f"{AGGREGATE}/module.py:")
    assert "imports memory_server" in found[0] and "apps only wire libraries" in found[0]


def test_the_rule_holds_both_ways_and_for_an_app_added_later(tmp_path: Path) -> None:
    root = _workspace(tmp_path, {**APPS, "web_app": "web-app"})
    _module(root, MEMORY_SERVER, "import aggregate_server\n")
    _module(root, "apps/web_app/src/web_app", "from memory_server import cli\n")
    found = check.violations(root)
    assert [line.split(":")[0] for line in found] == [
        f"{MEMORY_SERVER}/module.py",
        "apps/web_app/src/web_app/module.py",
    ]


def test_a_library_importing_an_app_is_refused(tmp_path: Path) -> None:
    root = _workspace(tmp_path)
    _module(root, "packages/scraper_mcp/src/scraper_mcp", "from aggregate_server import main\n")
    found = check.violations(root)
    assert len(found) == 1
    assert "imports aggregate_server (a library may not depend on an app)" in found[0]


@pytest.mark.parametrize(
    "source",
    [
        "from memory_tools.serving import serve_http\n",
        "from aggregate_server.cli import main\n",  # itself
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import memory_server\n",
        "import memory_server_extras\n",  # another distribution sharing a prefix
    ],
    ids=["a-library", "itself", "type-checking", "prefix-only"],
)
def test_what_an_app_may_import(tmp_path: Path, source: str) -> None:
    root = _workspace(tmp_path)
    _module(root, AGGREGATE, source)
    assert check.violations(root) == []


@pytest.mark.parametrize(
    ("where", "requirement", "reason"),
    [
        ("apps/aggregate_server", "memory-server", "apps only wire libraries"),
        ("apps/aggregate_server", "Memory_Server>=0.1 ; python_version >= '3.11'", "apps only"),
        ("packages/scraper_mcp", "aggregate-server", "a library may not depend on an app"),
    ],
    ids=["app-on-app", "spelled-otherwise", "library-on-app"],
)
def test_declaring_an_app_as_a_dependency_is_refused(
    tmp_path: Path, where: str, requirement: str, reason: str
) -> None:
    root = _workspace(tmp_path)
    _pyproject(root / where, where.rsplit("/", 1)[1].replace("_", "-"), [requirement])
    found = check.violations(root)
    assert len(found) == 1
    assert found[0].startswith(f"{where}/pyproject.toml: depends on ")
    assert reason in found[0]


def test_the_script_names_an_app_importing_another_app(tmp_path: Path) -> None:
    root = _workspace(tmp_path)
    _module(root, AGGREGATE, '"""Doc."""\n\nfrom memory_server.app import serve_http\n')
    result = subprocess.run(
        [sys.executable, str(SCRIPT), str(root)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 1
    assert f"{AGGREGATE}/module.py:3: imports memory_server.app" in result.stdout


def test_the_apps_of_this_repository_are_found() -> None:
    # Without them the rules above would hold vacuously.
    assert set(check.apps(ROOT)) == set(APPS)
