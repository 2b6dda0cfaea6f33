"""Every key a principal: a note, a pause, activity counts, and which key saved each asset.

``mem_api_keys`` gains ``note`` (why the key was made, at most 500 characters), ``paused_at``
(a paused key is refused like a revoked one until it is resumed), and the counters ``calls``
and ``searches`` (added up in each server process and written at most once a minute). Pausing and
resuming are recorded in provenance (``api_key_pause``, ``api_key_resume``).
Pausing and resuming change access, so the key trigger of revision 0021 now fires on
``paused_at`` too and every process drops its key cache before the change returns.

``mem_assets.saved_by_key_id`` names the key whose call saved the asset (``savedBy``). It is
written by the insert of the save itself. It is not a foreign key: keys are revoked, never
deleted by the server, and a save must not wait on a lock of the key's row (which a pause takes);
a key id that no longer exists is shown with no label. Two indexes: listing
by it walks the listed range of one vault (``ix_mem_assets_listed_saved_by``), and a key's save
count reads ``ix_mem_assets_saved_by``.

Older assets are backfilled where the answer is certain: an asset whose creator had exactly one
key, created before the asset, was saved with that key (provenance records the identity, not
the key, so nothing else is certain). Every other older asset keeps NULL.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-05 13:00:00
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_LISTED = "status IN ('processing', 'ready', 'failed')"
_TRIGGER = "mem_api_keys_access_changed"
_OPERATIONS = ["api_key_pause", "api_key_resume"]


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


def _key_trigger(columns: str) -> None:
    op.execute(f"DROP TRIGGER {_TRIGGER} ON mem_api_keys")
    op.execute(
        f"CREATE TRIGGER {_TRIGGER} AFTER UPDATE OF {columns} OR DELETE ON mem_api_keys "
        "FOR EACH STATEMENT EXECUTE FUNCTION mem_access_changed()"
    )


def upgrade() -> None:
    op.add_column("mem_api_keys", sa.Column("note", sa.Text(), nullable=True))
    op.add_column("mem_api_keys", sa.Column("paused_at", sa.DateTime(timezone=True)))
    for counter in ("calls", "searches"):
        op.add_column(
            "mem_api_keys",
            sa.Column(counter, sa.BigInteger(), server_default="0", nullable=False),
        )
    op.create_check_constraint(
        op.f("ck_mem_api_keys_note_length"),
        "mem_api_keys",
        "note IS NULL OR char_length(note) BETWEEN 1 AND 500",
    )
    op.create_check_constraint(
        op.f("ck_mem_api_keys_counts_nonnegative"), "mem_api_keys", "calls >= 0 AND searches >= 0"
    )
    _key_trigger("revoked_at, paused_at, scopes, key_hash, owner_identity, id")
    kept = [o for o in _listed("ck_mem_provenance_operation_known") if o not in _OPERATIONS]
    _operations(kept + _OPERATIONS)

    op.add_column("mem_assets", sa.Column("saved_by_key_id", sa.Text(), nullable=True))
    op.create_index("ix_mem_assets_saved_by", "mem_assets", ["saved_by_key_id"])
    op.create_index(
        "ix_mem_assets_listed_saved_by",
        "mem_assets",
        [
            "owner_identity",
            "vault",
            "saved_by_key_id",
            sa.text("created_at DESC"),
            sa.text("id DESC"),
        ],
        postgresql_where=sa.text(_LISTED),
    )
    op.execute(
        """
        UPDATE mem_assets a SET saved_by_key_id = only_key.id
        FROM (
            SELECT min(id) AS id, owner_identity, min(created_at) AS created_at
            FROM mem_api_keys GROUP BY owner_identity HAVING count(*) = 1
        ) only_key
        WHERE a.created_by = only_key.owner_identity AND a.created_at >= only_key.created_at
        """
    )


def downgrade() -> None:
    op.drop_index("ix_mem_assets_listed_saved_by", table_name="mem_assets")
    op.drop_index("ix_mem_assets_saved_by", table_name="mem_assets")
    op.drop_column("mem_assets", "saved_by_key_id")
    _key_trigger("revoked_at, scopes, key_hash, owner_identity, id")
    _operations([o for o in _listed("ck_mem_provenance_operation_known") if o not in _OPERATIONS])
    op.drop_constraint(op.f("ck_mem_api_keys_counts_nonnegative"), "mem_api_keys", type_="check")
    op.drop_constraint(op.f("ck_mem_api_keys_note_length"), "mem_api_keys", type_="check")
    for column in ("searches", "calls", "paused_at", "note"):
        op.drop_column("mem_api_keys", column)
