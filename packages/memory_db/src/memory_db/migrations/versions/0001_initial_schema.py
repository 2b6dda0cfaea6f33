"""Initial schema: the asset plane, identities, keys, vaults, grants, usage and provenance.

Revision ID: 0001
Revises:
Create Date: 2026-11-30 06:15:52.568219
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


FOLDER_TREE_FUNCTION = """
CREATE FUNCTION mem_asset_folders_check_tree() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    depth_above integer := 0;
    height_below integer := 0;
    cursor_id text := NEW.parent_id;
BEGIN
    -- Serialise tree changes per project: two concurrent moves could otherwise each pass this
    -- check against the old tree and together form a cycle.
    PERFORM 1 FROM mem_asset_projects WHERE id = NEW.project_id FOR UPDATE;
    WHILE cursor_id IS NOT NULL LOOP
        IF cursor_id = NEW.id THEN
            RAISE EXCEPTION 'a folder cannot be moved under itself or one of its subfolders'
                USING ERRCODE = 'check_violation', CONSTRAINT = 'folder_cycle';
        END IF;
        depth_above := depth_above + 1;
        EXIT WHEN depth_above > 64;
        SELECT parent_id INTO cursor_id FROM mem_asset_folders WHERE id = cursor_id;
    END LOOP;
    IF TG_OP = 'UPDATE' THEN
        WITH RECURSIVE sub(id, lvl) AS (
            SELECT id, 1 FROM mem_asset_folders WHERE parent_id = NEW.id AND deleted_at IS NULL
            UNION ALL
            SELECT f.id, s.lvl + 1 FROM mem_asset_folders f JOIN sub s ON f.parent_id = s.id
            WHERE f.deleted_at IS NULL AND s.lvl < 64
        )
        SELECT coalesce(max(lvl), 0) INTO height_below FROM sub;
    END IF;
    IF depth_above + 1 + height_below > 8 THEN
        RAISE EXCEPTION 'folders can be nested at most 8 deep'
            USING ERRCODE = 'check_violation', CONSTRAINT = 'folder_depth';
    END IF;
    RETURN NEW;
