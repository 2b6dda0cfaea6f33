"""Operator commands start without loading what only a server or another command needs.

``memory-server admin ...`` and ``migrate`` import ``memory_server.cli``, which composes
``memory_tools.serving``; fastmcp, starlette and uvicorn load only when a server starts
(measured: about 0.7 s of a command's 2.7 s start-up on 2 cores). Beyond the HTTP stack, an
`admin` command against a running server's database loads no embedder (numpy, onnxruntime,
httpx), no image code (pyvips, Pillow), no browser (playwright), no worker and no alembic: they
were most of its start-up (docs/performance.md#operator-commands). These tests check which
modules a real command process holds, not how long it took.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HTTP_STACK = ("fastmcp", "mcp", "starlette", "uvicorn")
# What `admin` does not use, and what it used to import (directly or through package inits).
NOT_FOR_ADMIN = (
    *HTTP_STACK,
    "onnxruntime",
    "pyvips",
    "playwright",
    "numpy",
    "PIL",
    "httpx",
    "alembic",
    "memory_tools.jobs.worker",
    "memory_tools.ingest",
    "memory_db.embedding.factory",
    "memory_db.vectors",
)
# Runs a command as `memory-server` does, then names what of NOT_FOR_ADMIN it imported.
_PROBE = """
import json, sys
from memory_server.cli import main
status = main(sys.argv[2:])
loaded = [name for name in json.loads(sys.argv[1]) if name in sys.modules]
print(json.dumps({"status": status, "loaded": loaded}), file=sys.stderr)
"""


def test_the_cli_imports_no_http_stack() -> None:
    probe = (
        "import json, sys, memory_server.cli; "
        f"print(json.dumps([m for m in {HTTP_STACK!r} if m in sys.modules]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(done.stdout) == []


def test_building_the_http_server_loads_it() -> None:
    # The probe above can fail: the same probe sees the stack once a server is built.
    probe = (
        "import json, sys, memory_server.cli; from memory_tools.serving import build_http_server; "
        f"print(json.dumps([m for m in {HTTP_STACK!r} if m in sys.modules]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(done.stdout) == list(HTTP_STACK)


def loaded_by(env: dict[str, str], *argv: str) -> list[str]:
    """Which of ``NOT_FOR_ADMIN`` the command ``argv`` imported, run as a real process."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(NOT_FOR_ADMIN), *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,  # generous: a loaded machine; the command itself takes about a second
        check=False,
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert report["status"] == 0, done.stderr
    return report["loaded"]


def test_an_admin_command_against_a_database_loads_only_what_it_runs(
    database_url: str, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASSET_", "MEMORY_"))}
    env.update(MEMORY_DATA_DIR=str(tmp_path / "data"), MEMORY_DATABASE_URL=database_url)
    assert loaded_by(env, "admin", "create-identity", "--owner", "ann@example.com") == []
    assert loaded_by(env, "admin", "list-keys", "--owner", "ann@example.com") == []
    # ... while the command that needs them still gets them: the probe can fail.
    assert "httpx" in loaded_by(env, "models", "list", "--json")


def test_a_command_starts_without_the_collector_and_runs_with_it() -> None:
    # Importing the package pauses the collector only for its own imports (a library import
    # must leave it on); a command's main pauses it for its start (parsing, the usage check
    # that loads the tools) and freezes what it built; the command itself runs with it.
    probe = (
        "import gc, json, sys\n"
        "seen = []\n"
        "def hook(event, args):\n"
        "    if event == 'import' and args[0] == 'memory_server.cli':\n"
        "        seen.append(('import', gc.isenabled()))\n"
        "sys.addaudithook(hook)\n"
        "import memory_server\n"
        "seen.append(('imported', gc.isenabled()))\n"
        "from memory_tools.serving import subcommands\n"
        "declared = subcommands.declared\n"
        "subcommands.declared = lambda a: seen.append(('parsed', gc.isenabled())) or declared(a)\n"
        "subcommands.run_command = lambda *a, **k: seen.append(('runs', gc.isenabled())) or 0\n"
        "memory_server.main(['admin', 'list-identities'])\n"
        "print(json.dumps([seen, gc.get_freeze_count() > 0]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(done.stdout) == [
        [["import", False], ["imported", True], ["parsed", False], ["runs", True]],
        True,
    ]
