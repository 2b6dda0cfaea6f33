"""Errors raised by memory-db.

Hierarchy::

    MemoryDbError
    ├── ConfigurationError          invalid settings (names the variable)
    ├── DatabaseUnavailable         the database cannot be reached now (down, restarting)
    ├── NotFound                    a row does not exist *for this caller's scope*
    ├── Conflict                    unique name, duplicate key, concurrent change
    ├── InvalidInput                a value the schema refuses (too long, bad id, ...)
    ├── FolderTreeError             depth over the limit or a cycle (InvalidInput)
    ├── StorageError                object store failure
    │   ├── ObjectNotFound
    │   ├── ObjectExists            other bytes already live under the key (create-only)
    │   ├── ChecksumMismatch        bytes do not hash to the expected SHA-256
    │   └── InvalidStorageKey       a key that was not built by the key builder
    ├── SignatureError              a signed link that is tampered with or expired
    └── EmbeddingError              an embedding call failed (``retryable`` says whether to retry)
        ├── ProviderContractError   malformed vectors: count, dimension, NaN, norm (permanent)
        ├── ProviderRejected        validation, auth, balance, unsupported media (permanent)
        └── ProviderUnavailable     429/524/5xx/timeouts after the retries (retry later)
    ContextRefused                  a generated image context failed its gate (stable ``code``)

Foreign errors (asyncpg, botocore, OS) are translated where they are raised, with ``from exc``.
"""

from __future__ import annotations


class MemoryDbError(Exception):
    """Root of every error memory-db raises on purpose."""


class ConfigurationError(MemoryDbError):
    """The configuration is invalid; the message names the variable."""


class DatabaseUnavailable(MemoryDbError):
    """The database cannot be reached now: it is down, restarting, or refuses connections.

    Raised by ``Database.unit_of_work`` in place of the driver's connection errors; retrying
    after a short wait is the right answer.
    """


class NotFound(MemoryDbError):
    """A row does not exist within the caller's scope (indistinguishable from never existing)."""

    def __init__(self, kind: str, ident: str | None = None) -> None:
        self.kind = kind
        self.ident = ident
        super().__init__(f"{kind} not found" + (f": {ident}" if ident else ""))


class Conflict(MemoryDbError):
    """A uniqueness rule or a concurrent change refused the write."""


class InvalidInput(MemoryDbError):
    """A value the schema refuses; the message says which and why."""


class FolderTreeError(InvalidInput):
    """Folder depth over the limit, or a move that would create a cycle."""


class QuotaExceededError(MemoryDbError):
    """``used + reserved + requested > quota`` for one owner (docs/design.md#namespace)."""

    def __init__(self, *, used: int, reserved: int, requested: int, quota: int) -> None:
        self.used = used
        self.reserved = reserved
        self.requested = requested
        self.quota = quota
        super().__init__(
            f"storing {requested} more bytes would exceed the quota: "
            f"{used} used + {reserved} reserved + {requested} requested > {quota}"
        )


class StorageError(MemoryDbError):
    """An object store operation failed."""


class StorageUnavailable(StorageError):
    """The object store could not be reached (connection refused or dropped, timeout).

    Retrying the same operation later can succeed; callers answer it as retryable.
    """


class ObjectNotFound(StorageError):
    """No object is stored under the key."""


class ObjectExists(StorageError):
    """Other bytes are already stored under the key; objects are never overwritten."""


class ChecksumMismatch(StorageError):
    """Bytes do not hash to the SHA-256 they were declared or recorded with."""


class InvalidStorageKey(StorageError):
    """A key that the key builder did not produce."""


class SignatureError(MemoryDbError):
    """A signed link whose signature does not match or that has expired."""


class EmbeddingError(MemoryDbError):
    """An embedding call failed; ``code`` is stable, ``retryable`` tells a worker what to do."""

    retryable = False

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(f"{code}: {message}")


class ProviderContractError(EmbeddingError):
    """The answer is not one finite, unit-length vector of the right size per input."""


class ProviderRejected(EmbeddingError):
    """The provider refused the request for a reason retrying cannot fix."""


class ProviderUnavailable(EmbeddingError):
    """The provider could not answer in time (rate limits, timeouts, server errors)."""

    retryable = True


class ContextRefused(MemoryDbError):
    """A describer's answer failed the gate (docs/generated-context.md#gating); nothing is kept.

    ``code`` is stable: ``context_not_json``, ``context_too_large``, ``context_schema`` or
    ``context_stale``.
    """

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(f"{code}: {message}")
