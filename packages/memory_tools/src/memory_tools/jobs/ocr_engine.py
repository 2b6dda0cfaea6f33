"""A warm Tesseract: child processes that keep the engine loaded between images (docs/ocr.md).

Starting ``tesseract`` and loading its model costs about 0.2 s of CPU per image, more than
reading a small screenshot. :class:`WarmEngines` keeps Tesseract loaded in child processes
(:mod:`memory_tools.jobs.ocr_child`, through the ``tesserocr`` binding) and hands each read to an
idle one, so what an image costs is the reading. What the process-per-image design gave is
kept:

- **a time limit that holds**: the parent waits for the child's answer until the image's
  deadline, then kills the child (``SIGKILL``) and the read fails with ``ocr_timeout``; the
  next read starts a fresh child;
- **a crash stays in its process**: an engine that dies (a segfault, ``kill -9``, out of
  memory) fails the image it was reading with ``ocr_failed``; the next read starts a fresh one;
- **bounded memory**: a child is retired after :data:`MAX_IMAGES_PER_CHILD` images (and on
  any failure), so whatever the engine keeps growing is given back;
- **the worker's priority**: a child is started from the thread that needs it, a thread of the
  worker's niced pool (``memory_db.priority``), and inherits its nice value as ``tesseract``
  did; an idle child of another nice value than the caller's is retired rather than used.
  Each child runs one OpenMP thread (``OMP_THREAD_LIMIT``).

A child is used by one read at a time; as many children run as reads run at once (the
worker's OCR lane: one, or a few when several workers share a process, as in tests).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memory_db import get_logger

log = get_logger(__name__)

# The child's program (it imports nothing of this package, only the binding).
CHILD_SCRIPT = Path(__file__).with_name("ocr_child.py")
# Images a child reads before it is retired and replaced (memory given back to the system).
MAX_IMAGES_PER_CHILD = 200
# Where Debian, Ubuntu, Fedora and Homebrew install Tesseract's language data; TESSDATA_PREFIX
# (Tesseract's own variable) wins. The binding's wheel carries the engine, not the data.
TESSDATA_DIRS = (
    "/usr/share/tesseract-ocr/5/tessdata",
    "/usr/share/tesseract-ocr/4.00/tessdata",
    "/usr/share/tessdata",
    "/usr/local/share/tessdata",
    "/opt/homebrew/share/tessdata",
)


def _thread_nice() -> int:
    """The calling thread's nice value (Linux keeps one per thread; a child inherits it)."""
    try:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    except OSError:
        return 0


def _process_nice(pid: int) -> int | None:
    try:
        return os.getpriority(os.PRIO_PROCESS, pid)
    except OSError:
        return None


