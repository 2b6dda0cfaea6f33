"""Background CPU work runs in niced threads; what they start inherits the value."""

from __future__ import annotations

import os
import subprocess
import threading

import pytest

from memory_db.priority import background_priority, run_cpu


def _thread_nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def _child_nice() -> int:
    # Field 19 of /proc/<pid>/stat is the nice value of the process the thread started.
    out = subprocess.run(["cat", "/proc/self/stat"], capture_output=True, text=True, check=True)
    return int(out.stdout.rsplit(")", 1)[1].split()[16])


BASE = os.getpriority(os.PRIO_PROCESS, 0)  # the suite may itself run under nice
WANTED = min(19, BASE + 5)


async def test_background_work_runs_niced_and_its_children_inherit() -> None:
    with background_priority(WANTED):
        assert await run_cpu(_thread_nice) == WANTED
        assert await run_cpu(_child_nice) == WANTED
    # Request work (no background mark) stays at the process's priority, and so does the
    # loop's own thread.
    assert await run_cpu(_thread_nice) == BASE
    assert await run_cpu(_child_nice) == BASE
    assert _thread_nice() == BASE


async def test_nice_zero_means_the_ordinary_pool() -> None:
    with background_priority(0):
        assert await run_cpu(_thread_nice) == BASE


async def test_a_failure_in_the_niced_thread_reaches_the_caller() -> None:
    def fail() -> int:
        raise ValueError("boom")

    with background_priority(WANTED), pytest.raises(ValueError, match="boom"):
        await run_cpu(fail)
