"""Wait for a server process a test started to answer ``/healthz`` on 127.0.0.1."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import httpx


class ServerDidNotStart(RuntimeError):
    """The server exited, or did not answer ``/healthz`` in time; the message ends with its log."""


def wait_until_healthy(
    process: subprocess.Popen[Any], url: str, *, seconds: float, log: Path | None = None
) -> None:
    """Return once ``{url}/healthz`` answers 200.

    Raises :class:`ServerDidNotStart` as soon as ``process`` exits, or after ``seconds`` (a
    bound for a start on a loaded machine: a healthy server answers long before), with the end of
    ``log`` when one is given. The caller stops the process, whatever the outcome.
    """
    deadline = time.monotonic() + seconds
    while True:
        if process.poll() is not None:
            raise ServerDidNotStart(f"the server exited with {process.returncode}{_tail(log)}")
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass  # not listening yet
        if time.monotonic() >= deadline:
            raise ServerDidNotStart(f"the server did not answer within {seconds:g} s{_tail(log)}")
        time.sleep(0.2)


def _tail(log: Path | None) -> str:
    return "" if log is None else ":\n" + log.read_text(errors="replace")[-3000:]
