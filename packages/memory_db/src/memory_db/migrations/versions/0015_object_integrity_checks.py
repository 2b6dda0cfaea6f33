"""Object integrity checks: when each object's bytes were last verified against its SHA-256.

``mem_asset_objects.verified_at`` is set by reconciliation each time it reads an object's
bytes (original and preview) and finds them matching the recorded hashes. The worker's
scheduled pass verifies a bounded number of objects per namespace, least recently verified
first (never verified first), so over many passes every object is read again; the index keeps
picking them a short scan.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-01 23:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLE = "mem_asset_objects"
_INDEX = "ix_mem_asset_objects_owner_verified"


def upgrade() -> None:
    op.add_column(_TABLE, sa.Column("verified_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index(
        _INDEX,
        _TABLE,
        ["owner_identity", sa.text("verified_at NULLS FIRST"), "id"],
        postgresql_where=sa.text("status = 'available'"),
    )


def downgrade() -> None:
    op.drop_index(_INDEX, table_name=_TABLE)
    op.drop_column(_TABLE, "verified_at")
