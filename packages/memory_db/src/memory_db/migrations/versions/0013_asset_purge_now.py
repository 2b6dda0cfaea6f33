"""Purge now: a deleted image can be purged before its delete grace window ends.

``mem_assets.purged_at`` records when its owner (or an admin grantee) purged a deleted
image from the trash: from then on it is not in the trash and cannot be restored, though its
bytes may stay while another image still uses them (docs/design.md#deleting). The purge is
recorded as ``asset_purge`` provenance, so the provenance operation list (a CHECK constraint) is
replaced: the list in the database plus ``asset_purge`` (read, not written out, so the revisions
before this one may add their own); downgrade fails (and changes nothing) while the ledger holds
``asset_purge`` events.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01 20:30:00
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ASSETS = "mem_assets"
_PROVENANCE = "mem_provenance"
_OPERATION = "asset_purge"


def _operations() -> list[str]:
    """The operations the ledger's CHECK constraint allows now, in its order.

    Read from the database rather than written out, so this revision adds exactly its one
    operation whatever the revisions before it added.
    """
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
    op.add_column(_ASSETS, sa.Column("purged_at", sa.DateTime(timezone=True), nullable=True))
    op.create_check_constraint(
        "purged_only_when_deleted", _ASSETS, "purged_at IS NULL OR status = 'deleted'"
    )
    _replace_operations([name for name in _operations() if name != _OPERATION] + [_OPERATION])


def downgrade() -> None:
    _replace_operations([name for name in _operations() if name != _OPERATION])
    op.drop_constraint("purged_only_when_deleted", _ASSETS, type_="check")
    op.drop_column(_ASSETS, "purged_at")
