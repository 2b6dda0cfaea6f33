"""Every benchmark command the docs show starts, and knows the flags the docs give it.

An operator copies ``python benchmarks/<name>.py --flag ...`` from ``docs/``; each such script
must answer ``--help`` (argparse formats every help string there, so a stray ``%`` fails it)
and list each flag the docs pass it. Running ``--help`` starts no database and no server.

Every script runs in one Python process (``_HELP_ALL``), each as ``python benchmarks/<name>.py
--help`` would run it: as ``__main__`` in a namespace of its own, its folder first on
``sys.path``. A process per script paid the interpreter's start and the shared imports (numpy,
SQLAlchemy, the packages) eleven times: 11.4 s of a test run.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMAND = re.compile(r"python benchmarks/([a-z_]+\.py)((?: --[a-z][a-z-]*)*)")
# Runs each script named in argv with --help; prints {script: [exit status, stdout, error]}.
_HELP_ALL = """
import contextlib, io, json, runpy, sys, traceback
answers = {}
for path in sys.argv[1:]:
    sys.argv = [path, "--help"]
    sys.path.insert(0, path.rsplit("/", 1)[0])
    out = io.StringIO()
    status, error = None, ""
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(path, run_name="__main__")
    except SystemExit as exit_:
        status = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except BaseException:
        error = traceback.format_exc()
    finally:
        sys.path.pop(0)
    answers[path] = [status, out.getvalue(), error]
print(json.dumps(answers))
"""


def _documented() -> dict[str, set[str]]:
    flags: dict[str, set[str]] = defaultdict(set)
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for script, given in COMMAND.findall(doc.read_text(encoding="utf-8")):
            flags[script].update(given.split())
    return flags


def test_every_documented_benchmark_answers_help_with_its_documented_flags() -> None:
    documented = _documented()
    assert documented, "the docs show no benchmark command: the pattern is stale"
    paths = {script: ROOT / "benchmarks" / script for script in documented}
    for script, path in paths.items():
        assert path.is_file(), f"docs name benchmarks/{script}, which does not exist"
    done = subprocess.run(
        [sys.executable, "-c", _HELP_ALL, *(str(path) for path in paths.values())],
        capture_output=True,
        text=True,
        # Generous: eleven scripts' imports take seconds; a loaded machine may take ten times it.
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    answers = json.loads(done.stdout.splitlines()[-1])
    for script, flags in sorted(documented.items()):
        status, out, error = answers[str(paths[script])]
        # argparse ends --help with exit status 0; a script that returns without exiting did
        # not answer --help.
        assert status == 0, f"{script} --help: status {status} {error[-400:]}"
        for flag in flags:
            assert re.search(rf"{re.escape(flag)}\b", out), f"{script} lacks {flag}"
