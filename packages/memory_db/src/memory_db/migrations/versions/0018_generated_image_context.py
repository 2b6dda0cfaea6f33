"""Generated image context: a gated, bound description per asset, feeding search by whitelist.

- ``mem_asset_contexts``: at most one generated context per asset, the schema-valid object the
  vision model answered, bound to the SHA-256 of the rendition it was generated from (stale
  once the asset's bytes differ), with its model, time and a person's review.
- ``mem_assets.generated_text``: the whitelisted words of that context (caption, visible text,
  subjects), kept on the asset row because the full-text document is a generated column of
  that row; the document is rebuilt with it at the lowest weight (``D``).
- The usage ledger accepts ``describe_image``; provenance accepts ``asset_context_review``
  (both CHECK lists are read from the database and extended, like revision 0013).

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-02 03:20:00
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ASSETS = "mem_assets"
_CONTEXTS = "mem_asset_contexts"
_SEARCH_INDEX = "ix_mem_assets_search_document"
_USAGE_SOURCE = "describe_image"
_OPERATION = "asset_context_review"
_GENERATED_WEIGHT = (
    " || setweight(to_tsvector('english'::regconfig, coalesce(generated_text, '')), 'D')"
)


def _listed(constraint: str) -> list[str]:
    definition = op.get_bind().scalar(
        sa.text("SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = :name"),
        {"name": constraint},
    )
    return re.findall(r"'([a-z_]+)'", str(definition))


def _replace_list(table: str, name: str, column: str, values: list[str]) -> None:
    op.drop_constraint(name, table, type_="check")
    op.create_check_constraint(
        name, table, "{} IN ({})".format(column, ", ".join(f"'{value}'" for value in values))
    )


def _search_document_sql() -> str:
    """The document's expression as the database has it now (whatever earlier revisions made)."""
    expression = op.get_bind().scalar(
        sa.text(
            "SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d "
            "JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum "
            "WHERE d.adrelid = 'mem_assets'::regclass AND a.attname = 'search_document'"
        )
    )
    return str(expression)


def _rebuild_search_document(expression: str) -> None:
    op.drop_index(_SEARCH_INDEX, table_name=_ASSETS)
    op.drop_column(_ASSETS, "search_document")
    op.add_column(
        _ASSETS,
        sa.Column(
            "search_document",
            postgresql.TSVECTOR(),
            sa.Computed(expression, persisted=True),
            nullable=True,
        ),
    )
    op.create_index(_SEARCH_INDEX, _ASSETS, ["search_document"], postgresql_using="gin")


def upgrade() -> None:
    op.add_column(_ASSETS, sa.Column("generated_text", sa.Text(), nullable=True))
    op.create_check_constraint(
        "generated_text_length",
        _ASSETS,
        "generated_text IS NULL OR char_length(generated_text) <= 3000",
    )
    _rebuild_search_document(f"({_search_document_sql()}){_GENERATED_WEIGHT}")
    op.create_table(
        _CONTEXTS,
        sa.Column("asset_id", sa.Text(), primary_key=True),
        sa.Column("owner_identity", sa.Text(), nullable=False),
        sa.Column("object_id", sa.Text(), nullable=False),
        sa.Column("source_sha256", sa.Text(), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("context", postgresql.JSONB(), nullable=False),
        sa.Column("generated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("job_id", sa.Text(), nullable=True),
        sa.Column("review", sa.Text(), nullable=False, server_default="unreviewed"),
        sa.Column("reviewed_by", sa.Text(), nullable=True),
        sa.Column("reviewed_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["asset_id", "owner_identity"],
            ["mem_assets.id", "mem_assets.owner_identity"],
            ondelete="CASCADE",
        ),
        sa.CheckConstraint("source_sha256 ~ '^[0-9a-f]{64}$'", name="source_sha256_hex"),
        sa.CheckConstraint("char_length(model) BETWEEN 1 AND 200", name="model_length"),
        sa.CheckConstraint(
            "jsonb_typeof(context) = 'object' AND pg_column_size(context) <= 16384",
            name="context_bounded",
        ),
        sa.CheckConstraint("review IN ('unreviewed', 'accepted')", name="review_known"),
    )
    sources = _listed("ck_mem_usage_ledger_source_known")
    _replace_list(
        "mem_usage_ledger",
        "source_known",
        "source",
        [s for s in sources if s != _USAGE_SOURCE] + [_USAGE_SOURCE],
    )
    operations = _listed("ck_mem_provenance_operation_known")
    _replace_list(
        "mem_provenance",
        "operation_known",
        "operation",
        [o for o in operations if o != _OPERATION] + [_OPERATION],
    )


def downgrade() -> None:
    _replace_list(
        "mem_provenance",
        "operation_known",
        "operation",
        [o for o in _listed("ck_mem_provenance_operation_known") if o != _OPERATION],
    )
    _replace_list(
        "mem_usage_ledger",
        "source_known",
        "source",
        [s for s in _listed("ck_mem_usage_ledger_source_known") if s != _USAGE_SOURCE],
    )
    op.drop_table(_CONTEXTS)
    # The database's own (normalised) spelling of the term upgrade appended.
    expression, found = re.subn(
        r"\s*\|\|\s*setweight\(to_tsvector\('english'::regconfig, "
        r"COALESCE\(generated_text, ''::text\)\), 'D'::\"char\"\)",
        "",
        _search_document_sql(),
    )
    if found != 1:
        raise RuntimeError("the search document does not have the generated context term")
    _rebuild_search_document(expression)
    op.drop_constraint("generated_text_length", _ASSETS, type_="check")
    op.drop_column(_ASSETS, "generated_text")
