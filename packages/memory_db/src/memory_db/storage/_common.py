"""Helpers shared by the object stores."""

from __future__ import annotations

import hashlib
import re

from memory_db.errors import ChecksumMismatch, InvalidStorageKey, ObjectExists
from memory_db.storage.keys import content_type_for_key, validate_storage_key

_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def sha256_hex(body: bytes) -> str:
    """Lowercase hex SHA-256 of ``body``."""
    return hashlib.sha256(body).hexdigest()


def check_put(key: str, body: bytes, content_type: str, checksum_sha256: str | None) -> str:
    """Validate a put before anything is stored; return the body's SHA-256 (hex)."""
    validate_storage_key(key)
    expected_type = content_type_for_key(key)
    if content_type != expected_type:
        raise InvalidStorageKey(f"key {key.rsplit('/', 1)[1]} must be stored as {expected_type}")
    if not body:
        raise InvalidStorageKey("refusing to store an empty object")
    digest = sha256_hex(body)
    if checksum_sha256 is not None:
        if not _HEX64.fullmatch(checksum_sha256):
            raise ChecksumMismatch("checksum must be a lowercase hex SHA-256")
        if checksum_sha256 != digest:
            raise ChecksumMismatch("bytes do not match the declared SHA-256; nothing was stored")
    return digest


def refuse_overwrite(key: str) -> ObjectExists:
    """The error for a put whose key already holds other bytes (nothing was written)."""
    return ObjectExists(
        f"{key.rsplit('/', 1)[1]} already holds other bytes; stored objects are never overwritten"
    )