END
$$;
"""

FOLDER_TREE_TRIGGER = """
CREATE TRIGGER trg_mem_asset_folders_check_tree
BEFORE INSERT OR UPDATE OF parent_id, project_id ON mem_asset_folders
FOR EACH ROW EXECUTE FUNCTION mem_asset_folders_check_tree();
"""


def upgrade() -> None:
    # pgvector: the versioned asset vector indexes live in this database.
    op.execute("CREATE EXTENSION IF NOT EXISTS vector")
    op.create_table(
        "mem_identities",
        sa.Column("owner_identity", sa.Text(), nullable=False),
        sa.Column("quota_bytes", sa.BigInteger(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "owner_identity = lower(owner_identity) AND char_length(owner_identity) BETWEEN 3 AND 254",
            name=op.f("ck_mem_identities_identity_normalised"),
        ),
        sa.CheckConstraint("quota_bytes >= 0", name=op.f("ck_mem_identities_quota_nonnegative")),
        sa.PrimaryKeyConstraint("owner_identity", name=op.f("pk_mem_identities")),
    )
    op.create_table(
        "mem_provenance",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("operation", sa.Text(), nullable=False),
        sa.Column("actor_identity", sa.Text(), nullable=False),
        sa.Column("owner_identity", sa.Text(), nullable=True),
        sa.Column("vault", sa.Text(), nullable=True),
        sa.Column("target_kind", sa.Text(), nullable=True),
        sa.Column("target_id", sa.Text(), nullable=True),
        sa.Column("outcome", sa.Text(), nullable=False),
        sa.Column(
            "detail",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "jsonb_typeof(detail) = 'object' AND pg_column_size(detail) <= 4096",
            name=op.f("ck_mem_provenance_detail_bounded"),
        ),
        sa.CheckConstraint(
            "operation IN ('asset_project_create', 'asset_project_archive', 'asset_folder_create', 'asset_folder_delete', 'asset_save', 'asset_embed', 'asset_search', 'asset_move', 'asset_delete', 'asset_object_purge', 'asset_reconcile', 'identity_create', 'api_key_create', 'api_key_revoke', 'vault_create', 'vault_grant')",
            name=op.f("ck_mem_provenance_operation_known"),
        ),
        sa.CheckConstraint(
            "outcome IN ('succeeded', 'failed', 'denied')",
            name=op.f("ck_mem_provenance_outcome_known"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_mem_provenance")),
    )
    op.create_index(
        "ix_mem_provenance_owner_created",
        "mem_provenance",
        ["owner_identity", sa.literal_column("created_at DESC")],
        unique=False,
    )
    op.create_index("ix_mem_provenance_target", "mem_provenance", ["target_id"], unique=False)
    op.create_table(
        "mem_api_keys",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("owner_identity", sa.Text(), nullable=False),
        sa.Column("key_hash", sa.Text(), nullable=False),
        sa.Column("label", sa.Text(), nullable=True),
        sa.Column("scopes", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "cardinality(scopes) >= 1 AND scopes <@ ARRAY['read','write','destructive','admin']::text[]",
            name=op.f("ck_mem_api_keys_scopes_known"),
        ),
        sa.CheckConstraint(
            "key_hash ~ '^[0-9a-f]{64}$'", name=op.f("ck_mem_api_keys_key_hash_hex")
        ),
        sa.ForeignKeyConstraint(
            ["owner_identity"],
            ["mem_identities.owner_identity"],
            name=op.f("fk_mem_api_keys_owner_identity_mem_identities"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_mem_api_keys")),
        sa.UniqueConstraint("key_hash", name=op.f("uq_mem_api_keys_key_hash")),
    )
    op.create_table(
        "mem_asset_namespaces",
        sa.Column("owner_identity", sa.Text(), nullable=False),
        sa.Column("namespace_id", sa.Text(), nullable=False),
        sa.Column("used_bytes", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("reserved_bytes", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "reserved_bytes >= 0", name=op.f("ck_mem_asset_namespaces_reserved_nonnegative")
        ),
        sa.CheckConstraint(
            "used_bytes >= 0", name=op.f("ck_mem_asset_namespaces_used_nonnegative")
        ),
        sa.ForeignKeyConstraint(
            ["owner_identity"],
            ["mem_identities.owner_identity"],
            name=op.f("fk_mem_asset_namespaces_owner_identity_mem_identities"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("owner_identity", name=op.f("pk_mem_asset_namespaces")),
        sa.UniqueConstraint("namespace_id", name=op.f("uq_mem_asset_namespaces_namespace_id")),
        sa.UniqueConstraint(
            "owner_identity",
            "namespace_id",
            name=op.f("uq_mem_asset_namespaces_owner_identity_namespace_id"),
        ),
    )
    op.create_table(
        "mem_usage_ledger",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("owner_identity", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("total_tokens", sa.Integer(), server_default="0", nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), server_default="0", nullable=False),
        sa.Column("image_tokens", sa.Integer(), server_default="0", nullable=False),
        sa.Column("asset_id", sa.Text(), nullable=True),
        sa.Column("job_id", sa.Text(), nullable=True),
        sa.Column("request_id", sa.Text(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "source IN ('embed_image_document', 'embed_image_query', 'rerank_image')",
            name=op.f("ck_mem_usage_ledger_source_known"),
        ),
        sa.CheckConstraint(
            "total_tokens >= 0 AND prompt_tokens >= 0 AND image_tokens >= 0",
            name=op.f("ck_mem_usage_ledger_tokens_nonnegative"),
        ),
        sa.ForeignKeyConstraint(
            ["owner_identity"],
            ["mem_identities.owner_identity"],
            name=op.f("fk_mem_usage_ledger_owner_identity_mem_identities"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_mem_usage_ledger")),
    )
    op.create_index(
        "ix_mem_usage_ledger_owner_created",
        "mem_usage_ledger",
        ["owner_identity", sa.literal_column("created_at DESC")],
        unique=False,
    )
    op.create_table(
        "mem_vaults",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("owner_identity", sa.Text(), nullable=False),
        sa.Column("handle", sa.Text(), nullable=False),
        sa.Column("physical_vault", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "char_length(handle) BETWEEN 1 AND 64 AND handle = btrim(handle) AND handle !~ '[/[:cntrl:]]'",
            name=op.f("ck_mem_vaults_handle_shape"),
        ),
        sa.ForeignKeyConstraint(
            ["owner_identity"],
            ["mem_identities.owner_identity"],
            name=op.f("fk_mem_vaults_owner_identity_mem_identities"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_mem_vaults")),
        sa.UniqueConstraint(
            "owner_identity",
            "physical_vault",
            name=op.f("uq_mem_vaults_owner_identity_physical_vault"),
        ),
        sa.UniqueConstraint("physical_vault", name=op.f("uq_mem_vaults_physical_vault")),
    )
    op.create_index(
        "uq_mem_vaults_owner_handle",
        "mem_vaults",
        ["owner_identity", sa.literal_column("lower(handle)")],
        unique=True,
    )
    op.create_table(
        "mem_asset_objects",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("owner_identity", sa.Text(), nullable=False),
        sa.Column("namespace_id", sa.Text(), nullable=False),
        sa.Column("sha256", sa.Text(), nullable=False),
        sa.Column("storage_key", sa.Text(), nullable=False),
        sa.Column("preview_storage_key", sa.Text(), nullable=True),
        sa.Column("mime_type", sa.Text(), nullable=False),
        sa.Column("extension", sa.Text(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("preview_bytes", sa.BigInteger(), nullable=True),
        sa.Column("width", sa.Integer(), nullable=False),
        sa.Column("height", sa.Integer(), nullable=False),
        sa.Column("etag", sa.Text(), nullable=True),
        sa.Column("version_id", sa.Text(), nullable=True),
        sa.Column("status", sa.Text(), server_default="pending", nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "extension IN ('jpg', 'png', 'webp', 'gif')",
            name=op.f("ck_mem_asset_objects_extension_known"),
        ),
        sa.CheckConstraint(
            "mime_type IN ('image/jpeg', 'image/png', 'image/webp', 'image/gif')",
            name=op.f("ck_mem_asset_objects_mime_known"),
        ),
        sa.CheckConstraint(
            "sha256 ~ '^[0-9a-f]{64}$'", name=op.f("ck_mem_asset_objects_sha256_hex")
        ),
        sa.CheckConstraint(
            "status IN ('pending', 'available', 'quarantined', 'deleting', 'deleted')",
            name=op.f("ck_mem_asset_objects_status_known"),
        ),
        sa.CheckConstraint("bytes > 0", name=op.f("ck_mem_asset_objects_bytes_positive")),
        sa.CheckConstraint(
            "preview_bytes IS NULL OR preview_bytes > 0",
            name=op.f("ck_mem_asset_objects_preview_bytes_positive"),
        ),
        sa.CheckConstraint(
            "width > 0 AND height > 0", name=op.f("ck_mem_asset_objects_dimensions_positive")
        ),
        sa.ForeignKeyConstraint(
            ["owner_identity", "namespace_id"],
            ["mem_asset_namespaces.owner_identity", "mem_asset_namespaces.namespace_id"],
            name=op.f("fk_mem_asset_objects_owner_identity_namespace_id_mem_asset_namespaces"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_mem_asset_objects")),
        sa.UniqueConstraint(
            "id", "owner_identity", name=op.f("uq_mem_asset_objects_id_owner_identity")
        ),
        sa.UniqueConstraint("storage_key", name=op.f("uq_mem_asset_objects_storage_key")),
    )
    op.create_index(
        "ix_mem_asset_objects_status_updated",
        "mem_asset_objects",
        ["status", "updated_at"],
        unique=False,
    )
    op.create_index(
        "uq_mem_asset_objects_owner_sha256_active",
        "mem_asset_objects",
        ["owner_identity", "sha256"],
        unique=True,
        postgresql_where=sa.text("status IN ('pending', 'available', 'quarantined')"),
    )
    op.create_table(
        "mem_asset_projects",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("owner_identity", sa.Text(), nullable=False),
        sa.Column("vault", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("status", sa.Text(), server_default="active", nullable=False),
        sa.Column("created_by", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "status IN ('active', 'archived', 'deleted')",
            name=op.f("ck_mem_asset_projects_status_known"),
        ),
        sa.CheckConstraint(
            "char_length(name) BETWEEN 1 AND 120", name=op.f("ck_mem_asset_projects_name_length")
        ),
        sa.CheckConstraint(
            "description IS NULL OR char_length(description) <= 2000",
            name=op.f("ck_mem_asset_projects_description_length"),
        ),
        sa.ForeignKeyConstraint(
            ["owner_identity", "vault"],
            ["mem_vaults.owner_identity", "mem_vaults.physical_vault"],
            name=op.f("fk_mem_asset_projects_owner_identity_vault_mem_vaults"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_mem_asset_projects")),
        sa.UniqueConstraint(
            "id",
            "owner_identity",
            "vault",
            name=op.f("uq_mem_asset_projects_id_owner_identity_vault"),
        ),
    )
    op.create_index(
        "uq_mem_asset_projects_active_name",
        "mem_asset_projects",
        ["owner_identity", "vault", sa.literal_column("lower(name)")],
        unique=True,
        postgresql_where=sa.text("status <> 'deleted'"),
    )
    op.create_table(
        "mem_asset_upload_reservations",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("owner_identity", sa.Text(), nullable=False),
        sa.Column("operation", sa.Text(), nullable=False),
        sa.Column("idempotency_key", sa.Text(), nullable=True),
        sa.Column("expected_bytes", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.Text(), server_default="active", nullable=False),
        sa.Column("asset_id", sa.Text(), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "status IN ('active', 'finalized', 'released', 'expired')",
            name=op.f("ck_mem_asset_upload_reservations_status_known"),
        ),
        sa.CheckConstraint(
            "char_length(operation) BETWEEN 1 AND 64",
            name=op.f("ck_mem_asset_upload_reservations_operation_length"),
        ),
        sa.CheckConstraint(
            "expected_bytes > 0", name=op.f("ck_mem_asset_upload_reservations_expected_positive")
        ),
        sa.CheckConstraint(
            "idempotency_key IS NULL OR char_length(idempotency_key) BETWEEN 1 AND 200",
            name=op.f("ck_mem_asset_upload_reservations_idempotency_key_length"),
        ),
        sa.ForeignKeyConstraint(
            ["owner_identity"],
            ["mem_asset_namespaces.owner_identity"],
            name=op.f("fk_mem_asset_upload_reservations_owner_identity_mem_asset_namespaces"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_mem_asset_upload_reservations")),
    )
    op.create_index(
        "ix_mem_asset_upload_reservations_active_expiry",
        "mem_asset_upload_reservations",
        ["expires_at"],
        unique=False,
        postgresql_where=sa.text("status = 'active'"),
    )
    op.create_index(
        "uq_mem_asset_upload_reservations_idempotency",
        "mem_asset_upload_reservations",
        ["owner_identity", "operation", "idempotency_key"],
        unique=True,
        postgresql_where=sa.text("idempotency_key IS NOT NULL"),
    )
    op.create_table(
        "mem_vault_grants",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("owner_identity", sa.Text(), nullable=False),
        sa.Column("physical_vault", sa.Text(), nullable=False),
        sa.Column("grantee_identity", sa.Text(), nullable=False),
        sa.Column("permission", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "permission IN ('read', 'write', 'admin')",
            name=op.f("ck_mem_vault_grants_permission_known"),
        ),
        sa.CheckConstraint(
            "grantee_identity <> owner_identity", name=op.f("ck_mem_vault_grants_not_self")
        ),
        sa.ForeignKeyConstraint(
            ["grantee_identity"],
            ["mem_identities.owner_identity"],
            name=op.f("fk_mem_vault_grants_grantee_identity_mem_identities"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["owner_identity", "physical_vault"],
            ["mem_vaults.owner_identity", "mem_vaults.physical_vault"],
            name=op.f("fk_mem_vault_grants_owner_identity_physical_vault_mem_vaults"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_mem_vault_grants")),
        sa.UniqueConstraint(
            "physical_vault",
            "grantee_identity",
            name=op.f("uq_mem_vault_grants_physical_vault_grantee_identity"),
        ),
    )
    op.create_index(
        "ix_mem_vault_grants_grantee", "mem_vault_grants", ["grantee_identity"], unique=False
    )
    op.create_table(
        "mem_asset_folders",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("owner_identity", sa.Text(), nullable=False),
        sa.Column("vault", sa.Text(), nullable=False),
        sa.Column("project_id", sa.Text(), nullable=False),
        sa.Column("parent_id", sa.Text(), nullable=True),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "char_length(name) BETWEEN 1 AND 120", name=op.f("ck_mem_asset_folders_name_length")
        ),
        sa.CheckConstraint(
            "parent_id IS NULL OR parent_id <> id", name=op.f("ck_mem_asset_folders_not_own_parent")
        ),
        sa.ForeignKeyConstraint(
            ["parent_id", "project_id", "owner_identity", "vault"],
            [
                "mem_asset_folders.id",
                "mem_asset_folders.project_id",
                "mem_asset_folders.owner_identity",
                "mem_asset_folders.vault",
            ],
            name="fk_mem_asset_folders_parent",
        ),
        sa.ForeignKeyConstraint(
            ["project_id", "owner_identity", "vault"],
            [
                "mem_asset_projects.id",
                "mem_asset_projects.owner_identity",
                "mem_asset_projects.vault",
            ],
            name=op.f("fk_mem_asset_folders_project_id_owner_identity_vault_mem_asset_projects"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_mem_asset_folders")),
        sa.UniqueConstraint(
            "id",
            "project_id",
            "owner_identity",
            "vault",
            name=op.f("uq_mem_asset_folders_id_project_id_owner_identity_vault"),
        ),
    )
    op.create_index(
        "ix_mem_asset_folders_project_parent",
        "mem_asset_folders",
        ["project_id", "parent_id"],
        unique=False,
    )
    op.create_index(
        "uq_mem_asset_folders_active_sibling_name",
        "mem_asset_folders",
        [
            "project_id",
            sa.literal_column("coalesce(parent_id, '')"),
            sa.literal_column("lower(name)"),
        ],
        unique=True,
        postgresql_where=sa.text("deleted_at IS NULL"),
    )
    op.create_table(
        "mem_assets",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("owner_identity", sa.Text(), nullable=False),
        sa.Column("vault", sa.Text(), nullable=False),
        sa.Column("project_id", sa.Text(), nullable=True),
        sa.Column("folder_id", sa.Text(), nullable=True),
        sa.Column("object_id", sa.Text(), nullable=False),
        sa.Column("media_kind", sa.Text(), server_default="image", nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("alt_text", sa.Text(), nullable=True),
        sa.Column("source_url", sa.Text(), nullable=True),
        sa.Column("source_url_hash", sa.Text(), nullable=True),
        sa.Column("source_kind", sa.Text(), nullable=False),
        sa.Column(
            "source_ref",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "tags",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "metadata",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("status", sa.Text(), server_default="processing", nullable=False),
        sa.Column("embedding_status", sa.Text(), server_default="pending", nullable=False),
        sa.Column("failure_code", sa.Text(), nullable=True),
        sa.Column("failure_message", sa.Text(), nullable=True),
        sa.Column("created_by", sa.Text(), nullable=False),
        sa.Column("updated_by", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "embedding_status IN ('pending', 'running', 'ready', 'partial', 'failed')",
            name=op.f("ck_mem_assets_embedding_status_known"),
        ),
        sa.CheckConstraint(
            "jsonb_typeof(metadata) = 'object' AND pg_column_size(metadata) <= 16384",
            name=op.f("ck_mem_assets_metadata_bounded"),
        ),
        sa.CheckConstraint(
            "jsonb_typeof(source_ref) = 'object' AND pg_column_size(source_ref) <= 8192",
            name=op.f("ck_mem_assets_source_ref_bounded"),
        ),
        sa.CheckConstraint("jsonb_typeof(tags) = 'array'", name=op.f("ck_mem_assets_tags_array")),
        sa.CheckConstraint("media_kind = 'image'", name=op.f("ck_mem_assets_media_kind_image")),
        sa.CheckConstraint(
            "source_kind IN ('upload', 'scrape', 'screenshot', 'instagram', 'external_url', 'import')",
            name=op.f("ck_mem_assets_source_kind_known"),
        ),
        sa.CheckConstraint(
            "source_url_hash IS NULL OR source_url_hash ~ '^[0-9a-f]{64}$'",
            name=op.f("ck_mem_assets_source_url_hash_hex"),
        ),
        sa.CheckConstraint(
            "status IN ('processing', 'ready', 'failed', 'deleting', 'deleted')",
            name=op.f("ck_mem_assets_status_known"),
        ),
        sa.CheckConstraint(
            "alt_text IS NULL OR char_length(alt_text) <= 2000",
            name=op.f("ck_mem_assets_alt_length"),
        ),
        sa.CheckConstraint(
            "char_length(title) BETWEEN 1 AND 240", name=op.f("ck_mem_assets_title_length")
        ),
        sa.CheckConstraint(
            "description IS NULL OR char_length(description) <= 4000",
            name=op.f("ck_mem_assets_description_length"),
        ),
        sa.CheckConstraint(
            "failure_code IS NULL OR char_length(failure_code) <= 64",
            name=op.f("ck_mem_assets_failure_code_length"),
        ),
        sa.CheckConstraint(
            "failure_message IS NULL OR char_length(failure_message) <= 1000",
            name=op.f("ck_mem_assets_failure_message_length"),
        ),
        sa.CheckConstraint(
            "folder_id IS NULL OR project_id IS NOT NULL",
            name=op.f("ck_mem_assets_folder_needs_project"),
        ),
        sa.CheckConstraint(
            "source_url IS NULL OR char_length(source_url) <= 4096",
            name=op.f("ck_mem_assets_source_url_length"),
        ),
        sa.ForeignKeyConstraint(
            ["folder_id", "project_id", "owner_identity", "vault"],
            [
                "mem_asset_folders.id",
                "mem_asset_folders.project_id",
                "mem_asset_folders.owner_identity",
                "mem_asset_folders.vault",
            ],
            name=op.f("fk_mem_assets_folder_id_project_id_owner_identity_vault_mem_asset_folders"),
        ),
        sa.ForeignKeyConstraint(
            ["object_id", "owner_identity"],
            ["mem_asset_objects.id", "mem_asset_objects.owner_identity"],
            name=op.f("fk_mem_assets_object_id_owner_identity_mem_asset_objects"),
        ),
        sa.ForeignKeyConstraint(
            ["owner_identity", "vault"],
            ["mem_vaults.owner_identity", "mem_vaults.physical_vault"],
            name=op.f("fk_mem_assets_owner_identity_vault_mem_vaults"),
        ),
        sa.ForeignKeyConstraint(
            ["project_id", "owner_identity", "vault"],
            [
                "mem_asset_projects.id",
                "mem_asset_projects.owner_identity",
                "mem_asset_projects.vault",
            ],
            name=op.f("fk_mem_assets_project_id_owner_identity_vault_mem_asset_projects"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_mem_assets")),
        sa.UniqueConstraint("id", "owner_identity", name=op.f("uq_mem_assets_id_owner_identity")),
    )
    op.create_index("ix_mem_assets_object", "mem_assets", ["object_id"], unique=False)
    op.create_index(
        "ix_mem_assets_owner_project_folder_created",
        "mem_assets",
        ["owner_identity", "project_id", "folder_id", sa.literal_column("created_at DESC")],
        unique=False,
    )
    op.create_index(
        "ix_mem_assets_owner_source_url_hash",
        "mem_assets",
        ["owner_identity", "source_url_hash"],
        unique=False,
    )
    op.create_index(
        "ix_mem_assets_owner_vault_status_created",
        "mem_assets",
        ["owner_identity", "vault", "status", sa.literal_column("created_at DESC")],
        unique=False,
    )
    op.create_table(
        "mem_asset_embedding_jobs",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("asset_id", sa.Text(), nullable=False),
        sa.Column("owner_identity", sa.Text(), nullable=False),
        sa.Column("representation", sa.Text(), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("dimensions", sa.Integer(), nullable=False),
        sa.Column("status", sa.Text(), server_default="queued", nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("max_attempts", sa.Integer(), server_default="5", nullable=False),
        sa.Column(
            "run_after", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.Column("lease_owner", sa.Text(), nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error_code", sa.Text(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column(
            "usage",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "jsonb_typeof(usage) = 'object'", name=op.f("ck_mem_asset_embedding_jobs_usage_object")
        ),
        sa.CheckConstraint(
            "representation IN ('visual', 'fused')",
            name=op.f("ck_mem_asset_embedding_jobs_representation_known"),
        ),
        sa.CheckConstraint(
            "status IN ('queued', 'running', 'retry', 'done', 'failed', 'cancelled')",
            name=op.f("ck_mem_asset_embedding_jobs_status_known"),
        ),
        sa.CheckConstraint(
            "attempts >= 0", name=op.f("ck_mem_asset_embedding_jobs_attempts_nonnegative")
        ),
        sa.CheckConstraint(
            "dimensions > 0", name=op.f("ck_mem_asset_embedding_jobs_dimensions_positive")
        ),
        sa.CheckConstraint(
            "last_error IS NULL OR char_length(last_error) <= 1000",
            name=op.f("ck_mem_asset_embedding_jobs_error_length"),
        ),
        sa.CheckConstraint(
            "last_error_code IS NULL OR char_length(last_error_code) <= 64",
            name=op.f("ck_mem_asset_embedding_jobs_error_code_length"),
        ),
        sa.CheckConstraint(
            "max_attempts >= 1", name=op.f("ck_mem_asset_embedding_jobs_max_attempts_positive")
        ),
        sa.ForeignKeyConstraint(
            ["asset_id", "owner_identity"],
            ["mem_assets.id", "mem_assets.owner_identity"],
            name=op.f("fk_mem_asset_embedding_jobs_asset_id_owner_identity_mem_assets"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_mem_asset_embedding_jobs")),
    )
    op.create_index(
        "ix_mem_asset_embedding_jobs_asset", "mem_asset_embedding_jobs", ["asset_id"], unique=False
    )
    op.create_index(
        "ix_mem_asset_embedding_jobs_claimable",
        "mem_asset_embedding_jobs",
        ["run_after"],
        unique=False,
        postgresql_where=sa.text("status IN ('queued', 'retry')"),
    )
    op.create_index(
        "uq_mem_asset_embedding_jobs_active",
        "mem_asset_embedding_jobs",
        ["asset_id", "representation", "model", "dimensions"],
        unique=True,
        postgresql_where=sa.text("status IN ('queued', 'running', 'retry')"),
    )
    op.execute(FOLDER_TREE_FUNCTION)
    op.execute(FOLDER_TREE_TRIGGER)


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS trg_mem_asset_folders_check_tree ON mem_asset_folders")
    op.execute("DROP FUNCTION IF EXISTS mem_asset_folders_check_tree()")
    op.drop_index(
        "uq_mem_asset_embedding_jobs_active",
        table_name="mem_asset_embedding_jobs",
        postgresql_where=sa.text("status IN ('queued', 'running', 'retry')"),
    )
    op.drop_index(
        "ix_mem_asset_embedding_jobs_claimable",
        table_name="mem_asset_embedding_jobs",
        postgresql_where=sa.text("status IN ('queued', 'retry')"),
    )
    op.drop_index("ix_mem_asset_embedding_jobs_asset", table_name="mem_asset_embedding_jobs")
    op.drop_table("mem_asset_embedding_jobs")
    op.drop_index("ix_mem_assets_owner_vault_status_created", table_name="mem_assets")
    op.drop_index("ix_mem_assets_owner_source_url_hash", table_name="mem_assets")
    op.drop_index("ix_mem_assets_owner_project_folder_created", table_name="mem_assets")
    op.drop_index("ix_mem_assets_object", table_name="mem_assets")
    op.drop_table("mem_assets")
    op.drop_index(
        "uq_mem_asset_folders_active_sibling_name",
        table_name="mem_asset_folders",
        postgresql_where=sa.text("deleted_at IS NULL"),
    )
    op.drop_index("ix_mem_asset_folders_project_parent", table_name="mem_asset_folders")
    op.drop_table("mem_asset_folders")
    op.drop_index("ix_mem_vault_grants_grantee", table_name="mem_vault_grants")
    op.drop_table("mem_vault_grants")
    op.drop_index(
        "uq_mem_asset_upload_reservations_idempotency",
        table_name="mem_asset_upload_reservations",
        postgresql_where=sa.text("idempotency_key IS NOT NULL"),
    )
    op.drop_index(
        "ix_mem_asset_upload_reservations_active_expiry",
        table_name="mem_asset_upload_reservations",
        postgresql_where=sa.text("status = 'active'"),
    )
    op.drop_table("mem_asset_upload_reservations")
    op.drop_index(
        "uq_mem_asset_projects_active_name",
        table_name="mem_asset_projects",
        postgresql_where=sa.text("status <> 'deleted'"),
    )
    op.drop_table("mem_asset_projects")
    op.drop_index(
        "uq_mem_asset_objects_owner_sha256_active",
        table_name="mem_asset_objects",
        postgresql_where=sa.text("status IN ('pending', 'available', 'quarantined')"),
    )
    op.drop_index("ix_mem_asset_objects_status_updated", table_name="mem_asset_objects")
    op.drop_table("mem_asset_objects")
    op.drop_index("uq_mem_vaults_owner_handle", table_name="mem_vaults")
    op.drop_table("mem_vaults")
    op.drop_index("ix_mem_usage_ledger_owner_created", table_name="mem_usage_ledger")
    op.drop_table("mem_usage_ledger")
    op.drop_table("mem_asset_namespaces")
    op.drop_table("mem_api_keys")
    op.drop_index("ix_mem_provenance_target", table_name="mem_provenance")
    op.drop_index("ix_mem_provenance_owner_created", table_name="mem_provenance")
    op.drop_table("mem_provenance")
    op.drop_table("mem_identities")
    # The database may be shared with other users of pgvector (a product's note index, say):
    # pgvector goes only if nothing else still uses it, and never takes their columns with it.
    op.execute(
        "DO $$ BEGIN DROP EXTENSION IF EXISTS vector; "
        "EXCEPTION WHEN dependent_objects_still_exist THEN "
        "RAISE NOTICE 'pgvector is kept: other tables still use it'; END $$"
    )
