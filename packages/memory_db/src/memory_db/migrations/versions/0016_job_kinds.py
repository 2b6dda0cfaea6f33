"""Job kinds: the durable queue carries jobs other than embeddings.

``mem_asset_embedding_jobs`` gains ``kind``: ``embed`` (every existing row, and the default),
``ocr`` (read the text in an image) or ``describe`` (a generated description). Every kind shares
the queue's leases, retries, failure reasons, outage patience and operator tools; the worker
dispatches a claimed job by its kind. Only an embedding has a representation and dimensions, so
both columns become nullable, and a check ties them to the kind. The table keeps its name.

An asset has at most one active job of each non-embedding kind (a unique partial index, like the
existing one per representation, model and dimensions for embeddings).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02 02:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLE = "mem_asset_embedding_jobs"
_KINDS = ("embed", "ocr", "describe")
_ACTIVE_KIND = "uq_mem_asset_embedding_jobs_active_kind"


def upgrade() -> None:
    op.add_column(
        _TABLE, sa.Column("kind", sa.Text(), nullable=False, server_default=sa.text("'embed'"))
    )
    quoted = ", ".join(f"'{kind}'" for kind in _KINDS)
    op.create_check_constraint("kind_known", _TABLE, f"kind IN ({quoted})")
    op.alter_column(_TABLE, "representation", existing_type=sa.Text(), nullable=True)
    op.alter_column(_TABLE, "dimensions", existing_type=sa.Integer(), nullable=True)
    op.create_check_constraint(
        "kind_fields",
        _TABLE,
        "CASE WHEN kind = 'embed' THEN representation IS NOT NULL AND dimensions IS NOT NULL"
        " ELSE representation IS NULL AND dimensions IS NULL END",
    )
    op.create_index(
        _ACTIVE_KIND,
        _TABLE,
        ["asset_id", "kind"],
        unique=True,
        postgresql_where=sa.text("kind <> 'embed' AND status IN ('queued', 'running', 'retry')"),
    )


def downgrade() -> None:
    # Jobs of other kinds cannot be represented before this revision.
    op.execute(sa.text("DELETE FROM mem_asset_embedding_jobs WHERE kind <> 'embed'"))
    op.drop_index(_ACTIVE_KIND, table_name=_TABLE)
    op.drop_constraint("kind_fields", _TABLE, type_="check")
    op.alter_column(_TABLE, "dimensions", existing_type=sa.Integer(), nullable=False)
    op.alter_column(_TABLE, "representation", existing_type=sa.Text(), nullable=False)
    op.drop_constraint("kind_known", _TABLE, type_="check")
    op.drop_column(_TABLE, "kind")
