"""The file name an image was uploaded with: ``mem_assets.original_file_name``.

The base name a caller gave with its bytes (a web upload, ``POST /uploads`` with ``fileName``,
``image_asset_save`` with ``fileName``), cleaned like a title and bounded to
:data:`memory_db.schema.MAX_FILE_NAME` characters; ``NULL`` when none was given (every image
saved before this revision). It is shown, and is the default title, but it is not part of the
full-text document or the fused text (docs/tools.md#image_asset_save).

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-05 00:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLE = "mem_assets"
_CHECK = "original_file_name_length"
# The bound of memory_db.schema.MAX_FILE_NAME when this revision was written.
_MAX_FILE_NAME = 255


def upgrade() -> None:
    op.add_column(_TABLE, sa.Column("original_file_name", sa.Text(), nullable=True))
    op.create_check_constraint(
        _CHECK,
        _TABLE,
        "original_file_name IS NULL OR "
        f"char_length(original_file_name) BETWEEN 1 AND {_MAX_FILE_NAME}",
    )


def downgrade() -> None:
    op.drop_constraint(_CHECK, _TABLE, type_="check")
    op.drop_column(_TABLE, "original_file_name")
