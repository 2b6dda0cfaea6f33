"""The operator's Jobs page: reconciliation runs are recorded, and job retries and cancels too.

The page lists embedding jobs newest first, so they get an index on ``(created_at, id)``.

``mem_reconcile_runs`` holds one row per finished pass of the store reconciliation (the
worker's sweep, ``memory-server admin reconcile``) with what it found, so the Jobs page shows
that work as it happened. An operator's retry or cancel of an embedding job, and an owner's
retry of a failed representation, are recorded as ``job_retry`` and ``job_cancel``
provenance, so the provenance operation list (a CHECK constraint) is replaced, as revision 0009
did; downgrade fails (and changes nothing) while the ledger holds events of the new operations.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01 20:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLE = "mem_reconcile_runs"
_PROVENANCE = "mem_provenance"
_BEFORE = (
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
)
_AFTER = (*_BEFORE, "job_retry", "job_cancel")


def _known(operations: tuple[str, ...]) -> str:
    return "operation IN ({})".format(", ".join(f"'{name}'" for name in operations))


def upgrade() -> None:
    op.create_table(
        _TABLE,
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("actor_identity", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("namespaces", sa.Integer(), server_default="0", nullable=False),
        sa.Column("listed", sa.Integer(), server_default="0", nullable=False),
        sa.Column("removed", sa.Integer(), server_default="0", nullable=False),
        sa.Column("removed_bytes", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("waiting", sa.Integer(), server_default="0", nullable=False),
        sa.Column("foreign_keys", sa.Integer(), server_default="0", nullable=False),
        sa.Column("error_code", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "finished_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "status IN ('done', 'failed')", name=op.f("ck_mem_reconcile_runs_status_known")
        ),
        sa.CheckConstraint(
            "namespaces >= 0 AND listed >= 0 AND removed >= 0 AND removed_bytes >= 0 "
            "AND waiting >= 0 AND foreign_keys >= 0",
            name=op.f("ck_mem_reconcile_runs_counts_nonnegative"),
        ),
        sa.CheckConstraint(
            "finished_at >= started_at", name=op.f("ck_mem_reconcile_runs_finished_after_started")
        ),
        sa.CheckConstraint(
            "error_code IS NULL OR char_length(error_code) <= 64",
            name=op.f("ck_mem_reconcile_runs_error_code_length"),
        ),
        sa.CheckConstraint(
            "error IS NULL OR char_length(error) <= 1000",
            name=op.f("ck_mem_reconcile_runs_error_length"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_mem_reconcile_runs")),
    )
    op.create_index(
        "ix_mem_reconcile_runs_started",
        _TABLE,
        [sa.text("started_at DESC"), sa.text("id DESC")],
        unique=False,
    )
    op.create_index(
        "ix_mem_asset_embedding_jobs_created",
        "mem_asset_embedding_jobs",
        [sa.text("created_at DESC"), sa.text("id DESC")],
        unique=False,
    )
    op.drop_constraint("operation_known", _PROVENANCE, type_="check")
    op.create_check_constraint("operation_known", _PROVENANCE, _known(_AFTER))


def downgrade() -> None:
    op.drop_constraint("operation_known", _PROVENANCE, type_="check")
    op.create_check_constraint("operation_known", _PROVENANCE, _known(_BEFORE))
    op.drop_index("ix_mem_asset_embedding_jobs_created", table_name="mem_asset_embedding_jobs")
    op.drop_index("ix_mem_reconcile_runs_started", table_name=_TABLE)
    op.drop_table(_TABLE)
