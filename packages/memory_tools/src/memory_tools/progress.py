"""Progress of long work, reported to whoever asked for it.

A workflow that takes a while (a save by URL, a recursive folder deletion) takes a
:class:`Progress` and calls it at each step; it never knows who listens. The MCP tools pass one
that sends MCP progress notifications (a no-op when the client sent no progress token); every
other caller passes :func:`no_progress`. So the workflows do not depend on fastmcp.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

# done, total, detail: what an operator command's progress bar hears (backup, export, reindex,
# model downloads run in the command's own process, synchronously, counting whole items).
ProgressCallback = Callable[[int, int, str], None]


class Progress(Protocol):
    """Report that ``done`` of ``total`` steps are done, with a short message for people.

    Implementations must not fail the work: a report that cannot be delivered is dropped.
    """

    async def __call__(self, done: float, total: float | None, message: str) -> None:
        """Report one step."""
        ...


async def no_progress(done: float, total: float | None, message: str) -> None:
    """Report nothing: for callers that did not ask for progress."""


def no_progress_bar(done: int, total: int, detail: str = "") -> None:
    """Show nothing: for operator tasks run without a progress bar."""
    del done, total, detail


def every(total: int, reports: int = 50) -> int:
    """Report every how many items of ``total``, so a long run sends about ``reports``."""
    return max(1, total // reports)


__all__ = ["Progress", "ProgressCallback", "every", "no_progress", "no_progress_bar"]
