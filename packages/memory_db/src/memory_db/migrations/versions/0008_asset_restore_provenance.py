"""Provenance of restores: ``asset_restore`` joins the operations the ledger accepts.

Deleted images stay recoverable for ``ASSET_DELETE_GRACE_HOURS`` and ``image_asset_restore``
brings them back; each restore is recorded like every other change. The operation list is a
CHECK constraint, so it is replaced here.

Downgrade restores the old list; it fails (and changes nothing) while the ledger still holds
restore events, rather than deleting audit records.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 12:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLE = "mem_provenance"
_BEFORE = (
    "asset_project_create",
    "asset_project_archive",
    "asset_folder_create",
    "asset_folder_delete",
    "asset_save",
    "asset_embed",
    "asset_search",
    "asset_move",
    "asset_delete",
    "asset_object_purge",
    "asset_reconcile",
    "identity_create",
    "api_key_create",
    "api_key_revoke",
    "vault_create",
    "vault_grant",
)
_AFTER = (*_BEFORE[:9], "asset_restore", *_BEFORE[9:])


def _known(operations: tuple[str, ...]) -> str:
    return "operation IN ({})".format(", ".join(f"'{name}'" for name in operations))


def upgrade() -> None:
    op.drop_constraint("operation_known", _TABLE, type_="check")
    op.create_check_constraint("operation_known", _TABLE, _known(_AFTER))


def downgrade() -> None:
    op.drop_constraint("operation_known", _TABLE, type_="check")
    op.create_check_constraint("operation_known", _TABLE, _known(_BEFORE))
