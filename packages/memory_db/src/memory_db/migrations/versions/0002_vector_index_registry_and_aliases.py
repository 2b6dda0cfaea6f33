"""Vector index registry and aliases (the physical index tables are made by memory_db.vectors).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 07:20:30.460486
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "mem_vector_indexes",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("dimensions", sa.Integer(), nullable=False),
        sa.Column("element_type", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "element_type IN ('halfvec', 'vector')",
            name=op.f("ck_mem_vector_indexes_element_known"),
        ),
        sa.CheckConstraint(
            "name ~ '^[a-z][a-z0-9_]{0,62}$'", name=op.f("ck_mem_vector_indexes_name_identifier")
        ),
        sa.CheckConstraint(
            "dimensions BETWEEN 1 AND 4000", name=op.f("ck_mem_vector_indexes_dimensions_range")
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_mem_vector_indexes")),
    )
    op.create_table(
        "mem_vector_index_aliases",
        sa.Column("alias", sa.Text(), nullable=False),
        sa.Column("index_name", sa.Text(), nullable=False),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "alias ~ '^[a-z][a-z0-9_]{0,62}$'",
            name=op.f("ck_mem_vector_index_aliases_alias_identifier"),
        ),
        sa.ForeignKeyConstraint(
            ["index_name"],
            ["mem_vector_indexes.name"],
            name=op.f("fk_mem_vector_index_aliases_index_name_mem_vector_indexes"),
        ),
        sa.PrimaryKeyConstraint("alias", name=op.f("pk_mem_vector_index_aliases")),
    )


def downgrade() -> None:
    # The physical index tables belong to the registry: drop them with it.
    names = op.get_bind().execute(sa.text("SELECT name FROM mem_vector_indexes")).scalars()
    for name in list(names):
        op.execute(f'DROP TABLE IF EXISTS "{name}"')
    op.drop_table("mem_vector_index_aliases")
    op.drop_table("mem_vector_indexes")
