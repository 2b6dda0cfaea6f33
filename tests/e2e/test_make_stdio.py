"""`make stdio` as an MCP client starts it: every line on its stdout is JSON-RPC.

The client reads the server's stdout as the protocol from its first byte. make's echo of a
recipe, the install step's output or uv's messages there were parse errors before any answer.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import threading
from pathlib import Path
from typing import IO, Any

import pytest

from memory_tools.testing.keys import new_key

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
# Generous: `make stdio` first runs the install step (`uv sync`, which recompiles bytecode)
# and the server starts the embedded PostgreSQL, on a shared and loaded machine.
ANSWER_SECONDS = 300


def _uv() -> str:
    """The uv the Makefile would use: on PATH, or the one `make uv` installs into the checkout."""
    found = shutil.which("uv") or str(ROOT / ".cache" / "tools" / "bin" / "uv")
    if not Path(found).exists():
        pytest.fail("no uv: `make test` installs it (make uv); put it on PATH to run this test")
    return found


def _client_env(tmp_path: Path) -> dict[str, str]:
    # As a desktop client starts it: not inside another make (MAKELEVEL would make make print
    # "Entering directory"), no settings but the data directory.
    dropped = ("ASSET_", "MEMORY_", "JINA_", "MAKE", "MFLAGS")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    env.update(MEMORY_DATA_DIR=str(tmp_path / "data"), ASSET_OCR="off")
    return env


def _lines(stream: IO[str], into: queue.Queue[str | None]) -> None:
    for line in stream:
        into.put(line)
    into.put(None)


def _answer(lines: queue.Queue[str | None], seen: list[str], request_id: int) -> dict[str, Any]:
    """Read stdout until the answer to ``request_id``; every line read is kept in ``seen``."""
    while True:
        line = lines.get(timeout=ANSWER_SECONDS)
        if line is None:
            pytest.fail(f"stdout closed before the answer to {request_id}: {seen}")
        seen.append(line)
        try:
            message = json.loads(line)
        except ValueError:  # what a client's JSON-RPC reader fails on
            pytest.fail(f"not JSON-RPC on stdout: {line!r}")
        if message.get("id") == request_id:
            return message


def _send(stdin: IO[str], message: dict[str, Any]) -> None:
    stdin.write(json.dumps(message) + "\n")
    stdin.flush()


@pytest.mark.usefixtures("embedded_data_dir")  # a migrated database in tmp_path/data
def test_make_stdio_writes_only_json_rpc_to_stdout(tmp_path: Path) -> None:
    env = _client_env(tmp_path)
    # The person and key in-process: `make stdio` is the subject, not `admin create-key`.
    env["MEMORY_API_KEY"] = new_key(env, "stdio@example.com", "read,write")
    process = subprocess.Popen(
        ["make", "stdio", f"UV={_uv()}"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdin is not None and process.stdout is not None
    assert process.stderr is not None
    lines: queue.Queue[str | None] = queue.Queue()
    errors: queue.Queue[str | None] = queue.Queue()
    readers = [
        threading.Thread(target=_lines, args=(process.stdout, lines), daemon=True),
        threading.Thread(target=_lines, args=(process.stderr, errors), daemon=True),
    ]
    for reader in readers:
        reader.start()
    seen: list[str] = []
    try:
        _send(
            process.stdin,
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "make-stdio-test", "version": "1"},
                },
            },
        )
        initialized = _answer(lines, seen, 1)
        assert initialized["result"]["serverInfo"]["name"] == "image-memory"
        _send(process.stdin, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        _send(process.stdin, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        listed = _answer(lines, seen, 2)
        assert "image_asset_search" in {tool["name"] for tool in listed["result"]["tools"]}
        process.stdin.close()  # the client goes away: the server ends
        assert process.wait(timeout=ANSWER_SECONDS) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for reader in readers:
            reader.join(timeout=ANSWER_SECONDS)
        process.stdout.close()
        process.stderr.close()
    while (line := lines.get(timeout=ANSWER_SECONDS)) is not None:
        seen.append(line)
    assert seen, "nothing on stdout"
    assert all(json.loads(line)["jsonrpc"] == "2.0" for line in seen), seen
    # ... and the install step did run, on stderr.
    stderr = "".join(iter(lambda: errors.get(timeout=ANSWER_SECONDS), None))
    assert "sync --frozen --all-packages --no-dev --inexact" in stderr
