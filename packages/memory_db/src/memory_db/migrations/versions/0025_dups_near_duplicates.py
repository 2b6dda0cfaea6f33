"""Near-duplicates: pairs of assets whose visual vectors are near, and the decisions on them.

``mem_asset_near_duplicates`` holds one row per pair of assets of one vault whose visual
vectors are within ``ASSET_NEAR_DUPLICATE_DISTANCE`` (docs/design.md#near-duplicates), the two
ids in a canonical order, the index they were found in, their distance, and a decision (``open``
or ``dismissed``, with who and when; a dismissal is also recorded in provenance as
``asset_duplicates_dismiss``). The embedding job finds them; ``memory-server enrich
--what duplicates`` finds them for stored vectors through a new job kind, ``duplicates``.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-05 15:10:00
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLE = "mem_asset_near_duplicates"
_JOBS = "mem_asset_embedding_jobs"
_KINDS_BEFORE = ("embed", "ocr", "describe", "capture")
_KINDS_AFTER = (*_KINDS_BEFORE, "duplicates")
# Dismissing a cluster ("not duplicates") is recorded in provenance.
_OPERATIONS = ["asset_duplicates_dismiss"]


def _listed(constraint: str) -> list[str]:
    definition = op.get_bind().scalar(
        sa.text("SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = :name"),
        {"name": constraint},
    )
    return re.findall(r"'([a-z_]+)'", str(definition))


def _operations(values: list[str]) -> None:
    op.drop_constraint("operation_known", "mem_provenance", type_="check")
    op.create_check_constraint(
        "operation_known",
        "mem_provenance",
        "operation IN ({})".format(", ".join(f"'{value}'" for value in values)),
    )


def _kinds(kinds: tuple[str, ...]) -> str:
    return "kind IN (" + ", ".join(f"'{kind}'" for kind in kinds) + ")"


def upgrade() -> None:
    op.create_table(
        _TABLE,
        sa.Column("asset_a", sa.Text(), nullable=False),
        sa.Column("asset_b", sa.Text(), nullable=False),
        sa.Column("owner_identity", sa.Text(), nullable=False),
        sa.Column("vault", sa.Text(), nullable=False),
        sa.Column("index_name", sa.Text(), nullable=False),
        sa.Column("distance", sa.Double(), nullable=False),
        sa.Column(
            "found_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column("decision", sa.Text(), server_default="open", nullable=False),
        sa.Column("decided_by", sa.Text(), nullable=True),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["asset_a", "owner_identity"],
            ["mem_assets.id", "mem_assets.owner_identity"],
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["asset_b", "owner_identity"],
            ["mem_assets.id", "mem_assets.owner_identity"],
            ondelete="CASCADE",
        ),
        sa.CheckConstraint("asset_a < asset_b", name="pair_ordered"),
        sa.CheckConstraint("distance >= 0 AND distance <= 2", name="distance_range"),
        sa.CheckConstraint("decision IN ('open', 'dismissed')", name="decision_known"),
        sa.CheckConstraint(
            "(decision = 'open') = (decided_at IS NULL AND decided_by IS NULL)",
            name="decision_recorded",
        ),
        sa.PrimaryKeyConstraint("asset_a", "asset_b"),
    )
    op.create_index(
        "ix_mem_asset_near_duplicates_vault_open",
        _TABLE,
        ["owner_identity", "vault", "index_name"],
        postgresql_where=sa.text("decision = 'open'"),
    )
    op.create_index("ix_mem_asset_near_duplicates_asset_b", _TABLE, ["asset_b"])
    op.drop_constraint("kind_known", _JOBS, type_="check")
    op.create_check_constraint("kind_known", _JOBS, _kinds(_KINDS_AFTER))
    kept = [o for o in _listed("ck_mem_provenance_operation_known") if o not in _OPERATIONS]
    _operations(kept + _OPERATIONS)


def downgrade() -> None:
    # Neither dismissals nor pair-search jobs can be represented before this revision.
    op.execute(
        sa.text("DELETE FROM mem_provenance WHERE operation = ANY(:ops)").bindparams(
            ops=_OPERATIONS
        )
    )
    _operations([o for o in _listed("ck_mem_provenance_operation_known") if o not in _OPERATIONS])
    op.execute(sa.text("DELETE FROM mem_asset_embedding_jobs WHERE kind = 'duplicates'"))
    op.drop_constraint("kind_known", _JOBS, type_="check")
    op.create_check_constraint("kind_known", _JOBS, _kinds(_KINDS_BEFORE))
    op.drop_index("ix_mem_asset_near_duplicates_asset_b", table_name=_TABLE)
    op.drop_index("ix_mem_asset_near_duplicates_vault_open", table_name=_TABLE)
    op.drop_table(_TABLE)
