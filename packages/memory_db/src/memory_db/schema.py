"""SQLAlchemy 2 models of every table (docs/design.md#model).

Ownership is enforced by the database: every child row repeats its owner (and vault)
and references its parent through a *composite* foreign key that includes them, so a folder
cannot point at another owner's project, an asset at another owner's folder or object, or a job
at another owner's asset. Status values are CHECK constraints. Folder depth and cycles are
checked by a trigger (see the initial migration) that serialises changes per project.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Computed,
    DateTime,
    Double,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    SmallInteger,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, TSVECTOR
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

PROJECT_STATUSES = ("active", "archived", "deleted")
OBJECT_STATUSES = ("pending", "available", "quarantined", "deleting", "deleted")
ASSET_STATUSES = ("processing", "ready", "failed", "deleting", "deleted")
EMBEDDING_STATUSES = ("pending", "running", "ready", "partial", "failed")
SOURCE_KINDS = ("upload", "scrape", "screenshot", "instagram", "external_url", "import")
ARTIFACT_SOURCE_KINDS = ("scrape", "screenshot")
JOB_STATUSES = ("queued", "running", "retry", "done", "failed", "cancelled")
ACTIVE_JOB_STATUSES = ("queued", "running", "retry")
RECONCILE_RUN_STATUSES = ("done", "failed")
REPRESENTATIONS = ("visual", "fused")
# What a queued job does (docs/design.md#jobs): ``embed`` one representation into the vector
# index, read the image's text (``ocr``), describe it (``describe``), or read when and with what
# it was taken from its original's EXIF (``capture``). Only ``embed`` jobs
# carry a representation and dimensions; every job names its model (or engine).
JOB_KINDS = ("embed", "ocr", "describe", "capture", "duplicates")
RESERVATION_STATUSES = ("active", "finalized", "released", "expired")
API_KEY_SCOPES = ("read", "write", "destructive", "admin")
GRANT_PERMISSIONS = ("read", "write", "admin")
USAGE_SOURCES = ("embed_image_document", "embed_image_query", "rerank_image", "describe_image")
PROVENANCE_OPERATIONS = (
    "asset_project_create",
    "asset_project_archive",
    "asset_project_update",
    "asset_folder_create",
    "asset_folder_delete",
    "asset_folder_update",
    "asset_save",
    "asset_update",
    "asset_embed",
    "asset_search",
    "asset_move",
    "asset_delete",
    "asset_restore",
    "asset_object_purge",
    "asset_reconcile",
    "identity_create",
    "api_key_create",
    "api_key_revoke",
    "vault_create",
    "vault_grant",
    "vault_grant_revoke",
    "artifact_store",
    "job_retry",
    "job_cancel",
    "asset_purge",
    "vector_index_switch",
    "asset_enrich",
    "asset_context_review",
    "api_key_pause",
    "api_key_resume",
    "asset_duplicates_dismiss",
)
PROVENANCE_OUTCOMES = ("succeeded", "failed", "denied")

# The full-text document of an asset (a generated column: derived, rebuildable). Titles and tags
# weigh most, then alt text, then the description, then words no person gave (OCR, generated
# context: weighed least, so a caller's own words always rank first). 'english' stems words
# ("bicycles" finds "bicycle"); every function here is immutable, as a generated column requires.
SEARCH_DOCUMENT_SQL = (
    "setweight(to_tsvector('english'::regconfig, title), 'A') || "
    "setweight(jsonb_to_tsvector('english'::regconfig, tags, '[\"string\"]'::jsonb), 'A') || "
    "setweight(to_tsvector('english'::regconfig, coalesce(alt_text, '')), 'B') || "
    "setweight(to_tsvector('english'::regconfig, coalesce(description, '')), 'C') || "
    # The text read in the image (docs/ocr.md), below every word a person gave (revision 0017).
    "setweight(to_tsvector('english'::regconfig, coalesce(ocr_text, '')), 'D') || "
    # Generated context's whitelisted words (docs/generated-context.md), likewise (0018).
    "setweight(to_tsvector('english'::regconfig, coalesce(generated_text, '')), 'D')"
)
MAX_OCR_TEXT = 8000  # characters of read text kept per image (memory_tools.jobs.ocr cuts there)
# Characters of an upload's original file name kept (memory_tools.ingest.inputs cuts there).
MAX_FILE_NAME = 255
# The most characters of generated context that reach the index (caption, visible text and
# subjects joined); the schema's own bounds allow a little more, which is cut.
MAX_GENERATED_TEXT = 3000
CONTEXT_REVIEWS = ("unreviewed", "accepted")

MAX_FOLDER_DEPTH = 8
MAX_NAME_LENGTH = 120


def _in(column: str, values: tuple[str, ...]) -> str:
    quoted = ", ".join(f"'{value}'" for value in values)
    return f"{column} IN ({quoted})"


def _now() -> Any:
    return mapped_column(DateTime(timezone=True), nullable=False, server_default=func.now())


class Base(DeclarativeBase):
    """Declarative base with deterministic constraint names (needed for drift checks)."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


# --- identity and entitlement -------------------------------------------------------------


class Identity(Base):
    """An owner identity (a normalised e-mail address) with its storage plan."""

    __tablename__ = "mem_identities"
    __table_args__ = (
        CheckConstraint("quota_bytes >= 0", name="quota_nonnegative"),
        CheckConstraint(
            "owner_identity = lower(owner_identity) "
            "AND char_length(owner_identity) BETWEEN 3 AND 254",
            name="identity_normalised",
        ),
    )

    owner_identity: Mapped[str] = mapped_column(Text, primary_key=True)
    quota_bytes: Mapped[int] = mapped_column(BigInteger, nullable=False)
    created_at: Mapped[datetime] = _now()


class ApiKey(Base):
    """An API key; only the SHA-256 of the secret is stored."""

    __tablename__ = "mem_api_keys"
    __table_args__ = (
        CheckConstraint(
            "cardinality(scopes) >= 1 "
            "AND scopes <@ ARRAY['read','write','destructive','admin']::text[]",
            name="scopes_known",
        ),
        CheckConstraint("key_hash ~ '^[0-9a-f]{64}$'", name="key_hash_hex"),
        CheckConstraint("note IS NULL OR char_length(note) BETWEEN 1 AND 500", name="note_length"),
        CheckConstraint("calls >= 0 AND searches >= 0", name="counts_nonnegative"),
    )

    id: Mapped[str] = mapped_column(Text, primary_key=True)
    owner_identity: Mapped[str] = mapped_column(
        Text, ForeignKey("mem_identities.owner_identity", ondelete="CASCADE"), nullable=False
    )
    key_hash: Mapped[str] = mapped_column(Text, nullable=False, unique=True)
    label: Mapped[str | None] = mapped_column(Text)
    scopes: Mapped[list[str]] = mapped_column(ARRAY(Text), nullable=False)
    created_at: Mapped[datetime] = _now()
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Why the key was made (revision 0023); a paused key is refused until it is resumed.
    note: Mapped[str | None] = mapped_column(Text)
    paused_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Calls and searches made with the key, added up per process and written at most once a
    # minute (memory_tools.key_activity): they lag by up to a minute.
    calls: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default="0")
    searches: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default="0")


