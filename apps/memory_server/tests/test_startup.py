"""Operator commands start without loading the HTTP stack.

``memory-server admin ...`` and ``migrate`` import ``memory_server.cli``, which composes
``memory_tools.serving``; fastmcp, starlette and uvicorn load only when a server starts
(measured: about 0.7 s of a command's 2.7 s start-up on 2 cores).
"""

from __future__ import annotations

import json
import subprocess
import sys

HTTP_STACK = ("fastmcp", "mcp", "starlette", "uvicorn")


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
