"""What each key did, added up in this process and written at most once a minute.

Every call a key makes (a tool call, a web page's call, an HTTP route) counts one call; a search
counts one search too, and a save that made an asset one save (``mem_api_keys.calls``/
``searches``/``saves``, revisions 0023 and 0025). Writing a counter on every call would put a
write, and a lock on the key's row, into every read (and make a save wait on a pause's lock);
instead each process adds them up here and the call runner writes what has gathered, in one
statement, once the oldest count is :data:`FLUSH_SECONDS` old. So the stored counts lag by up
to a minute (the Keys page adds what its own process holds); a server that stops writes what
it holds (:meth:`take_all`), and one that dies loses at most that minute's counts (they are
counts, not a ledger). Saves were counted from the assets at read time until revision 0025:
130 ms for a busy key's 85,713 assets on rows not yet vacuumed.
"""

from __future__ import annotations

import time
from collections.abc import Callable

# How old the oldest gathered count may grow before a call writes them all.
FLUSH_SECONDS = 60.0


class KeyActivity:
    """Calls, searches and saves per key id, gathered until :meth:`take_due` hands them out."""

    def __init__(
        self,
        flush_seconds: float = FLUSH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.flush_seconds = flush_seconds
        self._clock = clock
        self._counts: dict[str, tuple[int, int, int]] = {}
        self._since: float | None = None  # when the oldest gathered count was noted

    def note(self, key_id: str, *, calls: int = 0, searches: int = 0, saves: int = 0) -> None:
        """Count ``calls``, ``searches`` and ``saves`` made with ``key_id``."""
        before_calls, before_searches, before_saves = self._counts.get(key_id, (0, 0, 0))
        self._counts[key_id] = (
            before_calls + calls,
            before_searches + searches,
            before_saves + saves,
        )
        if self._since is None:
            self._since = self._clock()

    def pending(self, key_id: str) -> tuple[int, int, int]:
        """``(calls, searches, saves)`` of ``key_id`` gathered here and not yet written."""
        return self._counts.get(key_id, (0, 0, 0))

    def take_due(self) -> dict[str, tuple[int, int, int]]:
        """Everything gathered, if the oldest count is old enough; else nothing.

        What is taken is no longer held here: a writer that fails gives it back (:meth:`restore`).
        """
        if self._since is None or self._clock() - self._since < self.flush_seconds:
            return {}
        taken, self._counts, self._since = self._counts, {}, None
        return taken

    def take_all(self) -> dict[str, tuple[int, int, int]]:
        """Everything gathered, due or not (a process that stops writes what it holds)."""
        taken, self._counts, self._since = self._counts, {}, None
        return taken

    def restore(self, taken: dict[str, tuple[int, int, int]]) -> None:
        """Give back counts :meth:`take_due` handed out that could not be written."""
        for key_id, (calls, searches, saves) in taken.items():
            self.note(key_id, calls=calls, searches=searches, saves=saves)