class WebSession(Base):
    """A signed-in browser: the web app's cookie names this row by the SHA-256 of its secret.

    The session acts as its API key (``key_id``): revoking the key ends the session at its next
    request, and deleting the key deletes it. ``csrf_token`` is what every change must echo.
    """

    __tablename__ = "mem_web_sessions"
    __table_args__ = (
        CheckConstraint("token_hash ~ '^[0-9a-f]{64}$'", name="token_hash_hex"),
        CheckConstraint("length(csrf_token) BETWEEN 32 AND 128", name="csrf_token_length"),
        CheckConstraint("expires_at > created_at", name="expires_after_created"),
        Index("ix_mem_web_sessions_expires", "expires_at"),
        Index("ix_mem_web_sessions_key", "key_id"),
    )

    id: Mapped[str] = mapped_column(Text, primary_key=True)
    token_hash: Mapped[str] = mapped_column(Text, nullable=False, unique=True)
    key_id: Mapped[str] = mapped_column(
        Text, ForeignKey("mem_api_keys.id", ondelete="CASCADE"), nullable=False
    )
    csrf_token: Mapped[str] = mapped_column(Text, nullable=False)
    created_at: Mapped[datetime] = _now()
    last_seen_at: Mapped[datetime] = _now()
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)


class Vault(Base):
    """A vault of one owner: the caller-visible handle and the owner-qualified physical name."""

    __tablename__ = "mem_vaults"
    __table_args__ = (
        UniqueConstraint("owner_identity", "physical_vault"),
        Index("uq_mem_vaults_owner_handle", "owner_identity", text("lower(handle)"), unique=True),
        CheckConstraint(
            "char_length(handle) BETWEEN 1 AND 64 AND handle = btrim(handle) "
            "AND handle !~ '[/[:cntrl:]]'",
            name="handle_shape",
        ),
    )

    id: Mapped[str] = mapped_column(Text, primary_key=True)
    owner_identity: Mapped[str] = mapped_column(
        Text, ForeignKey("mem_identities.owner_identity", ondelete="CASCADE"), nullable=False
    )
    handle: Mapped[str] = mapped_column(Text, nullable=False)
    physical_vault: Mapped[str] = mapped_column(Text, nullable=False, unique=True)
    created_at: Mapped[datetime] = _now()


class VaultGrant(Base):
    """A grant of one vault to another identity."""

    __tablename__ = "mem_vault_grants"
    __table_args__ = (
        UniqueConstraint("physical_vault", "grantee_identity"),
        CheckConstraint(_in("permission", GRANT_PERMISSIONS), name="permission_known"),
        ForeignKeyConstraint(
            ["owner_identity", "physical_vault"],
            ["mem_vaults.owner_identity", "mem_vaults.physical_vault"],
            ondelete="CASCADE",
        ),
        CheckConstraint("grantee_identity <> owner_identity", name="not_self"),
        Index("ix_mem_vault_grants_grantee", "grantee_identity"),
    )

    id: Mapped[str] = mapped_column(Text, primary_key=True)
    owner_identity: Mapped[str] = mapped_column(Text, nullable=False)
    physical_vault: Mapped[str] = mapped_column(Text, nullable=False)
    grantee_identity: Mapped[str] = mapped_column(
        Text, ForeignKey("mem_identities.owner_identity", ondelete="CASCADE"), nullable=False
    )
    permission: Mapped[str] = mapped_column(Text, nullable=False)
    created_at: Mapped[datetime] = _now()


class AccessEpoch(Base):
    """How many changes of access (keys, grants, vaults) were committed: one row.

    Bumped, and notified on ``memory_access_changes``, by triggers on those tables (migration
    0021); the row lock orders the epochs as the commits. Key caches follow it
    (``memory_db.repositories.access_changes``).
    """

    __tablename__ = "mem_access_epoch"
    __table_args__ = (CheckConstraint("id = 1", name="single_row"),)

    id: Mapped[int] = mapped_column(SmallInteger, primary_key=True, autoincrement=False)
    epoch: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default="0")


# --- asset plane ----------------------------------------------------------------------------


class AssetNamespace(Base):
    """One owner's opaque object namespace and byte counters (docs/design.md#namespace)."""

    __tablename__ = "mem_asset_namespaces"
    __table_args__ = (
        UniqueConstraint("owner_identity", "namespace_id"),
        CheckConstraint("used_bytes >= 0", name="used_nonnegative"),
        CheckConstraint("reserved_bytes >= 0", name="reserved_nonnegative"),
    )

    owner_identity: Mapped[str] = mapped_column(
        Text, ForeignKey("mem_identities.owner_identity", ondelete="CASCADE"), primary_key=True
    )
    namespace_id: Mapped[str] = mapped_column(Text, nullable=False, unique=True)
    used_bytes: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default="0")
    reserved_bytes: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default="0")
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()


