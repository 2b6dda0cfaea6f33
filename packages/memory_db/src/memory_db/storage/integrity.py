"""Reading with our own integrity guarantee: bytes must hash to the SHA-256 the database holds."""

from __future__ import annotations

import hashlib

from memory_db.errors import ChecksumMismatch, InvalidInput
from memory_db.storage.protocol import AssetObjectStore


async def read_verified(
    store: AssetObjectStore, key: str, expected_sha256: str, *, max_bytes: int
) -> bytes:
    """Read ``key`` fully (at most ``max_bytes``) and verify it against ``expected_sha256``.

    Some S3 peers accept wrong checksums on upload and nothing stops bytes from rotting or being
    replaced at rest, so every read that feeds a user or a model is checked here.
    """
    digest = hashlib.sha256()
    chunks: list[bytes] = []
    size = 0
    async for chunk in store.get_stream(key):
        size += len(chunk)
        if size > max_bytes:
            raise InvalidInput(f"stored object is larger than {max_bytes} bytes")
        digest.update(chunk)
        chunks.append(chunk)
    if digest.hexdigest() != expected_sha256:
        raise ChecksumMismatch("stored bytes do not match the recorded SHA-256")
    return b"".join(chunks)
