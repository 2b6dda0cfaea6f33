"""Keep log events as plain dicts in a test process instead of rendering them.

A test process that never calls ``configure_logging`` leaves structlog on its default
configuration, whose console renderer prints an event's ``exc_info`` as a rich traceback with
every frame's local variables. During an outage each refused call logs such a warning, and
rendering one costs seconds of CPU (an outage test file spent about 20 s on it). The server
processes the end-to-end tests start configure logging and render plain tracebacks; this is
only for code running inside the test process.
"""

from __future__ import annotations

from collections.abc import Generator
from contextlib import contextmanager

import structlog
from structlog.typing import EventDict


@contextmanager
def log_events_kept() -> Generator[list[EventDict]]:
    """Capture the structlog events logged inside the block, unrendered, and yield them.

    The previous structlog configuration is put back on exit.
    """
    with structlog.testing.capture_logs() as events:
        yield events
