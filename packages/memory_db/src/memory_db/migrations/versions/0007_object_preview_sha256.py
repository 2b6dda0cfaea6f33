"""The SHA-256 of each object's preview, so previews are verified against the database too.

Readers of an original compare its bytes with ``mem_asset_objects.sha256``; previews had no
recorded hash and were checked only against the store's own sidecar or metadata, which anyone
who can write to the store can rewrite along with the bytes. New objects record
``preview_sha256``. Rows from before this revision keep ``NULL``: their previews were written
by the server itself (direct uploads never wrote previews), and readers fall back to the
store's recorded checksum for them (see ``memory_tools.assets.read_preview``).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 12:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_CHECK = "preview_sha256_hex"  # named ck_mem_asset_objects_preview_sha256_hex by convention


def upgrade() -> None:
    op.add_column("mem_asset_objects", sa.Column("preview_sha256", sa.Text(), nullable=True))
    op.create_check_constraint(
        _CHECK, "mem_asset_objects", "preview_sha256 IS NULL OR preview_sha256 ~ '^[0-9a-f]{64}$'"
    )


def downgrade() -> None:
    op.drop_constraint(_CHECK, "mem_asset_objects", type_="check")
    op.drop_column("mem_asset_objects", "preview_sha256")