class AssetProject(Base):
    """A project inside one owner's vault (docs/design.md#projects)."""

    __tablename__ = "mem_asset_projects"
    __table_args__ = (
        UniqueConstraint("id", "owner_identity", "vault"),
        ForeignKeyConstraint(
            ["owner_identity", "vault"],
            ["mem_vaults.owner_identity", "mem_vaults.physical_vault"],
        ),
        CheckConstraint(_in("status", PROJECT_STATUSES), name="status_known"),
        CheckConstraint("char_length(name) BETWEEN 1 AND 120", name="name_length"),
        CheckConstraint(
            "description IS NULL OR char_length(description) <= 2000", name="description_length"
        ),
        Index(
            "uq_mem_asset_projects_active_name",
            "owner_identity",
            "vault",
            text("lower(name)"),
            unique=True,
            postgresql_where=text("status <> 'deleted'"),
        ),
    )

    id: Mapped[str] = mapped_column(Text, primary_key=True)
    owner_identity: Mapped[str] = mapped_column(Text, nullable=False)
    vault: Mapped[str] = mapped_column(Text, nullable=False)
    name: Mapped[str] = mapped_column(Text, nullable=False)
    description: Mapped[str | None] = mapped_column(Text)
    status: Mapped[str] = mapped_column(Text, nullable=False, server_default="active")
    created_by: Mapped[str] = mapped_column(Text, nullable=False)
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class AssetFolder(Base):
    """A folder (docs/design.md#folders); its parent is in the same project, owner and vault."""

    __tablename__ = "mem_asset_folders"
    __table_args__ = (
        UniqueConstraint("id", "project_id", "owner_identity", "vault"),
        ForeignKeyConstraint(
            ["project_id", "owner_identity", "vault"],
            [
                "mem_asset_projects.id",
                "mem_asset_projects.owner_identity",
                "mem_asset_projects.vault",
            ],
        ),
        ForeignKeyConstraint(
            ["parent_id", "project_id", "owner_identity", "vault"],
            [
                "mem_asset_folders.id",
                "mem_asset_folders.project_id",
                "mem_asset_folders.owner_identity",
                "mem_asset_folders.vault",
            ],
            name="fk_mem_asset_folders_parent",
        ),
        CheckConstraint("char_length(name) BETWEEN 1 AND 120", name="name_length"),
        CheckConstraint("parent_id IS NULL OR parent_id <> id", name="not_own_parent"),
        Index(
            "uq_mem_asset_folders_active_sibling_name",
            "project_id",
            text("coalesce(parent_id, '')"),
            text("lower(name)"),
            unique=True,
            postgresql_where=text("deleted_at IS NULL"),
        ),
        Index("ix_mem_asset_folders_project_parent", "project_id", "parent_id"),
    )

    id: Mapped[str] = mapped_column(Text, primary_key=True)
    owner_identity: Mapped[str] = mapped_column(Text, nullable=False)
    vault: Mapped[str] = mapped_column(Text, nullable=False)
    project_id: Mapped[str] = mapped_column(Text, nullable=False)
    parent_id: Mapped[str | None] = mapped_column(Text)
    name: Mapped[str] = mapped_column(Text, nullable=False)
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class AssetObject(Base):
    """Immutable bytes of one owner, never deduplicated across owners (docs/design.md#objects)."""

    __tablename__ = "mem_asset_objects"
    __table_args__ = (
        UniqueConstraint("id", "owner_identity"),
        ForeignKeyConstraint(
            ["owner_identity", "namespace_id"],
            ["mem_asset_namespaces.owner_identity", "mem_asset_namespaces.namespace_id"],
        ),
        CheckConstraint(_in("status", OBJECT_STATUSES), name="status_known"),
        CheckConstraint("sha256 ~ '^[0-9a-f]{64}$'", name="sha256_hex"),
        CheckConstraint(
            "preview_sha256 IS NULL OR preview_sha256 ~ '^[0-9a-f]{64}$'",
            name="preview_sha256_hex",
        ),
        CheckConstraint(
            _in("mime_type", ("image/jpeg", "image/png", "image/webp", "image/gif")),
            name="mime_known",
        ),
        CheckConstraint(_in("extension", ("jpg", "png", "webp", "gif")), name="extension_known"),
        CheckConstraint("bytes > 0", name="bytes_positive"),
        CheckConstraint("width > 0 AND height > 0", name="dimensions_positive"),
        CheckConstraint(
            "preview_bytes IS NULL OR preview_bytes > 0", name="preview_bytes_positive"
        ),
        Index(
            "uq_mem_asset_objects_owner_sha256_active",
            "owner_identity",
            "sha256",
            unique=True,
            postgresql_where=text("status IN ('pending', 'available', 'quarantined')"),
        ),
        Index("ix_mem_asset_objects_status_updated", "status", "updated_at"),
        # Reconciliation verifies the least recently verified objects first (revision 0015).
        Index(
            "ix_mem_asset_objects_owner_verified",
            "owner_identity",
            text("verified_at NULLS FIRST"),
            "id",
            postgresql_where=text("status = 'available'"),
        ),
    )

    id: Mapped[str] = mapped_column(Text, primary_key=True)
    owner_identity: Mapped[str] = mapped_column(Text, nullable=False)
    namespace_id: Mapped[str] = mapped_column(Text, nullable=False)
    sha256: Mapped[str] = mapped_column(Text, nullable=False)
    storage_key: Mapped[str] = mapped_column(Text, nullable=False, unique=True)
    preview_storage_key: Mapped[str | None] = mapped_column(Text)
    # NULL only for objects stored before revision 0007 (see that migration).
    preview_sha256: Mapped[str | None] = mapped_column(Text)
    mime_type: Mapped[str] = mapped_column(Text, nullable=False)
    extension: Mapped[str] = mapped_column(Text, nullable=False)
    bytes: Mapped[int] = mapped_column(BigInteger, nullable=False)
    preview_bytes: Mapped[int | None] = mapped_column(BigInteger)
    width: Mapped[int] = mapped_column(Integer, nullable=False)
    height: Mapped[int] = mapped_column(Integer, nullable=False)
    etag: Mapped[str | None] = mapped_column(Text)
    version_id: Mapped[str | None] = mapped_column(Text)
    status: Mapped[str] = mapped_column(Text, nullable=False, server_default="pending")
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # When reconciliation last read the bytes and found them matching the hashes (rev. 0015).
    verified_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


# The statuses a listing shows (memory_db.repositories.assets.VISIBLE_STATUSES); the listing
# indexes hold only these rows.
_LISTED = "status IN ('processing', 'ready', 'failed')"
# An asset without a capture time sorts as if taken at this instant: last when newest
# captures come first. Capture times are checked to be later (ck ..._taken_at_range). Not the
# year 1: asyncpg sends datetime.min (year 1, UTC) as -infinity, and a cursor there was lost.
UNDATED_TAKEN_AT = "1000-01-01 00:00:00+00"
# As PostgreSQL writes it back, so that the migration drift check compares equal text.
TAKEN_KEY = f"COALESCE(taken_at, '{UNDATED_TAKEN_AT}'::timestamp with time zone)"
MAX_CAMERA_TEXT = 64
# memory_db.repositories.filters.source_host() as an index expression (revision 0020).
_HOST = r"lower(substring(source_url, '^[a-z]+://\[?([^/\]:]+)'))"


