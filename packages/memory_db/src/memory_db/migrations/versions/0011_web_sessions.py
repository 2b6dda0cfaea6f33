"""Web sessions: a signed-in browser acts as the API key it signed in with.

The web app exchanges an API key for a random session secret in an HttpOnly cookie. Only the
SHA-256 of that secret is stored, with the key it acts as (revoking the key ends the session; a
deleted key deletes it), the CSRF token every change must echo, and an absolute expiry.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01 20:20:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLE = "mem_web_sessions"


def upgrade() -> None:
    """Create ``mem_web_sessions``."""
    op.create_table(
        _TABLE,
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("token_hash", sa.Text(), nullable=False),
        sa.Column("key_id", sa.Text(), nullable=False),
        sa.Column("csrf_token", sa.Text(), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.Column(
            "last_seen_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.func.now(),
        ),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_mem_web_sessions")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_mem_web_sessions_token_hash")),
        sa.ForeignKeyConstraint(
            ["key_id"],
            ["mem_api_keys.id"],
            name=op.f("fk_mem_web_sessions_key_id_mem_api_keys"),
            ondelete="CASCADE",
        ),
        sa.CheckConstraint(
            "token_hash ~ '^[0-9a-f]{64}$'", name=op.f("ck_mem_web_sessions_token_hash_hex")
        ),
        sa.CheckConstraint(
            "length(csrf_token) BETWEEN 32 AND 128",
            name=op.f("ck_mem_web_sessions_csrf_token_length"),
        ),
        sa.CheckConstraint(
            "expires_at > created_at", name=op.f("ck_mem_web_sessions_expires_after_created")
        ),
    )
    op.create_index(op.f("ix_mem_web_sessions_expires"), _TABLE, ["expires_at"])
    op.create_index(op.f("ix_mem_web_sessions_key"), _TABLE, ["key_id"])


def downgrade() -> None:
    """Drop ``mem_web_sessions`` (every browser is signed out)."""
    op.drop_table(_TABLE)
