"""Save flow: reservation bookkeeping (reserved bytes, vault, object, request) and orphan
candidates (docs/design.md#orphans).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 09:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLE = "mem_asset_upload_reservations"


def upgrade() -> None:
    op.add_column(
        _TABLE, sa.Column("reserved_bytes", sa.BigInteger(), server_default="0", nullable=False)
    )
    op.add_column(_TABLE, sa.Column("vault", sa.Text(), nullable=True))
    op.add_column(_TABLE, sa.Column("object_id", sa.Text(), nullable=True))
    op.add_column(
        _TABLE,
        sa.Column(
            "request",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
    )
    op.create_check_constraint("reserved_nonnegative", _TABLE, "reserved_bytes >= 0")
    op.create_check_constraint(
        "request_bounded",
        _TABLE,
        "jsonb_typeof(request) = 'object' AND pg_column_size(request) <= 16384",
    )
    op.create_table(
        "mem_asset_orphan_candidates",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("owner_identity", sa.Text(), nullable=False),
        sa.Column("storage_key", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "char_length(reason) BETWEEN 1 AND 200",
            name=op.f("ck_mem_asset_orphan_candidates_reason_length"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_mem_asset_orphan_candidates")),
        sa.UniqueConstraint("storage_key", name=op.f("uq_mem_asset_orphan_candidates_storage_key")),
    )
    op.create_index(
        "ix_mem_asset_orphan_candidates_open",
        "mem_asset_orphan_candidates",
        ["created_at"],
        unique=False,
        postgresql_where=sa.text("resolved_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index(
        "ix_mem_asset_orphan_candidates_open",
        table_name="mem_asset_orphan_candidates",
        postgresql_where=sa.text("resolved_at IS NULL"),
    )
    op.drop_table("mem_asset_orphan_candidates")
    op.drop_constraint("request_bounded", _TABLE, type_="check")
    op.drop_constraint("reserved_nonnegative", _TABLE, type_="check")
    op.drop_column(_TABLE, "request")
    op.drop_column(_TABLE, "object_id")
    op.drop_column(_TABLE, "vault")
    op.drop_column(_TABLE, "reserved_bytes")
