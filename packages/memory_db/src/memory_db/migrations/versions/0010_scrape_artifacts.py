"""Scraper artifacts: validated image bytes owned by one identity until they expire.

A scraper tool (``scrape_image_download``, ``scrape_page_screenshot``) stores what it fetched
as an artifact; ``image_asset_save`` with its ``artifactId`` turns it into an asset, and the
worker's sweep deletes expired ones, rows and bytes (docs/design.md#artifacts). The row is tied
to its owner's namespace by a composite foreign key, and its storage key to that namespace and
its own id by a CHECK. Storing an artifact is recorded as ``artifact_store`` provenance, so the
provenance operation list (a CHECK constraint) is replaced, as revision 0009 did; downgrade fails
(and changes nothing) while the ledger holds ``artifact_store`` events.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01 18:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLE = "mem_scrape_artifacts"
_PROVENANCE = "mem_provenance"
_OPERATIONS_BEFORE = (
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
)
_OPERATIONS_AFTER = (*_OPERATIONS_BEFORE, "artifact_store")


def _known(operations: tuple[str, ...]) -> str:
    return "operation IN ({})".format(", ".join(f"'{name}'" for name in operations))


def upgrade() -> None:
    op.create_table(
        _TABLE,
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("owner_identity", sa.Text(), nullable=False),
        sa.Column("namespace_id", sa.Text(), nullable=False),
        sa.Column("storage_key", sa.Text(), nullable=False),
        sa.Column("sha256", sa.Text(), nullable=False),
        sa.Column("mime_type", sa.Text(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("width", sa.Integer(), nullable=False),
        sa.Column("height", sa.Integer(), nullable=False),
        sa.Column("source_kind", sa.Text(), nullable=False),
        sa.Column(
            "source_ref",
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
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "position('/tenants/' || namespace_id || '/artifacts/' || id || '/' "
            "in storage_key) > 0",
            name=op.f("ck_mem_scrape_artifacts_key_in_namespace"),
        ),
        sa.CheckConstraint(
            "source_kind IN ('scrape', 'screenshot')",
            name=op.f("ck_mem_scrape_artifacts_source_kind_known"),
        ),
        sa.CheckConstraint(
            "sha256 ~ '^[0-9a-f]{64}$'", name=op.f("ck_mem_scrape_artifacts_sha256_hex")
        ),
        sa.CheckConstraint(
            "mime_type IN ('image/jpeg', 'image/png', 'image/webp', 'image/gif')",
            name=op.f("ck_mem_scrape_artifacts_mime_known"),
        ),
        sa.CheckConstraint("bytes > 0", name=op.f("ck_mem_scrape_artifacts_bytes_positive")),
        sa.CheckConstraint(
            "width > 0 AND height > 0", name=op.f("ck_mem_scrape_artifacts_dimensions_positive")
        ),
        sa.CheckConstraint(
            "jsonb_typeof(source_ref) = 'object' AND pg_column_size(source_ref) <= 8192",
            name=op.f("ck_mem_scrape_artifacts_source_ref_bounded"),
        ),
        sa.CheckConstraint(
            "expires_at > created_at", name=op.f("ck_mem_scrape_artifacts_expires_after_created")
        ),
        sa.ForeignKeyConstraint(
            ["owner_identity", "namespace_id"],
            ["mem_asset_namespaces.owner_identity", "mem_asset_namespaces.namespace_id"],
            name=op.f("fk_mem_scrape_artifacts_owner_identity_namespace_id_mem_asset_namespaces"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_mem_scrape_artifacts")),
        sa.UniqueConstraint("storage_key", name=op.f("uq_mem_scrape_artifacts_storage_key")),
    )
    op.create_index(
        "ix_mem_scrape_artifacts_owner_expires",
        _TABLE,
        ["owner_identity", "expires_at"],
        unique=False,
    )
    op.create_index("ix_mem_scrape_artifacts_expires", _TABLE, ["expires_at"], unique=False)
    op.drop_constraint("operation_known", _PROVENANCE, type_="check")
    op.create_check_constraint("operation_known", _PROVENANCE, _known(_OPERATIONS_AFTER))


def downgrade() -> None:
    op.drop_constraint("operation_known", _PROVENANCE, type_="check")
    op.create_check_constraint("operation_known", _PROVENANCE, _known(_OPERATIONS_BEFORE))
    op.drop_index("ix_mem_scrape_artifacts_expires", table_name=_TABLE)
    op.drop_index("ix_mem_scrape_artifacts_owner_expires", table_name=_TABLE)
    op.drop_table(_TABLE)
