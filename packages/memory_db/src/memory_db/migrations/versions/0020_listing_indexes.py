"""Listing at scale: an index for every order a listing walks (docs/scaling.md#listing-at-scale).

At 100,000 assets ``image_asset_list`` in its default order read the whole vault and sorted
it (spilling to disk): the only index on the vault led with ``status``, and a listing asks for
three statuses, so no index gave the rows in creation order. These indexes hold a listing's
rows in its keyset order, behind the tenant and vault columns, so a page is one index range
read until it is full:

- ``ix_mem_assets_listed``: a vault's visible assets, newest first (oldest first backwards);
- ``ix_mem_assets_listed_project`` / ``ix_mem_assets_listed_folder`` /
  ``ix_mem_assets_listed_host``: the same within a project, one folder, or one source host;
- ``ix_mem_assets_trash``: a vault's restorable deleted assets, most recently deleted first;
- ``ix_mem_assets_tags``: which assets hold a tag (GIN), for a tag too rare for the ordered
  walk to meet soon: its matches are read and the top of them sorted.

The first three are partial on the visible statuses, which the listing query names as
constants (not parameters) so that a cached generic plan can prove them too.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-05 04:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLE = "mem_assets"
# memory_db.repositories.assets.VISIBLE_STATUSES when this revision was written.
_VISIBLE = sa.text("status IN ('processing', 'ready', 'failed')")
_ORDER = (sa.text("created_at DESC"), sa.text("id DESC"))
# memory_db.repositories.filters.source_host() when this revision was written: the index is
# used only by a condition on this very expression.
_HOST = r"lower(substring(source_url, '^[a-z]+://\[?([^/\]:]+)'))"


def upgrade() -> None:
    op.create_index(
        "ix_mem_assets_listed",
        _TABLE,
        ["owner_identity", "vault", *_ORDER],
        postgresql_where=_VISIBLE,
    )
    op.create_index(
        "ix_mem_assets_listed_project",
        _TABLE,
        ["owner_identity", "vault", "project_id", *_ORDER],
        postgresql_where=_VISIBLE,
    )
    op.create_index(
        "ix_mem_assets_listed_folder",
        _TABLE,
        ["owner_identity", "vault", "folder_id", *_ORDER],
        postgresql_where=_VISIBLE,
    )
    op.create_index(
        "ix_mem_assets_listed_host",
        _TABLE,
        ["owner_identity", "vault", sa.text(_HOST), *_ORDER],
        postgresql_where=_VISIBLE,
    )
    op.create_index(
        "ix_mem_assets_trash",
        _TABLE,
        ["owner_identity", "vault", sa.text("deleted_at DESC"), sa.text("id DESC")],
        postgresql_where=sa.text("status = 'deleted' AND purged_at IS NULL"),
    )
    op.create_index(
        "ix_mem_assets_tags",
        _TABLE,
        ["tags"],
        postgresql_using="gin",
        postgresql_ops={"tags": "jsonb_path_ops"},
    )


def downgrade() -> None:
    for name in (
        "ix_mem_assets_tags",
        "ix_mem_assets_trash",
        "ix_mem_assets_listed_host",
        "ix_mem_assets_listed_folder",
        "ix_mem_assets_listed_project",
        "ix_mem_assets_listed",
    ):
        op.drop_index(name, table_name=_TABLE)
