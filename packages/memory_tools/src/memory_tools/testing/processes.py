"""Start a server process for a test and wait until it answers ``/healthz`` on 127.0.0.1."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Generator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx

from memory_tools.testing.mcp_http import free_port


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


@contextmanager
def serving_http(
    command: Sequence[str],
    env: Mapping[str, str],
    *extra: str,
    seconds: float,
    port: int | None = None,
    log: Path | None = None,
) -> Generator[str]:
    """``command serve --transport http`` on 127.0.0.1, yielding its base URL once it is healthy.

    ``extra`` follows the port (``--no-worker``); ``port`` is a free one unless given; the
    process's output goes to ``log`` (else nowhere). ``seconds`` bounds its start
    (:func:`wait_until_healthy`); the process is terminated when the block ends.
    """
    port = free_port() if port is None else port
    url = f"http://127.0.0.1:{port}"
    argv = [*command, "serve", "--transport", "http", "--host", "127.0.0.1", "--port", str(port)]
    with ExitStack() as stack:
        sink = subprocess.DEVNULL if log is None else stack.enter_context(log.open("wb"))
        # A test's own server command, no shell.
        process = subprocess.Popen([*argv, *extra], env=env, stdout=sink, stderr=sink)  # noqa: S603
        try:
            wait_until_healthy(process, url, seconds=seconds, log=log)
            yield url
        finally:
            process.terminate()
            process.wait(timeout=60)


def _tail(log: Path | None) -> str:
    return "" if log is None else ":\n" + log.read_text(errors="replace")[-3000:]
