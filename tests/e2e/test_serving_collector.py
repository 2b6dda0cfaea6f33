"""A server tunes its garbage collector once it has built what it serves, before any request:
what it built is frozen out of the collector's walks, and young collections are rarer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from memory_db.garbage_collection import SERVING_YOUNG_THRESHOLD
from memory_tools.testing.keys import new_key as make_key

from .test_processes import _env

# Runs `serve` with the serving loop replaced by a probe of the collector at the moment the
# first request could arrive; the command then ends, as a server that was stopped.
PROBE = (
    "import gc, json, sys\n"
    "import memory_server\n"
    "from fastmcp import FastMCP\n"
    "from memory_tools.serving import app\n"
    "seen = []\n"
    "async def serving(server, *args, **kwargs):\n"
    # The server built is frozen: in no generation the collector walks.
    "    walked = any(o is server for o in gc.get_objects())\n"
    "    seen.append([gc.get_threshold()[0], walked, gc.isenabled()])\n"
    "app.run_http = serving\n"
    "FastMCP.run_stdio_async = serving\n"
    "status = memory_server.main(['serve', '--transport', sys.argv[1], '--port', '0'])\n"
    "print(json.dumps([status, seen]))\n"
)


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_a_server_tunes_its_collector_before_its_first_request(
    tmp_path: Path, database_url: str, transport: str
) -> None:
    env = _env(tmp_path, MEMORY_DATABASE_URL=database_url)
    env["MEMORY_API_KEY"] = make_key(env, "ann@example.com")  # what stdio serves as
    done = subprocess.run(
        [sys.executable, "-c", PROBE, transport],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    status, seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert status == 0
    assert seen == [[SERVING_YOUNG_THRESHOLD, False, True]]
