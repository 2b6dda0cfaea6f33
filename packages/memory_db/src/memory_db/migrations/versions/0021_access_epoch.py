"""Changes of access are counted and notified: ``mem_access_epoch`` and its triggers.

Every statement that changes an API key's standing (``revoked_at``, ``scopes``, ``key_hash``,
``owner_identity``; a delete), a grant or a vault bumps the one row of ``mem_access_epoch`` and
sends ``pg_notify('memory_access_changes', <epoch>)`` when its transaction commits. The row
lock makes epochs follow commit order. Recording that a key was used (``last_used_at``) is not
a change of access and notifies nothing. Each server process keeps a cache of active keys
that a notification clears (``memory_db.repositories.access_changes``, docs/design.md).

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-05 04:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_FUNCTION = "mem_access_changed"
# (table, trigger, events): what a key cache must hear of.
_TRIGGERS = (
    (
        "mem_api_keys",
        "mem_api_keys_access_changed",
        "UPDATE OF revoked_at, scopes, key_hash, owner_identity, id OR DELETE",
    ),
    ("mem_vault_grants", "mem_vault_grants_access_changed", "INSERT OR UPDATE OR DELETE"),
    ("mem_vaults", "mem_vaults_access_changed", "UPDATE OR DELETE"),
)


def upgrade() -> None:
    op.create_table(
        "mem_access_epoch",
        sa.Column("id", sa.SmallInteger(), autoincrement=False, nullable=False),
        sa.Column("epoch", sa.BigInteger(), server_default="0", nullable=False),
        sa.CheckConstraint("id = 1", name=op.f("ck_mem_access_epoch_single_row")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_mem_access_epoch")),
    )
    op.execute("INSERT INTO mem_access_epoch (id, epoch) VALUES (1, 0)")
    op.execute(
        """
        CREATE FUNCTION mem_access_changed() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE
            next_epoch bigint;
        BEGIN
            UPDATE mem_access_epoch SET epoch = epoch + 1 WHERE id = 1
                RETURNING epoch INTO next_epoch;
            PERFORM pg_notify('memory_access_changes', next_epoch::text);
            RETURN NULL;
        END
        $$
        """
    )
    for table, trigger, events in _TRIGGERS:
        op.execute(
            f"CREATE TRIGGER {trigger} AFTER {events} ON {table} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION {_FUNCTION}()"
        )
        op.execute(
            f"CREATE TRIGGER {trigger}_truncate AFTER TRUNCATE ON {table} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION {_FUNCTION}()"
        )


def downgrade() -> None:
    for table, trigger, _events in _TRIGGERS:
        op.execute(f"DROP TRIGGER {trigger}_truncate ON {table}")
        op.execute(f"DROP TRIGGER {trigger} ON {table}")
    op.execute(f"DROP FUNCTION {_FUNCTION}()")
    op.drop_table("mem_access_epoch")
