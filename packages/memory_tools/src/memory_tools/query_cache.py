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

Beside the vectors, :class:`QueryPreviews` keeps the sanitised preview made of a query image,
by the SHA-256 of its bytes as given, within the same bounds and a byte budget: a repeated
query image is not decoded again before its vector is looked up.
"""

from __future__ import annotations

import hashlib
import time
from array import array
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

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


K = TypeVar("K")
V = TypeVar("V")


class _Expiring(Generic[K, V]):
    """At most ``size`` entries, ``max_bytes`` in all, each kept ``ttl_seconds``.

    The least recently used go first. Used from one event loop (no awaits inside), so it needs
    no lock.
    """

    def __init__(
        self,
        size: int,
        ttl_seconds: float,
        *,
        clock: Callable[[], float],
        weigh: Callable[[V], int],
        max_bytes: int | None = None,
    ) -> None:
        self.size = size
        self.ttl_seconds = ttl_seconds
        self.max_bytes = max_bytes
        self._clock = clock
        self._weigh = weigh
        self._bytes = 0
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self.size > 0 and self.ttl_seconds > 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes(self) -> int:
        return self._bytes

    def get(self, key: K) -> V | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        expires, value = entry
        if self._clock() >= expires:
            self._drop(key)
            return None
        self._entries.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        weight = self._weigh(value)
        if not self.enabled or (self.max_bytes is not None and weight > self.max_bytes):
            return
        if key in self._entries:
            self._drop(key)
        self._entries[key] = (self._clock() + self.ttl_seconds, value)
        self._bytes += weight
        while len(self._entries) > self.size or (
            self.max_bytes is not None and self._bytes > self.max_bytes
        ):
            self._drop(next(iter(self._entries)))

    def _drop(self, key: K) -> None:
        _expires, value = self._entries.pop(key)
        self._bytes -= self._weigh(value)


class QueryEmbeddingCache:
    """At most ``size`` vectors, each kept ``ttl_seconds``; least recently used evicted first.

    Used from one event loop (no awaits inside), so it needs no lock.
    """

    def __init__(
        self, size: int, ttl_seconds: float, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._kept: _Expiring[QueryKey, array[float]] = _Expiring(
            size, ttl_seconds, clock=clock, weigh=lambda vector: vector.itemsize * len(vector)
        )

    @property
    def enabled(self) -> bool:
        """Whether anything is ever kept."""
        return self._kept.enabled

    def __len__(self) -> int:
        return len(self._kept)

    def get(self, key: QueryKey) -> list[float] | None:
        """The vector cached for ``key`` if it has not expired."""
        vector = self._kept.get(key)
        return None if vector is None else vector.tolist()

    def put(self, key: QueryKey, vector: Sequence[float]) -> None:
        """Keep ``vector`` for ``key``, evicting the least recently used beyond ``size``."""
        self._kept.put(key, array("d", vector))


# What the previews of query images may hold in all, per process: at the default preview edge
# (2,048 pixels) a WebP preview is up to about 1 MiB, a small query image's a few KiB.
QUERY_PREVIEW_BYTES = 16 * 1024 * 1024


class QueryPreviews:
    """The sanitised previews of query images, by the SHA-256 of the image's bytes as given.

    A repeated query image (inline, uploaded or fetched) is neither decoded nor re-encoded
    again: its bytes were validated when first seen, and the same bytes make the same preview.
    Bounded like the vectors (``ASSET_QUERY_CACHE_SIZE`` entries, ``ASSET_QUERY_CACHE_TTL_SECONDS``,
    either at 0 turns it off) and by :data:`QUERY_PREVIEW_BYTES`. Only a preview that was made
    is kept: an image that was refused is decoded, and refused, again. Nothing about the caller
    is kept, as for the vectors: the preview is the image's, whoever sends it.
    """

    def __init__(
        self,
        size: int,
        ttl_seconds: float,
        *,
        max_bytes: int = QUERY_PREVIEW_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kept: _Expiring[str, bytes] = _Expiring(
            size, ttl_seconds, clock=clock, weigh=len, max_bytes=max_bytes
        )

    def __len__(self) -> int:
        return len(self._kept)

    @property
    def bytes(self) -> int:
        """The bytes of the previews kept."""
        return self._kept.bytes

    def get(self, given_sha256: str) -> bytes | None:
        """The preview made of the image whose bytes hash to ``given_sha256``, if kept."""
        return self._kept.get(given_sha256)

    def put(self, given_sha256: str, preview: bytes) -> None:
        """Keep ``preview`` for the image whose bytes hash to ``given_sha256``."""
        self._kept.put(given_sha256, preview)