class Asset(Base):
    """The user's governed record of an image (docs/design.md#assets)."""

    __tablename__ = "mem_assets"
    __table_args__ = (
        UniqueConstraint("id", "owner_identity"),
        ForeignKeyConstraint(
            ["owner_identity", "vault"],
            ["mem_vaults.owner_identity", "mem_vaults.physical_vault"],
        ),
        ForeignKeyConstraint(
            ["object_id", "owner_identity"],
            ["mem_asset_objects.id", "mem_asset_objects.owner_identity"],
        ),
        ForeignKeyConstraint(
            ["project_id", "owner_identity", "vault"],
            [
                "mem_asset_projects.id",
                "mem_asset_projects.owner_identity",
                "mem_asset_projects.vault",
            ],
        ),
        ForeignKeyConstraint(
            ["folder_id", "project_id", "owner_identity", "vault"],
            [
                "mem_asset_folders.id",
                "mem_asset_folders.project_id",
                "mem_asset_folders.owner_identity",
                "mem_asset_folders.vault",
            ],
        ),
        # A composite FK is not checked when one of its columns is NULL (MATCH SIMPLE), so a
        # folder without its project would escape the check above: forbid that shape outright.
        CheckConstraint("folder_id IS NULL OR project_id IS NOT NULL", name="folder_needs_project"),
        CheckConstraint("media_kind = 'image'", name="media_kind_image"),
        CheckConstraint("char_length(title) BETWEEN 1 AND 240", name="title_length"),
        CheckConstraint(
            "description IS NULL OR char_length(description) <= 4000", name="description_length"
        ),
        CheckConstraint("alt_text IS NULL OR char_length(alt_text) <= 2000", name="alt_length"),
        CheckConstraint(
            f"generated_text IS NULL OR char_length(generated_text) <= {MAX_GENERATED_TEXT}",
            name="generated_text_length",
        ),
        CheckConstraint(
            "source_url IS NULL OR char_length(source_url) <= 4096", name="source_url_length"
        ),
        CheckConstraint(
            "source_url_hash IS NULL OR source_url_hash ~ '^[0-9a-f]{64}$'",
            name="source_url_hash_hex",
        ),
        CheckConstraint(_in("source_kind", SOURCE_KINDS), name="source_kind_known"),
        CheckConstraint(_in("status", ASSET_STATUSES), name="status_known"),
        CheckConstraint(_in("embedding_status", EMBEDDING_STATUSES), name="embedding_status_known"),
        CheckConstraint("jsonb_typeof(tags) = 'array'", name="tags_array"),
        CheckConstraint(
            "jsonb_typeof(source_ref) = 'object' AND pg_column_size(source_ref) <= 8192",
            name="source_ref_bounded",
        ),
        CheckConstraint(
            "jsonb_typeof(metadata) = 'object' AND pg_column_size(metadata) <= 16384",
            name="metadata_bounded",
        ),
        CheckConstraint("purged_at IS NULL OR status = 'deleted'", name="purged_only_when_deleted"),
        CheckConstraint(
            f"ocr_text IS NULL OR char_length(ocr_text) BETWEEN 1 AND {MAX_OCR_TEXT}",
            name="ocr_text_length",
        ),
        CheckConstraint(
            "ocr IS NULL OR (jsonb_typeof(ocr) = 'object' AND pg_column_size(ocr) <= 4096)",
            name="ocr_bounded",
        ),
        CheckConstraint(
            "original_file_name IS NULL OR "
            f"char_length(original_file_name) BETWEEN 1 AND {MAX_FILE_NAME}",
            name="original_file_name_length",
        ),
        CheckConstraint(
            "failure_code IS NULL OR char_length(failure_code) <= 64", name="failure_code_length"
        ),
        CheckConstraint(
            "failure_message IS NULL OR char_length(failure_message) <= 1000",
            name="failure_message_length",
        ),
        # When, with what and where the picture was taken (its EXIF; revision 0024).
        CheckConstraint("taken_at IS NULL OR taken_at >= '1826-01-01'", name="taken_at_range"),
        CheckConstraint(
            "taken_offset_minutes IS NULL OR "
            "(taken_at IS NOT NULL AND taken_offset_minutes BETWEEN -840 AND 840)",
            name="taken_offset_range",
        ),
        CheckConstraint(
            f"camera_make IS NULL OR char_length(camera_make) BETWEEN 1 AND {MAX_CAMERA_TEXT}",
            name="camera_make_length",
        ),
        CheckConstraint(
            f"camera_model IS NULL OR char_length(camera_model) BETWEEN 1 AND {MAX_CAMERA_TEXT}",
            name="camera_model_length",
        ),
        CheckConstraint(
            "orientation IS NULL OR orientation BETWEEN 1 AND 8", name="orientation_range"
        ),
        CheckConstraint(
            "(latitude IS NULL AND longitude IS NULL) OR "
            "(latitude BETWEEN -90 AND 90 AND longitude BETWEEN -180 AND 180)",
            name="location_range",
        ),
        Index(
            "ix_mem_assets_owner_vault_status_created",
            "owner_identity",
            "vault",
            "status",
            text("created_at DESC"),
        ),
        Index(
            "ix_mem_assets_owner_project_folder_created",
            "owner_identity",
            "project_id",
            "folder_id",
            text("created_at DESC"),
        ),
        Index("ix_mem_assets_owner_source_url_hash", "owner_identity", "source_url_hash"),
        Index("ix_mem_assets_object", "object_id"),
        Index("ix_mem_assets_search_document", "search_document", postgresql_using="gin"),
        # Listing's keyset orders, behind the tenant and vault (revision 0020,
        # docs/scaling.md#listing-at-scale).
        Index(
            "ix_mem_assets_listed",
            "owner_identity",
            "vault",
            text("created_at DESC"),
            text("id DESC"),
            postgresql_where=text(_LISTED),
        ),
        Index(
            "ix_mem_assets_listed_project",
            "owner_identity",
            "vault",
            "project_id",
            text("created_at DESC"),
            text("id DESC"),
            postgresql_where=text(_LISTED),
        ),
        Index(
            "ix_mem_assets_listed_folder",
            "owner_identity",
            "vault",
            "folder_id",
            text("created_at DESC"),
            text("id DESC"),
            postgresql_where=text(_LISTED),
        ),
        Index(
            "ix_mem_assets_listed_host",
            "owner_identity",
            "vault",
            text(_HOST),
            text("created_at DESC"),
            text("id DESC"),
            postgresql_where=text(_LISTED),
        ),
        # Listing by the key that saved (``savedBy``), and a key's save count (revision 0023).
        Index(
            "ix_mem_assets_listed_saved_by",
            "owner_identity",
            "vault",
            "saved_by_key_id",
            text("created_at DESC"),
            text("id DESC"),
            postgresql_where=text(_LISTED),
        ),
        Index("ix_mem_assets_saved_by", "saved_by_key_id"),
        # Listing by capture time, undated last, in a vault, a project, a folder, from one
        # source host, or saved by one key (revision 0024).
        *(
            Index(
                f"ix_mem_assets_listed_taken{suffix}",
                "owner_identity",
                "vault",
                *columns,
                text(f"{TAKEN_KEY} DESC"),
                text("id DESC"),
                postgresql_where=text(_LISTED),
            )
            for suffix, columns in (
                ("", ()),
                ("_project", ("project_id",)),
                ("_folder", ("project_id", "folder_id")),
                ("_host", (text(_HOST),)),
                ("_saved_by", ("saved_by_key_id",)),
            )
        ),
        Index(
            "ix_mem_assets_trash",
            "owner_identity",
            "vault",
            text("deleted_at DESC"),
            text("id DESC"),
            postgresql_where=text("status = 'deleted' AND purged_at IS NULL"),
        ),
        Index(
            "ix_mem_assets_tags",
            "tags",
            postgresql_using="gin",
            postgresql_ops={"tags": "jsonb_path_ops"},
        ),
    )

    id: Mapped[str] = mapped_column(Text, primary_key=True)
    owner_identity: Mapped[str] = mapped_column(Text, nullable=False)
    vault: Mapped[str] = mapped_column(Text, nullable=False)
    project_id: Mapped[str | None] = mapped_column(Text)
    folder_id: Mapped[str | None] = mapped_column(Text)
    object_id: Mapped[str] = mapped_column(Text, nullable=False)
    media_kind: Mapped[str] = mapped_column(Text, nullable=False, server_default="image")
    title: Mapped[str] = mapped_column(Text, nullable=False)
    description: Mapped[str | None] = mapped_column(Text)
    alt_text: Mapped[str | None] = mapped_column(Text)
    # The whitelisted words of the asset's current generated context (mem_asset_contexts),
    # kept here because the full-text document is a generated column of this row.
    generated_text: Mapped[str | None] = mapped_column(Text)
    source_url: Mapped[str | None] = mapped_column(Text)
    source_url_hash: Mapped[str | None] = mapped_column(Text)
    source_kind: Mapped[str] = mapped_column(Text, nullable=False)
    source_ref: Mapped[dict[str, Any]] = mapped_column(
        JSONB, nullable=False, server_default=text("'{}'::jsonb")
    )
    tags: Mapped[list[str]] = mapped_column(
        JSONB, nullable=False, server_default=text("'[]'::jsonb")
    )
    metadata_: Mapped[dict[str, Any]] = mapped_column(
        "metadata", JSONB, nullable=False, server_default=text("'{}'::jsonb")
    )
    status: Mapped[str] = mapped_column(Text, nullable=False, server_default="processing")
    embedding_status: Mapped[str] = mapped_column(Text, nullable=False, server_default="pending")
    failure_code: Mapped[str | None] = mapped_column(Text)
    failure_message: Mapped[str | None] = mapped_column(Text)
    created_by: Mapped[str] = mapped_column(Text, nullable=False)
    updated_by: Mapped[str] = mapped_column(Text, nullable=False)
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Purged from the trash before its delete grace window ended (never restorable again).
    purged_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # The key whose call saved the asset (``savedBy``); NULL when unknown (revision 0023). Not
    # a foreign key: a save must not wait on the key row's lock, and keys are never deleted.
    saved_by_key_id: Mapped[str | None] = mapped_column(Text)
    # The text read in the image, verbatim, and how it was read (engine, version, language,
    # confidence, the input's SHA-256, when): set by an OCR job, never by a caller.
    ocr_text: Mapped[str | None] = mapped_column(Text)
    ocr: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    # The base name of the file the bytes were uploaded as, cleaned; None when none was given.
    # Shown and used as the default title, never searched or embedded (revision 0019).
    original_file_name: Mapped[str | None] = mapped_column(Text)
    # From the original's EXIF at save (or by the ``capture`` job): docs/design.md#capture.
    taken_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # The camera's offset from UTC; NULL: its clock had no zone (taken_at is then that
    # wall-clock time read as UTC).
    taken_offset_minutes: Mapped[int | None] = mapped_column(SmallInteger)
    camera_make: Mapped[str | None] = mapped_column(Text)
    camera_model: Mapped[str | None] = mapped_column(Text)
    orientation: Mapped[int | None] = mapped_column(SmallInteger)
    # Only when the operator keeps locations (ASSET_KEEP_LOCATION).
    latitude: Mapped[float | None] = mapped_column(Double)
    longitude: Mapped[float | None] = mapped_column(Double)
    search_document: Mapped[str | None] = mapped_column(
        TSVECTOR, Computed(SEARCH_DOCUMENT_SQL, persisted=True), deferred=True
    )


