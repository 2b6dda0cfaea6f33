"""A bounded per-process cache of search-query embeddings (docs/embeddings.md#query-cache).

An agent often repeats a search; with a paid provider each repetition costs a request. A query
vector depends only on the embedder (provider, model, dimensions), the task and the query's
content, so the key is exactly that: the identity of the active index's embedder, the task,
and the SHA-256 of the query's text and of its image's (sanitised preview) bytes. The caller is
not part of the key and nothing about the caller is stored: two callers asking the same text
get the same vector, which is what the provider would have answered each of them.

Bounded by ``ASSET_QUERY_CACHE_SIZE`` entries (least recently used evicted first) and by
``ASSET_QUERY_CACHE_TTL_SECONDS``; either at 0 turns it off. A switch of the alias to an index of
another embedder changes the key, so a vector of the old model is never used again.
"""

from __future__ import annotations

import hashlib
import time
from array import array
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from memory_db.embedding import Task


@dataclass(frozen=True, slots=True)
class QueryKey:
    """What a query vector depends on: never who asked."""

    embedder: str  # the index's embedder identity, provider/model/dimensions
    task: Task
    dimensions: int
    text_sha256: str
    image_sha256: str

    @classmethod
    def of(
        cls, embedder: str, task: Task, dimensions: int, text: str | None, image: bytes | None
    ) -> QueryKey:
        """The key of a query of ``text`` and/or ``image`` (hashed: bounded memory per entry)."""
        return cls(
            embedder,
            task,
            dimensions,
            "" if text is None else hashlib.sha256(text.encode("utf-8")).hexdigest(),
            "" if image is None else hashlib.sha256(image).hexdigest(),
        )


class QueryEmbeddingCache:
    """At most ``size`` vectors, each kept ``ttl_seconds``; least recently used evicted first.

    Used from one event loop (no awaits inside), so it needs no lock.
    """

    def __init__(
        self, size: int, ttl_seconds: float, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.size = size
        self.ttl_seconds = ttl_seconds
        self._clock = clock
        self._entries: OrderedDict[QueryKey, tuple[float, array[float]]] = OrderedDict()

    @property
    def enabled(self) -> bool:
        """Whether anything is ever kept."""
        return self.size > 0 and self.ttl_seconds > 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: QueryKey) -> list[float] | None:
        """The vector cached for ``key`` if it has not expired."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        expires, vector = entry
        if self._clock() >= expires:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return vector.tolist()

    def put(self, key: QueryKey, vector: Sequence[float]) -> None:
        """Keep ``vector`` for ``key``, evicting the least recently used beyond ``size``."""
        if not self.enabled:
            return
        self._entries[key] = (self._clock() + self.ttl_seconds, array("d", vector))
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)
