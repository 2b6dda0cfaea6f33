"""The text read in an image (OCR), with its provenance, in the full-text document.

``mem_assets.ocr_text`` holds what an ``ocr`` job read, verbatim and bounded; ``mem_assets.ocr``
how it was read (engine, version, language, mean confidence, the input's SHA-256, when). Both
are ``NULL`` until a job reads text, and again when it reads none.

The generated ``search_document`` is rebuilt to read ``ocr_text`` as its own field, at weight
``D``: below the title and tags (``A``), alt text (``B``) and description (``C``), so words a
person gave rank above words the engine read. Dropping and re-adding the generated column
recomputes it for every row (it is a rebuildable cache, like revision 0004 says).

Provenance gains the ``asset_enrich`` operation: a person (``image_asset_enrich``) or an
operator (``memory-server enrich``) queued an image's enrichment again.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-02 02:45:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLE = "mem_assets"
_INDEX = "ix_mem_assets_search_document"
_BEFORE = (
    "setweight(to_tsvector('english'::regconfig, title), 'A') || "
    "setweight(jsonb_to_tsvector('english'::regconfig, tags, '[\"string\"]'::jsonb), 'A') || "
    "setweight(to_tsvector('english'::regconfig, coalesce(alt_text, '')), 'B') || "
    "setweight(to_tsvector('english'::regconfig, coalesce(description, '')), 'C')"
)
_AFTER = f"{_BEFORE} || setweight(to_tsvector('english'::regconfig, coalesce(ocr_text, '')), 'D')"


_PROVENANCE = "mem_provenance"
_OPERATIONS = (
    "asset_project_create",
    "asset_project_archive",
    "asset_project_update",
    "asset_folder_create",
    "asset_folder_delete",
    "asset_folder_update",
    "asset_save",
    "asset_update",
    "asset_embed",
    "asset_search",
    "asset_move",
    "asset_delete",
    "asset_restore",
    "asset_object_purge",
    "asset_reconcile",
    "identity_create",
    "api_key_create",
    "api_key_revoke",
    "vault_create",
    "vault_grant",
    "vault_grant_revoke",
    "artifact_store",
    "job_retry",
    "job_cancel",
    "asset_purge",
    "vector_index_switch",
)


def _known(operations: tuple[str, ...]) -> str:
    return "operation IN ({})".format(", ".join(f"'{name}'" for name in operations))


def _document(expression: str) -> None:
    op.drop_index(_INDEX, table_name=_TABLE)
    op.drop_column(_TABLE, "search_document")
    op.add_column(
        _TABLE,
        sa.Column(
            "search_document",
            postgresql.TSVECTOR(),
            sa.Computed(expression, persisted=True),
            nullable=True,
        ),
    )
    op.create_index(_INDEX, _TABLE, ["search_document"], postgresql_using="gin")


def upgrade() -> None:
    op.add_column(_TABLE, sa.Column("ocr_text", sa.Text(), nullable=True))
    op.add_column(_TABLE, sa.Column("ocr", postgresql.JSONB(), nullable=True))
    op.create_check_constraint(
        "ocr_text_length", _TABLE, "ocr_text IS NULL OR char_length(ocr_text) BETWEEN 1 AND 8000"
    )
    op.create_check_constraint(
        "ocr_bounded",
        _TABLE,
        "ocr IS NULL OR (jsonb_typeof(ocr) = 'object' AND pg_column_size(ocr) <= 4096)",
    )
    _document(_AFTER)
    op.drop_constraint("operation_known", _PROVENANCE, type_="check")
    op.create_check_constraint(
        "operation_known", _PROVENANCE, _known((*_OPERATIONS, "asset_enrich"))
    )


def downgrade() -> None:
    op.execute(sa.text("DELETE FROM mem_provenance WHERE operation = 'asset_enrich'"))
    op.drop_constraint("operation_known", _PROVENANCE, type_="check")
    op.create_check_constraint("operation_known", _PROVENANCE, _known(_OPERATIONS))
    _document(_BEFORE)
    op.drop_constraint("ocr_bounded", _TABLE, type_="check")
    op.drop_constraint("ocr_text_length", _TABLE, type_="check")
    op.drop_column(_TABLE, "ocr")
    op.drop_column(_TABLE, "ocr_text")
