"""What each key did: a ``saves`` counter beside ``calls`` and ``searches``.

The Keys page counted a key's saves from ``mem_assets`` at read time: an index-only count
that was measured at 3.9 ms for 85,713 saves after a vacuum, but 130 ms on freshly written
rows (the visibility map is not set until a vacuum, so each counted entry visits the heap).
``saves`` is added up per process with the other counters (``memory_tools.key_activity``) and
written at most once a minute, so reading it costs nothing. Existing keys start from the
assets that name them (``saved_by_key_id``), which is what the page showed until now.

Not a change of access: the key trigger (revisions 0021, 0023) names its columns and does not
fire on the counters.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-05 15:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "mem_api_keys", sa.Column("saves", sa.BigInteger(), server_default="0", nullable=False)
    )
    op.create_check_constraint(
        op.f("ck_mem_api_keys_saves_nonnegative"), "mem_api_keys", "saves >= 0"
    )
    op.execute(
        """
        UPDATE mem_api_keys k SET saves = counted.saves
        FROM (
            SELECT saved_by_key_id, count(*) AS saves FROM mem_assets
            WHERE saved_by_key_id IS NOT NULL GROUP BY saved_by_key_id
        ) counted
        WHERE counted.saved_by_key_id = k.id
        """
    )


def downgrade() -> None:
    op.drop_constraint(op.f("ck_mem_api_keys_saves_nonnegative"), "mem_api_keys", type_="check")
    op.drop_column("mem_api_keys", "saves")
