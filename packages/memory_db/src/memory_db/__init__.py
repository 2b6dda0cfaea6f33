"""memory-db: the data layer of the image memory.

Schema and migrations (the model of docs/design.md), owner/vault-scoped repositories with a
unit of work, private object stores, configuration, structured logging with redaction, and the
embedded PostgreSQL runtime. Nothing here imports fastmcp.
"""

from typing import TYPE_CHECKING

from memory_db.dev_hosts import DevHost, host_key
from memory_db.errors import (
    ChecksumMismatch,
    ConfigurationError,
    Conflict,
    DatabaseUnavailable,
    FolderTreeError,
    InvalidInput,
    InvalidStorageKey,
    MemoryDbError,
    NotFound,
    ObjectExists,
    ObjectNotFound,
    QuotaExceededError,
    SignatureError,
    StorageError,
    StorageUnavailable,
)
from memory_db.ids import is_valid_id, new_id
from memory_db.lazy_exports import lazy_exports
from memory_db.logs import configure_logging, get_logger, identity_digest

if TYPE_CHECKING:
    from memory_db.repositories import (
        DEFAULT_VAULT,
        ApiKeyRecord,
        AssetRecord,
        FolderRecord,
        GrantRecord,
        IdentityRecord,
        JobRecord,
        NamespaceUsage,
        ObjectRecord,
        ProjectRecord,
        ReservationRecord,
        VaultRecord,
        VaultScope,
    )
    from memory_db.runtime import Runtime, open_database, open_runtime
    from memory_db.settings import MemorySettings, load_settings
    from memory_db.unit_of_work import Database, NestedUnitOfWork, UnitOfWork

# Loaded on first use: the repositories, the runtime and what they import (the vector index,
# the embedders, alembic, numpy, httpx) are most of this package's import time, and a process
# that needs only settings and one repository (an `admin` command) should not pay for them all.
_LAZY = {
    "memory_db.repositories": (
        "DEFAULT_VAULT",
        "ApiKeyRecord",
        "AssetRecord",
        "FolderRecord",
        "GrantRecord",
        "IdentityRecord",
        "JobRecord",
        "NamespaceUsage",
        "ObjectRecord",
        "ProjectRecord",
        "ReservationRecord",
        "VaultRecord",
        "VaultScope",
    ),
    "memory_db.runtime": ("Runtime", "open_database", "open_runtime"),
    "memory_db.settings": ("MemorySettings", "load_settings"),
    "memory_db.unit_of_work": ("Database", "NestedUnitOfWork", "UnitOfWork"),
}
__getattr__ = lazy_exports(__name__, globals(), _LAZY)


__all__ = [
    "DEFAULT_VAULT",
    "ApiKeyRecord",
    "AssetRecord",
    "ChecksumMismatch",
    "ConfigurationError",
    "Conflict",
    "Database",
    "DatabaseUnavailable",
    "DevHost",
    "FolderRecord",
    "FolderTreeError",
    "GrantRecord",
    "IdentityRecord",
    "InvalidInput",
    "InvalidStorageKey",
    "JobRecord",
    "MemoryDbError",
    "MemorySettings",
    "NamespaceUsage",
    "NestedUnitOfWork",
    "NotFound",
    "ObjectExists",
    "ObjectNotFound",
    "ObjectRecord",
    "ProjectRecord",
    "QuotaExceededError",
    "ReservationRecord",
    "Runtime",
    "SignatureError",
    "StorageError",
    "StorageUnavailable",
    "UnitOfWork",
    "VaultRecord",
    "VaultScope",
    "configure_logging",
    "get_logger",
    "host_key",
    "identity_digest",
    "is_valid_id",
    "load_settings",
    "new_id",
    "open_database",
    "open_runtime",
]
