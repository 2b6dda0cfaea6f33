"""Purge now: a deleted image can be purged before its delete grace window ends.

``mem_assets.purged_at`` records when its owner (or a writer with the right) purged a deleted
image from the trash: from then on it is not in the trash and cannot be restored, though its
bytes may stay while another image still uses them (docs/design.md#deleting). The purge is
recorded as ``asset_purge`` provenance, so the provenance operation list (a CHECK constraint) is
replaced, as revision 0009 did; downgrade fails (and changes nothing) while the ledger holds
``asset_purge`` events.

Revision ID: 0013
Revises: 0011
Create Date: 2026-12-01 20:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ASSETS = "mem_assets"
_PROVENANCE = "mem_provenance"
_OPERATIONS_BEFORE = (
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
)
_OPERATIONS_AFTER = (*_OPERATIONS_BEFORE, "asset_purge")


def _known(operations: tuple[str, ...]) -> str:
    return "operation IN ({})".format(", ".join(f"'{name}'" for name in operations))


def upgrade() -> None:
    op.add_column(_ASSETS, sa.Column("purged_at", sa.DateTime(timezone=True), nullable=True))
    op.create_check_constraint(
        "purged_only_when_deleted", _ASSETS, "purged_at IS NULL OR status = 'deleted'"
    )
    op.drop_constraint("operation_known", _PROVENANCE, type_="check")
    op.create_check_constraint("operation_known", _PROVENANCE, _known(_OPERATIONS_AFTER))


def downgrade() -> None:
    op.drop_constraint("operation_known", _PROVENANCE, type_="check")
    op.create_check_constraint("operation_known", _PROVENANCE, _known(_OPERATIONS_BEFORE))
    op.drop_constraint("purged_only_when_deleted", _ASSETS, type_="check")
    op.drop_column(_ASSETS, "purged_at")
