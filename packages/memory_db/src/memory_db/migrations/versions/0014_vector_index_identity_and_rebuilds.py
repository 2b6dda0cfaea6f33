"""Index identity and rebuilds: which embedder fills each vector index, and rebuilds in progress.

``mem_vector_indexes`` gains ``provider`` and ``model`` (with ``dimensions``, the embedder's
identity; never a secret). Indexes made before this revision keep NULL until a process records
the configured embedder for the index the alias points at (the only embedder that ever wrote
it). ``mem_vector_rebuilds`` holds an index being filled beside the active one by
``memory-server reindex``: its source, state and resume cursor (docs/vector-index.md#rebuilds).
The switch is recorded as ``vector_index_switch`` provenance; downgrade fails (and changes
nothing) while the ledger holds such events.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01 23:00:00
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_INDEXES = "mem_vector_indexes"
_REBUILDS = "mem_vector_rebuilds"
_PROVENANCE = "mem_provenance"
_OPERATION = "vector_index_switch"


def _operations() -> list[str]:
    """The operations the ledger's CHECK constraint allows now, in its order."""
    definition = op.get_bind().scalar(
        sa.text(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE conname = 'ck_mem_provenance_operation_known'"
        )
    )
    return re.findall(r"'([a-z_]+)'", str(definition))


def _replace_operations(operations: list[str]) -> None:
    op.drop_constraint("operation_known", _PROVENANCE, type_="check")
    op.create_check_constraint(
        "operation_known",
        _PROVENANCE,
        "operation IN ({})".format(", ".join(f"'{name}'" for name in operations)),
    )


def upgrade() -> None:
    op.add_column(_INDEXES, sa.Column("provider", sa.Text(), nullable=True))
    op.add_column(_INDEXES, sa.Column("model", sa.Text(), nullable=True))
    op.create_table(
        _REBUILDS,
        sa.Column("target_index", sa.Text(), nullable=False),
        sa.Column("source_index", sa.Text(), nullable=False),
        sa.Column("alias", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), server_default="filling", nullable=False),
        sa.Column("cursor", sa.Text(), nullable=True),
        sa.Column("embedded", sa.Integer(), server_default="0", nullable=False),
        sa.Column("skipped", sa.Integer(), server_default="0", nullable=False),
        sa.Column(
            "started_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("switched_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "state IN ('filling', 'switched')", name=op.f("ck_mem_vector_rebuilds_state_known")
        ),
        sa.CheckConstraint(
            "target_index <> source_index", name=op.f("ck_mem_vector_rebuilds_target_not_source")
        ),
        sa.ForeignKeyConstraint(
            ["source_index"],
            [f"{_INDEXES}.name"],
            name=op.f("fk_mem_vector_rebuilds_source_index_mem_vector_indexes"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["target_index"],
            [f"{_INDEXES}.name"],
            name=op.f("fk_mem_vector_rebuilds_target_index_mem_vector_indexes"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("target_index", name=op.f("pk_mem_vector_rebuilds")),
    )
    op.create_index(
        "uq_mem_vector_rebuilds_one_filling_per_alias",
        _REBUILDS,
        ["alias"],
        unique=True,
        postgresql_where=sa.text("state = 'filling'"),
    )
    _replace_operations([name for name in _operations() if name != _OPERATION] + [_OPERATION])


def downgrade() -> None:
    _replace_operations([name for name in _operations() if name != _OPERATION])
    op.drop_index("uq_mem_vector_rebuilds_one_filling_per_alias", table_name=_REBUILDS)
    op.drop_table(_REBUILDS)
    op.drop_column(_INDEXES, "model")
    op.drop_column(_INDEXES, "provider")
