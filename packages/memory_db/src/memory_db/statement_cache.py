"""Statements built once per shape and run with each call's values (issue 31).

Building a large SQLAlchemy statement, and the cache key it is compiled under, cost more CPU
than running it: the search's ranking statement took about 5 ms of a search's 20, the worker's
claim more than a poll of an empty queue. Such a statement is built once for its shape (what
its text depends on) and run with each call's values as parameters.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class StatementCache(Generic[K, V]):
    """At most ``bound`` statements by shape; full, it starts again from empty.

    Shapes are few in a process (the bound only guards against a caller that makes ever more
    of them), so emptying it costs one rebuild each, and there is no order to keep. Used from
    one event loop: no awaits inside, so no lock.
    """

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self._kept: dict[K, V] = {}

    def get(self, shape: K) -> V | None:
        """The statement built for ``shape``, if kept."""
        return self._kept.get(shape)

    def keep(self, shape: K, statement: V) -> V:
        """Keep ``statement`` for ``shape`` (emptied first when full) and return it."""
        if len(self._kept) >= self.bound:
            self._kept.clear()
        self._kept[shape] = statement
        return statement

    def __len__(self) -> int:
        return len(self._kept)
