"""Provenance of the everyday tools: edits, renames and revoked grants join the ledger.

``image_asset_update`` (``asset_update``), ``image_project_update`` (``asset_project_update``),
``image_folder_update`` (``asset_folder_update``) and the operator's ``revoke-grant``
(``vault_grant_revoke``) are recorded like every other change. The operation list is a CHECK
constraint, so it is replaced here.

Downgrade restores the old list; it fails (and changes nothing) while the ledger still holds
events of the new operations, rather than deleting audit records.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01 17:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
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
    "asset_restore",
    "asset_object_purge",
    "asset_reconcile",
    "identity_create",
    "api_key_create",
    "api_key_revoke",
    "vault_create",
    "vault_grant",
)
_AFTER = (
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
)


def _known(operations: tuple[str, ...]) -> str:
    return "operation IN ({})".format(", ".join(f"'{name}'" for name in operations))


def upgrade() -> None:
    op.drop_constraint("operation_known", _TABLE, type_="check")
    op.create_check_constraint("operation_known", _TABLE, _known(_AFTER))


def downgrade() -> None:
    op.drop_constraint("operation_known", _TABLE, type_="check")
    op.create_check_constraint("operation_known", _TABLE, _known(_BEFORE))
