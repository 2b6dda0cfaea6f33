"""Full-text search document of assets: a generated ``tsvector`` over title, tags, alt text
and description, with a GIN index.

The column is derived from the row (a rebuildable cache, docs/design.md#decision-full-text):
dropping and re-adding it rebuilds it, and nothing else reads or writes it.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 12:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

# The document as this revision made it (revision 0017 adds the text read in the image).
SEARCH_DOCUMENT_SQL = (
    "setweight(to_tsvector('english'::regconfig, title), 'A') || "
    "setweight(jsonb_to_tsvector('english'::regconfig, tags, '[\"string\"]'::jsonb), 'A') || "
    "setweight(to_tsvector('english'::regconfig, coalesce(alt_text, '')), 'B') || "
    "setweight(to_tsvector('english'::regconfig, coalesce(description, '')), 'C')"
)

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "mem_assets",
        sa.Column(
            "search_document",
            postgresql.TSVECTOR(),
            sa.Computed(SEARCH_DOCUMENT_SQL, persisted=True),
            nullable=True,
        ),
    )
    op.create_index(
        "ix_mem_assets_search_document",
        "mem_assets",
        ["search_document"],
        postgresql_using="gin",
    )


def downgrade() -> None:
    op.drop_index("ix_mem_assets_search_document", table_name="mem_assets")
    op.drop_column("mem_assets", "search_document")