class AssetJob(Base):
    """A durable job of one asset (docs/design.md#jobs): an embedding, or another ``kind``.

    The table keeps its historical name: embedding jobs came first, and every kind shares the
    same leases, retries, failure reasons and operator tools.
    """

    __tablename__ = "mem_asset_embedding_jobs"
    __table_args__ = (
        ForeignKeyConstraint(
            ["asset_id", "owner_identity"],
            ["mem_assets.id", "mem_assets.owner_identity"],
        ),
        CheckConstraint(_in("representation", REPRESENTATIONS), name="representation_known"),
        CheckConstraint(_in("kind", JOB_KINDS), name="kind_known"),
        # An embedding names its representation and dimensions; no other kind has either.
        CheckConstraint(
            "CASE WHEN kind = 'embed' THEN representation IS NOT NULL AND dimensions IS NOT NULL"
            " ELSE representation IS NULL AND dimensions IS NULL END",
            name="kind_fields",
        ),
        CheckConstraint(_in("status", JOB_STATUSES), name="status_known"),
        CheckConstraint("attempts >= 0", name="attempts_nonnegative"),
        CheckConstraint("max_attempts >= 1", name="max_attempts_positive"),
        CheckConstraint("dimensions > 0", name="dimensions_positive"),
        CheckConstraint(
            "last_error_code IS NULL OR char_length(last_error_code) <= 64",
            name="error_code_length",
        ),
        CheckConstraint(
            "last_error IS NULL OR char_length(last_error) <= 1000", name="error_length"
        ),
        CheckConstraint("jsonb_typeof(usage) = 'object'", name="usage_object"),
        Index(
            "uq_mem_asset_embedding_jobs_active",
            "asset_id",
            "representation",
            "model",
            "dimensions",
            unique=True,
            postgresql_where=text("status IN ('queued', 'running', 'retry')"),
        ),
        # One active job of every other kind per asset (revision 0016).
        Index(
            "uq_mem_asset_embedding_jobs_active_kind",
            "asset_id",
            "kind",
            unique=True,
            postgresql_where=text("kind <> 'embed' AND status IN ('queued', 'running', 'retry')"),
        ),
        Index(
            "ix_mem_asset_embedding_jobs_claimable",
            "run_after",
            postgresql_where=text("status IN ('queued', 'retry')"),
        ),
        Index("ix_mem_asset_embedding_jobs_asset", "asset_id"),
        # The operator's Jobs page lists newest first (docs/design.md#jobs).
        Index("ix_mem_asset_embedding_jobs_created", text("created_at DESC"), text("id DESC")),
    )

    id: Mapped[str] = mapped_column(Text, primary_key=True)
    asset_id: Mapped[str] = mapped_column(Text, nullable=False)
    owner_identity: Mapped[str] = mapped_column(Text, nullable=False)
    kind: Mapped[str] = mapped_column(Text, nullable=False, server_default="embed")
    representation: Mapped[str | None] = mapped_column(Text)
    model: Mapped[str] = mapped_column(Text, nullable=False)
    dimensions: Mapped[int | None] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(Text, nullable=False, server_default="queued")
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    max_attempts: Mapped[int] = mapped_column(Integer, nullable=False, server_default="5")
    run_after: Mapped[datetime] = _now()
    lease_owner: Mapped[str | None] = mapped_column(Text)
    lease_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_error_code: Mapped[str | None] = mapped_column(Text)
    last_error: Mapped[str | None] = mapped_column(Text)
    usage: Mapped[dict[str, Any]] = mapped_column(
        JSONB, nullable=False, server_default=text("'{}'::jsonb")
    )
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()
    completed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class AssetUploadReservation(Base):
    """A bounded, expiring reservation of quota bytes (docs/design.md#reservations)."""

    __tablename__ = "mem_asset_upload_reservations"
    __table_args__ = (
        ForeignKeyConstraint(
            ["owner_identity"], ["mem_asset_namespaces.owner_identity"], ondelete="CASCADE"
        ),
        CheckConstraint("expected_bytes > 0", name="expected_positive"),
        CheckConstraint(_in("status", RESERVATION_STATUSES), name="status_known"),
        CheckConstraint(
            "idempotency_key IS NULL OR char_length(idempotency_key) BETWEEN 1 AND 200",
            name="idempotency_key_length",
        ),
        CheckConstraint("char_length(operation) BETWEEN 1 AND 64", name="operation_length"),
        CheckConstraint("reserved_bytes >= 0", name="reserved_nonnegative"),
        CheckConstraint(
            "jsonb_typeof(request) = 'object' AND pg_column_size(request) <= 16384",
            name="request_bounded",
        ),
        Index(
            "uq_mem_asset_upload_reservations_idempotency",
            "owner_identity",
            "operation",
            "idempotency_key",
            unique=True,
            postgresql_where=text("idempotency_key IS NOT NULL"),
        ),
        Index(
            "ix_mem_asset_upload_reservations_active_expiry",
            "expires_at",
            postgresql_where=text("status = 'active'"),
        ),
    )

    id: Mapped[str] = mapped_column(Text, primary_key=True)
    owner_identity: Mapped[str] = mapped_column(Text, nullable=False)
    operation: Mapped[str] = mapped_column(Text, nullable=False)
    idempotency_key: Mapped[str | None] = mapped_column(Text)
    expected_bytes: Mapped[int] = mapped_column(BigInteger, nullable=False)
    # The bytes this reservation currently adds to its namespace's reserved_bytes.
    reserved_bytes: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default="0")
    status: Mapped[str] = mapped_column(Text, nullable=False, server_default="active")
    asset_id: Mapped[str | None] = mapped_column(Text)
    vault: Mapped[str | None] = mapped_column(Text)
    # Direct uploads: the object id and key the signed PUT writes to, decided at initiation.
    object_id: Mapped[str | None] = mapped_column(Text)
    # What was asked (a fingerprint for idempotency, and the save input of a direct upload).
    request: Mapped[dict[str, Any]] = mapped_column(
        JSONB, nullable=False, server_default=text("'{}'::jsonb")
    )
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()


