"""When and with what a photo was taken: capture columns from EXIF, and a listing order by them.

``mem_assets`` gains what a save reads from the original's EXIF (docs/design.md#capture):
``taken_at`` (``DateTimeOriginal``), ``taken_offset_minutes`` (``OffsetTimeOriginal``; NULL when
the camera's clock had no zone: ``taken_at`` is then that wall-clock time read as UTC),
``camera_make``, ``camera_model``, ``orientation``, and ``latitude``/``longitude`` (kept only
when the operator sets ``ASSET_KEEP_LOCATION``). Existing assets get them from a ``capture``
job (``memory-server enrich --what capture``), a new job kind.

``ix_mem_assets_listed_taken`` holds a vault's visible assets by capture time, newest first and
undated last (they sort as taken in the year 1000; real capture times are from 1826 on), so the ``taken`` order and its ``takenAfter``/``takenBefore`` range read an index range; the
``_project``, ``_folder`` and ``_host`` ones do the same within a project, a folder or a source
host, as revision 0020's do for the creation order.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-05 12:55:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLE = "mem_assets"
_JOBS = "mem_asset_embedding_jobs"
# memory_db.schema's values when this revision was written.
_VISIBLE = sa.text("status IN ('processing', 'ready', 'failed')")
_TAKEN_KEY = "COALESCE(taken_at, '1000-01-01 00:00:00+00'::timestamp with time zone)"
# The listing index of the source host (0020) has its expression; these follow it.
_HOST = r"lower(substring(source_url, '^[a-z]+://\[?([^/\]:]+)'))"
# A vault's, a project's, a folder's and a source host's assets by capture time.
_TAKEN_INDEXES: dict[str, list[str | sa.TextClause]] = {
    "": [],
    "_project": ["project_id"],
    "_folder": ["project_id", "folder_id"],
    "_host": [sa.text(_HOST)],
    # By the key that saved (revision 0023's column), for `savedBy` in the taken order.
    "_saved_by": ["saved_by_key_id"],
}
_KINDS_BEFORE = ("embed", "ocr", "describe")
_KINDS_AFTER = (*_KINDS_BEFORE, "capture")
_CHECKS = {
    "taken_at_range": "taken_at IS NULL OR taken_at >= '1826-01-01'",
    "taken_offset_range": "taken_offset_minutes IS NULL OR "
    "(taken_at IS NOT NULL AND taken_offset_minutes BETWEEN -840 AND 840)",
    "camera_make_length": "camera_make IS NULL OR char_length(camera_make) BETWEEN 1 AND 64",
    "camera_model_length": "camera_model IS NULL OR char_length(camera_model) BETWEEN 1 AND 64",
    "orientation_range": "orientation IS NULL OR orientation BETWEEN 1 AND 8",
    "location_range": "(latitude IS NULL AND longitude IS NULL) OR "
    "(latitude BETWEEN -90 AND 90 AND longitude BETWEEN -180 AND 180)",
}


def _kinds(kinds: tuple[str, ...]) -> str:
    return "kind IN (" + ", ".join(f"'{kind}'" for kind in kinds) + ")"


def upgrade() -> None:
    op.add_column(_TABLE, sa.Column("taken_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column(_TABLE, sa.Column("taken_offset_minutes", sa.SmallInteger(), nullable=True))
    op.add_column(_TABLE, sa.Column("camera_make", sa.Text(), nullable=True))
    op.add_column(_TABLE, sa.Column("camera_model", sa.Text(), nullable=True))
    op.add_column(_TABLE, sa.Column("orientation", sa.SmallInteger(), nullable=True))
    op.add_column(_TABLE, sa.Column("latitude", sa.Double(), nullable=True))
    op.add_column(_TABLE, sa.Column("longitude", sa.Double(), nullable=True))
    for name, condition in _CHECKS.items():
        op.create_check_constraint(name, _TABLE, condition)
    for suffix, columns in _TAKEN_INDEXES.items():
        op.create_index(
            f"ix_mem_assets_listed_taken{suffix}",
            _TABLE,
            [
                "owner_identity",
                "vault",
                *columns,
                sa.text(f"{_TAKEN_KEY} DESC"),
                sa.text("id DESC"),
            ],
            postgresql_where=_VISIBLE,
        )
    op.drop_constraint("kind_known", _JOBS, type_="check")
    op.create_check_constraint("kind_known", _JOBS, _kinds(_KINDS_AFTER))


def downgrade() -> None:
    # Capture jobs cannot be represented before this revision.
    op.execute(sa.text("DELETE FROM mem_asset_embedding_jobs WHERE kind = 'capture'"))
    op.drop_constraint("kind_known", _JOBS, type_="check")
    op.create_check_constraint("kind_known", _JOBS, _kinds(_KINDS_BEFORE))
    for suffix in _TAKEN_INDEXES:
        op.drop_index(f"ix_mem_assets_listed_taken{suffix}", table_name=_TABLE)
    for name in _CHECKS:
        op.drop_constraint(name, _TABLE, type_="check")
    for column in (
        "longitude",
        "latitude",
        "orientation",
        "camera_model",
        "camera_make",
        "taken_offset_minutes",
        "taken_at",
    ):
        op.drop_column(_TABLE, column)
