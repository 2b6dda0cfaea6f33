"""The ``--processes`` supervisor's policy, with small real child processes.

What a ``serve`` child does is covered end to end (``tests/e2e/test_server_processes.py``); here
the children are one-line Python programs, so each rule runs in well under a second.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from memory_db import ConfigurationError
from memory_tools.serving import processes
from memory_tools.serving.processes import Child, ConnectionBudget, Supervisor


def _child(code: str) -> Child:
    return Child("server", [sys.executable, "-c", code], ())


SLEEPER = "import time; time.sleep(60)"


def _gone(pids: list[int]) -> bool:
    return not [pid for pid in pids if psutil.pid_exists(pid)]


def test_a_child_with_invalid_configuration_stops_everything_with_status_2() -> None:
    sleeper = _child(SLEEPER)
    supervisor = Supervisor([sleeper, _child("import time, sys; time.sleep(0.3); sys.exit(2)")])
    assert supervisor.run() == 2
    assert sleeper.process is not None and sleeper.process.returncode == -signal.SIGTERM
    assert len(supervisor.deaths) == 0  # not counted as a crash: nothing was restarted


def test_a_dead_child_is_restarted_until_children_keep_dying(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(processes, "RESTART_LIMIT", 3)
    sleeper = _child(SLEEPER)
    crasher = _child("import sys; sys.exit(1)")
    starts: list[int] = []
    original = Child.start

    def counting(child: Child) -> None:
        original(child)
        if child is crasher:
            assert child.process is not None
            starts.append(child.process.pid)

    monkeypatch.setattr(Child, "start", counting)
    assert Supervisor([sleeper, crasher]).run() == 1
    assert len(starts) == 4  # the first start and three restarts; the fourth death gives up
    assert len(set(starts)) == 4
    assert sleeper.process is not None and sleeper.process.returncode == -signal.SIGTERM


def test_a_killed_child_is_started_again() -> None:
    child = _child(SLEEPER)
    supervisor = Supervisor([child])
    pids: list[int] = []

    def kill_then_stop() -> None:
        while child.process is None:
            time.sleep(0.01)
        first = child.process.pid
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while child.process.pid == first and time.monotonic() < deadline:
            time.sleep(0.01)
        pids.extend([first, child.process.pid])
        os.kill(os.getpid(), signal.SIGTERM)  # the supervisor's handler, not pytest's death

    threading.Thread(target=kill_then_stop).start()
    assert supervisor.run() == 0
    assert pids[0] != pids[1] and _gone(pids)
    assert len(supervisor.deaths) == 1


def test_sigterm_stops_every_child_and_restores_the_handlers() -> None:
    children = [_child(SLEEPER), _child(SLEEPER)]
    supervisor = Supervisor(children)
    before = signal.getsignal(signal.SIGTERM)

    def stop() -> None:
        while any(c.process is None for c in children):
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=stop).start()
    assert supervisor.run() == 0
    assert all(c.process is not None and c.process.returncode == -signal.SIGTERM for c in children)
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_child_that_ignores_sigterm_is_killed_after_the_timeout(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(processes, "STOP_TIMEOUT_SECONDS", 0.5)
    ready = tmp_path / "ready"
    stubborn = _child(
        "import pathlib, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        f"pathlib.Path({str(ready)!r}).touch(); time.sleep(60)"
    )
    supervisor = Supervisor([stubborn])

    def stop() -> None:
        deadline = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=stop).start()
    assert supervisor.run() == 0
    # Its exit reason says the supervisor ended it: left alone it would have exited 0 after
    # its 60 s sleep, so the kill came at the (0.5 s) timeout, not by waiting it out.
    assert stubborn.process is not None and stubborn.process.returncode == -signal.SIGKILL


def test_the_connection_budget_names_the_numbers_when_it_cannot_fit() -> None:
    fits = ConnectionBudget(
        server_processes=8, worker_processes=1, per_process=10, max_connections=100, reserved=3
    )
    fits.check()
    assert (fits.needed, fits.available) == (90, 97)
    too_many = ConnectionBudget(
        server_processes=9, worker_processes=1, per_process=10, max_connections=100, reserved=3
    )
    with pytest.raises(ConfigurationError) as refused:
        too_many.check()
    assert str(refused.value) == (
        "--processes 9: 9 server processes and 1 worker process may open up to 100 database "
        "connections (10 each, from the pool settings), but the database accepts 97 "
        "(max_connections 100 minus 3 reserved): lower --processes or the pool size, "
        "or raise max_connections"
    )