class OrphanCandidate(Base):
    """Bytes written to the store whose database commit failed (docs/design.md#orphans).

    Reconciliation removes them after a safety window unless an object row claims the key.
    """

    __tablename__ = "mem_asset_orphan_candidates"
    __table_args__ = (
        CheckConstraint("char_length(reason) BETWEEN 1 AND 200", name="reason_length"),
        Index(
            "ix_mem_asset_orphan_candidates_open",
            "created_at",
            postgresql_where=text("resolved_at IS NULL"),
        ),
    )

    id: Mapped[str] = mapped_column(Text, primary_key=True)
    owner_identity: Mapped[str] = mapped_column(Text, nullable=False)
    storage_key: Mapped[str] = mapped_column(Text, nullable=False, unique=True)
    reason: Mapped[str] = mapped_column(Text, nullable=False)
    created_at: Mapped[datetime] = _now()
    resolved_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class ScrapeArtifact(Base):
    """Validated image bytes a scraper tool stored for one owner until they expire.

    An artifact is private to its owner and belongs to no vault; ``image_asset_save`` with its
    ``artifactId`` turns it into an asset (docs/design.md#artifacts). Its bytes live under the
    owner's namespace prefix; the composite foreign key ties the row to that namespace, and the
    key CHECK ties the stored key to the row's own namespace and id, so no row can point at
    another owner's bytes.
    """

    __tablename__ = "mem_scrape_artifacts"
    __table_args__ = (
        ForeignKeyConstraint(
            ["owner_identity", "namespace_id"],
            ["mem_asset_namespaces.owner_identity", "mem_asset_namespaces.namespace_id"],
            ondelete="CASCADE",
        ),
        CheckConstraint(
            "position('/tenants/' || namespace_id || '/artifacts/' || id || '/' "
            "in storage_key) > 0",
            name="key_in_namespace",
        ),
        CheckConstraint(_in("source_kind", ARTIFACT_SOURCE_KINDS), name="source_kind_known"),
        CheckConstraint("sha256 ~ '^[0-9a-f]{64}$'", name="sha256_hex"),
        CheckConstraint(
            _in("mime_type", ("image/jpeg", "image/png", "image/webp", "image/gif")),
            name="mime_known",
        ),
        CheckConstraint("bytes > 0", name="bytes_positive"),
        CheckConstraint("width > 0 AND height > 0", name="dimensions_positive"),
        CheckConstraint(
            "jsonb_typeof(source_ref) = 'object' AND pg_column_size(source_ref) <= 8192",
            name="source_ref_bounded",
        ),
        CheckConstraint("expires_at > created_at", name="expires_after_created"),
        Index("ix_mem_scrape_artifacts_owner_expires", "owner_identity", "expires_at"),
        Index("ix_mem_scrape_artifacts_expires", "expires_at"),
    )

    id: Mapped[str] = mapped_column(Text, primary_key=True)
    owner_identity: Mapped[str] = mapped_column(Text, nullable=False)
    namespace_id: Mapped[str] = mapped_column(Text, nullable=False)
    storage_key: Mapped[str] = mapped_column(Text, nullable=False, unique=True)
    sha256: Mapped[str] = mapped_column(Text, nullable=False)
    mime_type: Mapped[str] = mapped_column(Text, nullable=False)
    bytes: Mapped[int] = mapped_column(BigInteger, nullable=False)
    width: Mapped[int] = mapped_column(Integer, nullable=False)
    height: Mapped[int] = mapped_column(Integer, nullable=False)
    source_kind: Mapped[str] = mapped_column(Text, nullable=False)
    source_ref: Mapped[dict[str, Any]] = mapped_column(
        JSONB, nullable=False, server_default=text("'{}'::jsonb")
    )
    created_at: Mapped[datetime] = _now()
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)


