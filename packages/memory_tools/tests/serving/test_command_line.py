"""``CommandLine.main``: how a declared command is run, apart from any app.

Each case runs a small command line in its own process, as an app's entry point runs:
``run_command`` installs a SIGTERM handler and configures logging, which a test process must
not inherit. The apps' own commands are covered by their tests (``apps/*/tests``) and by
``tests/source/test_command_declarations.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

# A command line of three commands: `status` returns its exit status without an event loop,
# `refuse` is refused by its check before anything opens, `checked` has a usage check.
PROBE = textwrap.dedent(
    """
    import json, sys
    from memory_tools.errors import InvalidInputFailure
    from memory_tools.serving.subcommands import DATABASE, SETTINGS, CommandLine, Subcommand

    ran = []

    def refuse(args):
        raise InvalidInputFailure("nothing to do")

    async def never(opened, args):
        ran.append("opened and ran")

    def status(settings, args):
        ran.append("status")
        return 3

    def arguments(parser):
        parser.add_argument("--level", type=int, default=1)

    COMMANDS = (
        Subcommand(name="status", help="exit 3", opens=SETTINGS, run=status),
        Subcommand(name="refuse", help="refused", opens=DATABASE, run=never, check=refuse),
        Subcommand(
            name="checked",
            help="a usage check",
            opens=SETTINGS,
            run=status,
            arguments=arguments,
            usage=lambda args: None if args.level < 5 else "--level: at most 4",
        ),
    )
    status_code = CommandLine("probe", "A probe.", COMMANDS).main(sys.argv[1:])
    print(json.dumps([status_code, ran]), file=sys.stderr)
    """
)


def run(tmp_path: Path, *argv: str) -> tuple[int, list[str], str]:
    """The command line's exit status, what ran, and the rest of stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMORY_", "ASSET_"))}
    # Unreachable on purpose: a command that opened the database would fail differently.
    env["MEMORY_DATABASE_URL"] = "postgresql+asyncpg://nobody@127.0.0.1:9/none"
    env["MEMORY_DATA_DIR"] = str(tmp_path / "data")
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    *rest, last = done.stderr.strip().splitlines()
    status, ran = json.loads(last)
    return status, ran, "\n".join(rest)


def test_a_command_that_opens_nothing_may_return_its_status(tmp_path: Path) -> None:
    assert run(tmp_path, "status")[:2] == (3, ["status"])


def test_a_check_refuses_before_anything_is_opened(tmp_path: Path) -> None:
    status, ran, stderr = run(tmp_path, "refuse")
    assert (status, ran) == (1, [])
    assert stderr == "error: invalid_input: nothing to do"


def test_a_usage_problem_is_a_usage_error_and_runs_nothing(tmp_path: Path) -> None:
    assert run(tmp_path, "checked", "--level", "4")[:2] == (3, ["status"])
    status, ran, stderr = run(tmp_path, "checked", "--level", "5")
    assert (status, ran) == (2, [])
    assert stderr == "probe: error: --level: at most 4"
