"""Background CPU work at a lower priority than requests (``MEMORY_WORKER_NICE``).

OCR (about 0.3 s of Tesseract CPU per screenshot), embedding batches and their image decodes
run beside the searches of the same server process. On a 2-core machine they compete with the
searches for the CPU; the kernel should prefer the searches. Linux keeps a nice value per
thread, and a process started from a thread inherits that thread's, so:

- :func:`background_priority` marks the current task and the tasks it starts as background
  work (the worker does, for its whole run);
- :func:`run_cpu` runs a blocking function in a worker thread: for background work in a
  thread of a pool whose threads were given the background nice value when they started
  (never raised again: an unprivileged process cannot), otherwise in anyio's ordinary pool;
- a subprocess started in such a thread (the ``tesseract`` of an OCR job) inherits the value.

What this does not cover: libvips runs image operations in worker threads of its own, at the
priority of the thread that first started them (a save's, usually); code on the event loop
itself (parsing results, JSON, SQLAlchemy) cannot be deprioritised per task, and the worker's
PostgreSQL statements run in the server's backends at their priority. The process as a whole
is not niced either: it may be the one that starts or restarts the embedded PostgreSQL, which
would inherit the value.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import threading
from collections.abc import Callable, Generator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread

from memory_db.logs import get_logger

log = get_logger(__name__)

T = TypeVar("T")

_BACKGROUND_NICE: contextvars.ContextVar[int] = contextvars.ContextVar(
    "memory_background_nice", default=0
)
# Threads of the background pool: enough for a worker's slots (2 by default) and an OCR job.
BACKGROUND_THREADS = 4


@contextlib.contextmanager
def background_priority(nice: int) -> Generator[None]:
    """Within the block (and in the tasks started from it), :func:`run_cpu` runs niced."""
    token = _BACKGROUND_NICE.set(max(0, min(nice, 19)))
    try:
        yield
    finally:
        _BACKGROUND_NICE.reset(token)


def current_background_nice() -> int:
    """The nice value :func:`run_cpu` uses here (0: request work, the ordinary pool)."""
    return _BACKGROUND_NICE.get()


def lower_thread_priority(nice: int) -> int:
    """Give the calling thread (not its process) nice value ``nice``; return what it has.

    Only ever raises the value: lowering it again needs a privilege the server lacks.
    """
    tid = threading.get_native_id()
    try:
        current = os.getpriority(os.PRIO_PROCESS, tid)
        if nice > current:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
        return os.getpriority(os.PRIO_PROCESS, tid)
    except OSError:  # a platform without per-thread priorities: the work still runs
        log.warning("background_priority_unavailable", nice=nice, exc_info=True)
        return 0


@functools.cache
def _pool(nice: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(
        max_workers=BACKGROUND_THREADS,
        thread_name_prefix=f"memory-background-nice{nice}",
        initializer=lower_thread_priority,
        initargs=(nice,),
    )


async def run_cpu(func: Callable[[], T]) -> T:
    """Run blocking ``func`` in a worker thread, niced when called for background work.

    Like ``anyio.to_thread.run_sync``: a cancelled caller waits for ``func`` to finish.
    """
    nice = _BACKGROUND_NICE.get()
    if nice <= 0:
        return await anyio.to_thread.run_sync(func)
    done = anyio.Event()
    outcome: list[T] = []
    failure: list[BaseException] = []
    token = anyio.lowlevel.current_token()

    def call() -> None:
        try:
            outcome.append(func())
        except BaseException as exc:  # handed to the caller, as to_thread does
            failure.append(exc)
        finally:
            anyio.from_thread.run_sync(done.set, token=token)

    _pool(nice).submit(call)
    with anyio.CancelScope(shield=True):
        await done.wait()
    if failure:
        raise failure[0]
    return outcome[0]


__all__ = [
    "background_priority",
    "current_background_nice",
    "lower_thread_priority",
    "run_cpu",
]
