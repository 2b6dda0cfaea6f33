"""The private object-store contract of §8.2."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class PutResult:
    """What a store reports after storing bytes."""

    key: str
    bytes: int
    etag: str | None = None
    version_id: str | None = None


@dataclass(frozen=True, slots=True)
class HeadResult:
    """What a store knows about a key without reading it."""

    exists: bool
    bytes: int | None = None
    content_type: str | None = None
    checksum_sha256: str | None = None  # lowercase hex
    etag: str | None = None


@dataclass(frozen=True, slots=True)
class SignedPut:
    """A short-lived upload authorisation bound to one key, content type and size."""

    url: str
    method: str
    headers: dict[str, str]
    expires_in: int


@runtime_checkable
class AssetObjectStore(Protocol):
    """Private storage for original and preview bytes; keys come from ``build_object_key``.

    ``put`` refuses bytes that do not hash to ``checksum_sha256`` before anything is stored.
    Stores never make objects public; reads by third parties go through signed, expiring URLs.
    """

    async def put(
        self,
        key: str,
        body: bytes,
        *,
        content_type: str,
        checksum_sha256: str | None = None,
    ) -> PutResult:
        """Store ``body`` under ``key`` (overwriting is allowed only with identical bytes)."""
        ...

    async def head(self, key: str) -> HeadResult:
        """Metadata of ``key``; ``exists=False`` when nothing is stored."""
        ...

    def get_stream(self, key: str, *, chunk_size: int = 65536) -> AsyncIterator[bytes]:
        """Stream the bytes of ``key``; raises ``ObjectNotFound`` when missing."""
        ...

    async def create_signed_get_url(self, key: str, expires_in: int) -> str:
        """A URL that reads ``key`` until ``expires_in`` seconds from now, and not after."""
        ...

    async def create_signed_put_url(
        self, key: str, *, content_type: str, content_length: int, expires_in: int
    ) -> SignedPut:
        """An upload authorisation bound to key, content type, length and expiry."""
        ...

    async def delete(self, key: str) -> None:
        """Delete ``key``; deleting a missing key succeeds (idempotent)."""
        ...

    async def close(self) -> None:
        """Release clients and connections."""
        ...