# --- metering and audit ---------------------------------------------------------------------


class AssetContext(Base):
    """The generated context of one asset (docs/generated-context.md): gated, bound, reviewable.

    One row per asset at most. ``context`` is the schema-valid object the model answered;
    ``source_sha256`` the SHA-256 of the rendition it was generated from: once the asset's
    bytes differ it is stale and never used. A person may accept it (``review``) or clear it
    (the row is deleted).
    """

    __tablename__ = "mem_asset_contexts"
    __table_args__ = (
        ForeignKeyConstraint(
            ["asset_id", "owner_identity"],
            ["mem_assets.id", "mem_assets.owner_identity"],
            ondelete="CASCADE",
        ),
        CheckConstraint("source_sha256 ~ '^[0-9a-f]{64}$'", name="source_sha256_hex"),
        CheckConstraint("char_length(model) BETWEEN 1 AND 200", name="model_length"),
        CheckConstraint(
            "jsonb_typeof(context) = 'object' AND pg_column_size(context) <= 16384",
            name="context_bounded",
        ),
        CheckConstraint(_in("review", CONTEXT_REVIEWS), name="review_known"),
    )

    asset_id: Mapped[str] = mapped_column(Text, primary_key=True)
    owner_identity: Mapped[str] = mapped_column(Text, nullable=False)
    object_id: Mapped[str] = mapped_column(Text, nullable=False)
    source_sha256: Mapped[str] = mapped_column(Text, nullable=False)
    model: Mapped[str] = mapped_column(Text, nullable=False)
    context: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False)
    generated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    job_id: Mapped[str | None] = mapped_column(Text)
    review: Mapped[str] = mapped_column(Text, nullable=False, server_default="unreviewed")
    reviewed_by: Mapped[str | None] = mapped_column(Text)
    reviewed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


NEAR_DUPLICATE_DECISIONS = ("open", "dismissed")


class NearDuplicatePair(Base):
    """Two assets of one vault whose visual vectors are near (docs/design.md#near-duplicates).

    Keyed by the two asset ids in a canonical order (``asset_a < asset_b``), so a pair found
    from either end, or again by a later job, is the same row. ``index_name``, ``distance`` and
    ``found_at`` are those of the newest finding: a pair is read only while ``index_name`` is
    the active index. ``decision`` is a person's or an agent's: a later finding updates the
    distance and never the decision, so a dismissed pair stays dismissed.
    """

    __tablename__ = "mem_asset_near_duplicates"
    __table_args__ = (
        ForeignKeyConstraint(
            ["asset_a", "owner_identity"],
            ["mem_assets.id", "mem_assets.owner_identity"],
            ondelete="CASCADE",
        ),
        ForeignKeyConstraint(
            ["asset_b", "owner_identity"],
            ["mem_assets.id", "mem_assets.owner_identity"],
            ondelete="CASCADE",
        ),
        CheckConstraint("asset_a < asset_b", name="pair_ordered"),
        CheckConstraint("distance >= 0 AND distance <= 2", name="distance_range"),
        CheckConstraint(_in("decision", NEAR_DUPLICATE_DECISIONS), name="decision_known"),
        CheckConstraint(
            "(decision = 'open') = (decided_at IS NULL AND decided_by IS NULL)",
            name="decision_recorded",
        ),
        # A vault's open pairs (its clusters), and the pairs of an asset from its second end.
        Index(
            "ix_mem_asset_near_duplicates_vault_open",
            "owner_identity",
            "vault",
            "index_name",
            postgresql_where=text("decision = 'open'"),
        ),
        Index("ix_mem_asset_near_duplicates_asset_b", "asset_b"),
    )

    asset_a: Mapped[str] = mapped_column(Text, primary_key=True)
    asset_b: Mapped[str] = mapped_column(Text, primary_key=True)
    owner_identity: Mapped[str] = mapped_column(Text, nullable=False)
    vault: Mapped[str] = mapped_column(Text, nullable=False)
    index_name: Mapped[str] = mapped_column(Text, nullable=False)
    distance: Mapped[float] = mapped_column(Double, nullable=False)
    found_at: Mapped[datetime] = _now()
    decision: Mapped[str] = mapped_column(Text, nullable=False, server_default="open")
    decided_by: Mapped[str | None] = mapped_column(Text)
    decided_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class UsageLedgerEntry(Base):
    """Provider usage, one row per metered call (docs/design.md#ledgers)."""

    __tablename__ = "mem_usage_ledger"
    __table_args__ = (
        CheckConstraint(_in("source", USAGE_SOURCES), name="source_known"),
        CheckConstraint(
            "total_tokens >= 0 AND prompt_tokens >= 0 AND image_tokens >= 0",
            name="tokens_nonnegative",
        ),
        Index("ix_mem_usage_ledger_owner_created", "owner_identity", text("created_at DESC")),
    )

    id: Mapped[str] = mapped_column(Text, primary_key=True)
    owner_identity: Mapped[str] = mapped_column(
        Text, ForeignKey("mem_identities.owner_identity", ondelete="CASCADE"), nullable=False
    )
    source: Mapped[str] = mapped_column(Text, nullable=False)
    model: Mapped[str] = mapped_column(Text, nullable=False)
    total_tokens: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    prompt_tokens: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    image_tokens: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    asset_id: Mapped[str | None] = mapped_column(Text)
    job_id: Mapped[str | None] = mapped_column(Text)
    request_id: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = _now()


