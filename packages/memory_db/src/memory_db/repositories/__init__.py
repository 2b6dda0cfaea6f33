"""Repositories: every vault-scoped method takes the caller's resolved ``VaultScope``."""

from memory_db.repositories.audit import ProvenanceRepository, UsageRepository
from memory_db.repositories.identities import (
    API_KEY_PREFIX,
    DEFAULT_VAULT,
    ApiKeyRepository,
    IdentityRepository,
    VaultRepository,
    hash_api_key,
    normalise_identity,
    validate_vault_handle,
)
from memory_db.repositories.projects import FolderRepository, ProjectRepository, validate_name
from memory_db.repositories.records import (
    ApiKeyRecord,
    FolderRecord,
    GrantRecord,
    IdentityRecord,
    ProjectRecord,
    VaultRecord,
    VaultScope,
)

__all__ = [
    "API_KEY_PREFIX",
    "DEFAULT_VAULT",
    "ApiKeyRecord",
    "ApiKeyRepository",
    "FolderRecord",
    "FolderRepository",
    "GrantRecord",
    "IdentityRecord",
    "IdentityRepository",
    "ProjectRecord",
    "ProjectRepository",
    "ProvenanceRepository",
    "UsageRepository",
    "VaultRecord",
    "VaultRepository",
    "VaultScope",
    "hash_api_key",
    "normalise_identity",
    "validate_name",
    "validate_vault_handle",
]
