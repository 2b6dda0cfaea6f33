"""The private object-store contract (docs/design.md#object-stores)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
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


@dataclass(frozen=True, slots=True)
class ListedObject:
    """One key found by listing a namespace: its size and when it was last written."""

    key: str
    bytes: int
    modified: datetime  # timezone-aware


@runtime_checkable
class AssetObjectStore(Protocol):
    """Private storage for original and preview bytes; keys come from ``build_object_key``.

    ``put`` refuses bytes that do not hash to ``checksum_sha256`` before anything is stored, and
    never overwrites: a key, once written, keeps its bytes until it is deleted (create-only).
    Signed PUTs exist only for upload staging keys (``build_staging_key``), so a link holder can
    never write where a validated original lives. Stores never make objects public; reads by
    third parties go through signed, expiring URLs.
    """

    async def put(
        self,
        key: str,
        body: bytes,
        *,
        content_type: str,
        checksum_sha256: str | None = None,
    ) -> PutResult:
        """Store ``body`` under ``key`` unless the key exists (create-only).

        Putting the identical bytes again succeeds without writing (a retried put); other bytes
        under an existing key raise ``ObjectExists`` and leave the stored bytes as they are.
        """
        ...

    async def head(self, key: str) -> HeadResult:
        """Metadata of ``key``; ``exists=False`` when nothing is stored."""
        ...

    def get_stream(self, key: str, *, chunk_size: int = 65536) -> AsyncIterator[bytes]:
        """Stream the bytes of ``key``; raises ``ObjectNotFound`` when missing."""
        ...

    def list_namespace(self, prefix: str) -> AsyncIterator[ListedObject]:
        """Every object and staging key under one namespace prefix (``namespace_prefix``)."""
        ...

    async def create_signed_get_url(
        self, key: str, expires_in: int, *, filename: str | None = None
    ) -> str:
        """A URL that reads ``key`` until ``expires_in`` seconds from now, and not after.

        Served as ``keys.served_as(key, filename)`` says, and nothing else: a preview inline,
        an original only as a download (``Content-Disposition: attachment``) named
        ``filename`` (default: the key's file name), both with the key's content type.
        """
        ...

    async def create_signed_put_url(
        self, key: str, *, content_type: str, content_length: int, expires_in: int
    ) -> SignedPut:
        """An upload authorisation for a staging key, bound to content type, length and expiry."""
        ...

    async def delete(self, key: str) -> None:
        """Delete ``key``; deleting a missing key succeeds (idempotent)."""
        ...

    async def close(self) -> None:
        """Release clients and connections."""
        ...
