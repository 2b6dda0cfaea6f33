"""``InMemoryAssetObjectStore``: the fake shipped for unit tests (same contract, no I/O)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

from memory_db.errors import ObjectNotFound
from memory_db.storage._common import check_put, refuse_overwrite
from memory_db.storage.keys import validate_namespace_prefix, validate_storage_key
from memory_db.storage.protocol import HeadResult, ListedObject, PutResult
from memory_db.storage.signing import HmacLinks, UrlSigner

BASE_URL = "memory://objects"


@dataclass
class _Stored:
    body: bytes
    content_type: str
    sha256: str
    modified: datetime = field(default_factory=lambda: datetime.now(UTC))


class InMemoryAssetObjectStore(HmacLinks):
    """Objects in a dict; signed links are HMAC-signed ``memory://`` URLs."""

    def __init__(self, signer: UrlSigner) -> None:
        self.signer = signer
        self.links_base = BASE_URL
        self.objects: dict[str, _Stored] = {}

    async def put(
        self, key: str, body: bytes, *, content_type: str, checksum_sha256: str | None = None
    ) -> PutResult:
        """Store a copy of ``body`` after the shared checks (create-only)."""
        digest = check_put(key, body, content_type, checksum_sha256)
        existing = self.objects.get(key)
        if existing is not None and existing.sha256 != digest:
            raise refuse_overwrite(key)
        if existing is None:
            self.objects[key] = _Stored(bytes(body), content_type, digest)
        return PutResult(key=key, bytes=len(body), etag=digest)

    async def head(self, key: str) -> HeadResult:
        """Metadata of a stored object."""
        validate_storage_key(key)
        stored = self.objects.get(key)
        if stored is None:
            return HeadResult(exists=False)
        return HeadResult(True, len(stored.body), stored.content_type, stored.sha256, stored.sha256)

    async def get_stream(self, key: str, *, chunk_size: int = 65536) -> AsyncIterator[bytes]:
        """Yield the stored bytes in chunks."""
        validate_storage_key(key)
        stored = self.objects.get(key)
        if stored is None:
            raise ObjectNotFound("no object is stored under this key")
        for start in range(0, len(stored.body), chunk_size):
            yield stored.body[start : start + chunk_size]

    async def list_namespace(self, prefix: str) -> AsyncIterator[ListedObject]:
        """The stored keys under ``prefix``, in key order."""
        validate_namespace_prefix(prefix)
        for key in sorted(k for k in self.objects if k.startswith(prefix)):
            stored = self.objects[key]
            yield ListedObject(key=key, bytes=len(stored.body), modified=stored.modified)

    async def delete(self, key: str) -> None:
        """Forget the key (idempotent)."""
        validate_storage_key(key)
        self.objects.pop(key, None)

    async def close(self) -> None:
        """Nothing to release."""