class EngineFailure(Exception):
    """A read the warm engine could not do; ``code`` is the OCR job's failure reason."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def tessdata_dir(directories: Sequence[str] = TESSDATA_DIRS) -> str | None:
    """The directory holding ``eng`` and ``osd`` language data, or ``None``.

    ``TESSDATA_PREFIX`` first, then ``directories``.
    """
    prefix = os.environ.get("TESSDATA_PREFIX")
    candidates = ([prefix] if prefix else []) + list(directories)
    for directory in candidates:
        path = Path(directory)
        if (path / "eng.traineddata").is_file() and (path / "osd.traineddata").is_file():
            return str(path)
    return None


@dataclass
class EngineChild:
    """One running child: its process, what it answered so far, how many images it read."""

    process: subprocess.Popen[bytes]
    version: str
    images: int = 0
    pending: bytes = field(default=b"")

    def ask(self, request: dict[str, Any], deadline: float) -> dict[str, Any]:
        """Send one request and wait for its answer until ``deadline`` (monotonic)."""
        stdin = self.process.stdin
        if stdin is None:  # started with a pipe: never
            raise EngineFailure("ocr_failed", "the OCR engine has no input")
        try:
            stdin.write(json.dumps(request).encode() + b"\n")
            stdin.flush()
        except OSError:
            raise self._ended() from None
        answer = self.answer(deadline)
        self.images += request.get("op") == "words"
        return answer

    def answer(self, deadline: float) -> dict[str, Any]:
        """The child's next answer line; :class:`EngineFailure` if it ends or overruns."""
        stdout = self.process.stdout
        if stdout is None:
            raise EngineFailure("ocr_failed", "the OCR engine has no output")
        fd = stdout.fileno()
        while b"\n" not in self.pending:
            left = deadline - time.monotonic()
            if left <= 0:
                raise EngineFailure("ocr_timeout", "")
            readable, _, _ = select.select([fd], [], [], left)
            if not readable:
                continue  # the deadline is checked at the top
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise self._ended()
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        try:
            answer: Any = json.loads(line)
        except ValueError:
            raise EngineFailure("ocr_failed", "the OCR engine answered garbage") from None
        if not isinstance(answer, dict):
            raise EngineFailure("ocr_failed", "the OCR engine answered garbage")
        return dict[str, Any](answer)

    def _ended(self) -> EngineFailure:
        status = self.process.wait()
        how = f"signal {-status}" if status < 0 else f"status {status}"
        return EngineFailure("ocr_failed", f"the OCR engine stopped ({how})")

    def stop(self, *, kill: bool) -> None:
        """End the child: killed at once, or asked to finish (stdin closed) and waited for."""
        if kill:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGKILL)
        else:
            with contextlib.suppress(OSError):
                if self.process.stdin is not None:
                    self.process.stdin.close()
        try:
            self.process.wait(timeout=None if kill else 5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            with contextlib.suppress(OSError):
                if pipe is not None:
                    pipe.close()


class WarmEngines:
    """Idle children waiting for the next image, started when none is idle (thread-safe).

    :meth:`session` is blocking: use it from a worker thread. ``max_images``: images a child
    reads before it is retired; ``tessdata_dirs``: where to look for the language data after
    ``TESSDATA_PREFIX``.
    """

    def __init__(
        self,
        *,
        max_images: int = MAX_IMAGES_PER_CHILD,
        command: Sequence[str] | None = None,
        tessdata_dirs: Sequence[str] = TESSDATA_DIRS,
    ) -> None:
        self.max_images = max_images
        # The child's command line, the language data directory appended (tests give their own).
        # The module's file, not ``-m memory_tools.jobs.ocr_child``: importing the package would
        # load
        # the whole server into every child (about 90 MB and 0.4 s of CPU more per start).
        self.command = list(command or [sys.executable, str(CHILD_SCRIPT)])
        self.tessdata_dirs = tuple(tessdata_dirs)
        self._idle: list[EngineChild] = []
        self._lock = threading.Lock()
        self.started = 0  # children started so far (tests and the docs' figures read it)
        # The engine's version as the last child started reported it: what a reading the
        # engine never sees (an image that cannot hold text) records, without a child.
        self.version: str | None = None

    @contextlib.contextmanager
    def session(self, deadline: float) -> Generator[EngineChild]:
        """A child to read one image with (its requests before ``deadline``, monotonic).

        Returned to the idle ones after a read; killed, never handed out again, when a request
        overran or the child died (:class:`EngineFailure`: ``ocr_timeout``, ``ocr_failed``) or
        anything else went wrong. ``ocr_unavailable``: no binding or no language data.
        """
        child = self._checkout(deadline)
        try:
            yield child
        except BaseException:
            child.stop(kill=True)
            raise
        self._checkin(child)

    def pids(self) -> list[int]:
        """The process ids of the idle children."""
        with self._lock:
            return [child.process.pid for child in self._idle]

    def close(self) -> None:
        """End every idle child (a child reading now ends when its read does)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for child in idle:
            child.stop(kill=False)

    def _checkout(self, deadline: float) -> EngineChild:
        nice = _thread_nice()
        while True:
            with self._lock:
                if not self._idle:
                    break
                child = self._idle.pop()
            if child.process.poll() is not None:
                child.stop(kill=True)  # died while idle (killed from outside)
            elif _process_nice(child.process.pid) != nice:
                # Started for work of another priority: a child runs at its caller's.
                child.stop(kill=False)
            else:
                return child
        return self._start(deadline)

    def _checkin(self, child: EngineChild) -> None:
        if child.images >= self.max_images:
            child.stop(kill=False)  # retired: memory back to the system
            log.info("ocr_engine_recycled", pid=child.process.pid, images=child.images)
            return
        with self._lock:
            self._idle.append(child)

    def _start(self, deadline: float) -> EngineChild:
        tessdata = tessdata_dir(self.tessdata_dirs)
        if tessdata is None:
            raise EngineFailure(
                "ocr_unavailable",
                "Tesseract's language data is not installed (Debian packages "
                "tesseract-ocr-eng and tesseract-ocr-osd)",
            )
        # One OpenMP thread unless the operator said otherwise (see memory_tools.jobs.ocr).
        env = {**os.environ, "OMP_THREAD_LIMIT": os.environ.get("OMP_THREAD_LIMIT", "1")}
        process = subprocess.Popen(  # noqa: S603 (this interpreter, our own module)
            [*self.command, tessdata],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # Tesseract's warnings; the answers say what failed
            env=env,
            close_fds=True,
        )
        child = EngineChild(process=process, version="")
        try:
            hello = child.answer(deadline)
        except EngineFailure:
            child.stop(kill=True)
            raise
        if not hello.get("ok"):
            child.stop(kill=True)
            raise EngineFailure(
                "ocr_unavailable", f"the OCR engine could not start ({hello.get('error')})"
            )
        child.version = str(hello.get("version", ""))
        self.version = child.version
        self.started += 1
        log.info("ocr_engine_started", pid=process.pid, engine_version=child.version)
        return child


__all__ = [
    "MAX_IMAGES_PER_CHILD",
    "EngineChild",
    "EngineFailure",
    "WarmEngines",
    "tessdata_dir",
]