class ProvenanceEvent(Base):
    """Who did what to which target, and how it ended; no secrets (docs/design.md#ledgers)."""

    __tablename__ = "mem_provenance"
    __table_args__ = (
        CheckConstraint(_in("operation", PROVENANCE_OPERATIONS), name="operation_known"),
        CheckConstraint(_in("outcome", PROVENANCE_OUTCOMES), name="outcome_known"),
        CheckConstraint(
            "jsonb_typeof(detail) = 'object' AND pg_column_size(detail) <= 4096",
            name="detail_bounded",
        ),
        Index("ix_mem_provenance_owner_created", "owner_identity", text("created_at DESC")),
        Index("ix_mem_provenance_target", "target_id"),
    )

    id: Mapped[str] = mapped_column(Text, primary_key=True)
    operation: Mapped[str] = mapped_column(Text, nullable=False)
    actor_identity: Mapped[str] = mapped_column(Text, nullable=False)
    owner_identity: Mapped[str | None] = mapped_column(Text)
    vault: Mapped[str | None] = mapped_column(Text)
    target_kind: Mapped[str | None] = mapped_column(Text)
    target_id: Mapped[str | None] = mapped_column(Text)
    outcome: Mapped[str] = mapped_column(Text, nullable=False)
    detail: Mapped[dict[str, Any]] = mapped_column(
        JSONB, nullable=False, server_default=text("'{}'::jsonb")
    )
    created_at: Mapped[datetime] = _now()


class ReconcileRun(Base):
    """One pass of the store reconciliation and what it found (docs/design.md#reconciliation).

    Written when a pass ends (the worker's sweep or ``memory-server admin reconcile``), so the
    operator's Jobs page shows reconciliation work that happened, never a guessed one.
    """

    __tablename__ = "mem_reconcile_runs"
    __table_args__ = (
        CheckConstraint(_in("status", RECONCILE_RUN_STATUSES), name="status_known"),
        CheckConstraint(
            "namespaces >= 0 AND listed >= 0 AND removed >= 0 AND removed_bytes >= 0 "
            "AND waiting >= 0 AND foreign_keys >= 0",
            name="counts_nonnegative",
        ),
        CheckConstraint("finished_at >= started_at", name="finished_after_started"),
        CheckConstraint(
            "error_code IS NULL OR char_length(error_code) <= 64", name="error_code_length"
        ),
        CheckConstraint("error IS NULL OR char_length(error) <= 1000", name="error_length"),
        Index("ix_mem_reconcile_runs_started", text("started_at DESC"), text("id DESC")),
    )

    id: Mapped[str] = mapped_column(Text, primary_key=True)
    actor_identity: Mapped[str] = mapped_column(Text, nullable=False)
    status: Mapped[str] = mapped_column(Text, nullable=False)
    namespaces: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    listed: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    removed: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    removed_bytes: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default="0")
    waiting: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    foreign_keys: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    error_code: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    finished_at: Mapped[datetime] = _now()


# --- vector index registry (docs/design.md#index-rebuild) ------------------------------------


class VectorIndexEntry(Base):
    """A physical, versioned vector index (one table named ``name``, created by ``vectors``)."""

    __tablename__ = "mem_vector_indexes"
    __table_args__ = (
        CheckConstraint("name ~ '^[a-z][a-z0-9_]{0,62}$'", name="name_identifier"),
        CheckConstraint("element_type IN ('halfvec', 'vector')", name="element_known"),
        CheckConstraint("dimensions BETWEEN 1 AND 4000", name="dimensions_range"),
    )

    name: Mapped[str] = mapped_column(Text, primary_key=True)
    dimensions: Mapped[int] = mapped_column(Integer, nullable=False)
    element_type: Mapped[str] = mapped_column(Text, nullable=False)
    created_at: Mapped[datetime] = _now()
    # The embedder that fills it (no secrets): every vector of the table is of this model, and
    # a search embeds its query with it. NULL only for an index made before revision 0014
    # until a process records the configured embedder's identity.
    provider: Mapped[str | None] = mapped_column(Text)
    model: Mapped[str | None] = mapped_column(Text)


REBUILD_STATES = ("filling", "switched")


class VectorRebuild(Base):
    """An index being filled beside the one an alias points at (``memory-server reindex``).

    While ``filling``, every vector write of the alias's index is also made in ``target_index``
    (with the target's embedder); ``cursor`` is the last asset id the rebuild walk finished.
    """

    __tablename__ = "mem_vector_rebuilds"
    __table_args__ = (
        CheckConstraint(_in("state", REBUILD_STATES), name="state_known"),
        CheckConstraint("target_index <> source_index", name="target_not_source"),
        Index(
            "uq_mem_vector_rebuilds_one_filling_per_alias",
            "alias",
            unique=True,
            postgresql_where=text("state = 'filling'"),
        ),
    )

    target_index: Mapped[str] = mapped_column(
        Text, ForeignKey("mem_vector_indexes.name", ondelete="CASCADE"), primary_key=True
    )
    source_index: Mapped[str] = mapped_column(
        Text, ForeignKey("mem_vector_indexes.name", ondelete="CASCADE"), nullable=False
    )
    alias: Mapped[str] = mapped_column(Text, nullable=False)
    state: Mapped[str] = mapped_column(Text, nullable=False, server_default="filling")
    cursor: Mapped[str | None] = mapped_column(Text)
    embedded: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    skipped: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    started_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()
    switched_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class VectorIndexAlias(Base):
    """Which physical index an environment reads and writes; switched in one transaction."""

    __tablename__ = "mem_vector_index_aliases"
    __table_args__ = (CheckConstraint("alias ~ '^[a-z][a-z0-9_]{0,62}$'", name="alias_identifier"),)

    alias: Mapped[str] = mapped_column(Text, primary_key=True)
    index_name: Mapped[str] = mapped_column(
        Text, ForeignKey("mem_vector_indexes.name"), nullable=False
    )
    updated_at: Mapped[datetime] = _now()
