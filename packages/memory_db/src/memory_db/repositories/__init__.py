"""Repositories: every vault-scoped method takes the caller's resolved ``VaultScope``."""

from memory_db.repositories._text import (
    FORBIDDEN_CHARACTERS_RULE,
    drop_forbidden_characters,
    has_forbidden_characters,
)
from memory_db.repositories.access_changes import (
    ACCESS_CHANNEL,
    AccessChangeWatch,
    ApiKeyCache,
    settle_access_change,
)
from memory_db.repositories.artifacts import ArtifactRepository
from memory_db.repositories.asset_states import (
    ASSET_STATE_CHANNEL,
    AssetStateWatch,
    StateSubscription,
)
from memory_db.repositories.asset_tags import TagChange
from memory_db.repositories.assets import AssetRepository, DuplicateObject, ObjectRepository
from memory_db.repositories.audit import ProvenanceRepository, UsageRepository
from memory_db.repositories.contexts import ContextRepository
from memory_db.repositories.filters import FILTER_FIELDS, AssetFilter, Condition
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
from memory_db.repositories.integrity import (
    INTEGRITY_CODES,
    IntegrityRepository,
    namespace_lock,
)
from memory_db.repositories.jobs import JOB_CHANNEL, JobRepository, QueueHealth, listen_for_jobs
from memory_db.repositories.near_duplicates import (
    NearDuplicate,
    NearDuplicateRepository,
    OpenPair,
    PairedAsset,
    PairedImage,
)
from memory_db.repositories.openings import (
    Opening,
    OpeningRepository,
    ReservationAttempt,
    split_vault_handle,
)
from memory_db.repositories.orphans import OrphanRepository
from memory_db.repositories.projects import FolderRepository, ProjectRepository, validate_name
from memory_db.repositories.quota import QuotaRepository
from memory_db.repositories.records import (
    ApiKeyRecord,
    ArtifactRecord,
    ArtifactUsage,
    AssetRecord,
    AssetSettled,
    ContextRecord,
    FolderRecord,
    GrantRecord,
    IdentityRecord,
    JobRecord,
    NamespaceUsage,
    ObjectRecord,
    OcrState,
    ProjectRecord,
    ProvenanceRecord,
    ReconcileRunRecord,
    ReservationRecord,
    StoredAsset,
    TextMatch,
    TrashedAsset,
    VaultRecord,
    VaultScope,
    WorkItem,
)
from memory_db.repositories.reports import (
    IdentitySummary,
    MonthlyTokens,
    ProjectBytes,
    ReportRepository,
    VaultSummary,
)
from memory_db.repositories.saves import NewImage, SaveRepository, commit_new_image
from memory_db.repositories.web_sessions import (
    WEB_SESSION_PREFIX,
    WebSessionCache,
    WebSessionRecord,
    WebSessionRepository,
    hash_session_secret,
)
from memory_db.repositories.work import JOB_WORK_KINDS, WORK_KINDS, WorkRepository

__all__ = [
    "ACCESS_CHANNEL",
    "API_KEY_PREFIX",
    "ASSET_STATE_CHANNEL",
    "DEFAULT_VAULT",
    "FILTER_FIELDS",
    "FORBIDDEN_CHARACTERS_RULE",
    "INTEGRITY_CODES",
    "JOB_CHANNEL",
    "JOB_WORK_KINDS",
    "WEB_SESSION_PREFIX",
    "WORK_KINDS",
    "AccessChangeWatch",
    "ApiKeyCache",
    "ApiKeyRecord",
    "ApiKeyRepository",
    "ArtifactRecord",
    "ArtifactRepository",
    "ArtifactUsage",
    "AssetFilter",
    "AssetRecord",
    "AssetRepository",
    "AssetSettled",
    "AssetStateWatch",
    "Condition",
    "ContextRecord",
    "ContextRepository",
    "DuplicateObject",
    "FolderRecord",
    "FolderRepository",
    "GrantRecord",
    "IdentityRecord",
    "IdentityRepository",
    "IdentitySummary",
    "IntegrityRepository",
    "JobRecord",
    "JobRepository",
    "MonthlyTokens",
    "NamespaceUsage",
    "NearDuplicate",
    "NearDuplicateRepository",
    "NewImage",
    "ObjectRecord",
    "ObjectRepository",
    "OcrState",
    "OpenPair",
    "Opening",
    "OpeningRepository",
    "OrphanRepository",
    "PairedAsset",
    "PairedImage",
    "ProjectBytes",
    "ProjectRecord",
    "ProjectRepository",
    "ProvenanceRecord",
    "ProvenanceRepository",
    "QueueHealth",
    "QuotaRepository",
    "ReconcileRunRecord",
    "ReportRepository",
    "ReservationAttempt",
    "ReservationRecord",
    "SaveRepository",
    "StateSubscription",
    "StoredAsset",
    "TagChange",
    "TextMatch",
    "TrashedAsset",
    "UsageRepository",
    "VaultRecord",
    "VaultRepository",
    "VaultScope",
    "VaultSummary",
    "WebSessionCache",
    "WebSessionRecord",
    "WebSessionRepository",
    "WorkItem",
    "WorkRepository",
    "commit_new_image",
    "drop_forbidden_characters",
    "has_forbidden_characters",
    "hash_api_key",
    "hash_session_secret",
    "listen_for_jobs",
    "namespace_lock",
    "normalise_identity",
    "settle_access_change",
    "split_vault_handle",
    "validate_name",
    "validate_vault_handle",
]
