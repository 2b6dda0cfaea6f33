"""Ending a web session is a change of access: it bumps ``mem_access_epoch`` and notifies.

Web sessions are read from each server process's cache (``memory_db.repositories.web_sessions``),
so a session that ends while still unexpired must clear every cache as a revoked key does
(migration 0021): a sign-out, the oldest sessions of a key beyond its cap, a delete by hand.
Deleting sessions that had already expired changes nothing a cache would believe (a cached
session is never kept past its expiry), so it notifies nothing: the sign-in's sweep of expired
sessions stays quiet. Changing a session's secret, key or expiry notifies too; recording that
it was seen (``last_seen_at``) does not.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-05 07:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLE = "mem_web_sessions"
_ENDED = "mem_web_sessions_ended"


def upgrade() -> None:
    # A statement-level trigger with the deleted rows as a transition table: one epoch per
    # statement that ended a live session, none for a sweep of expired ones.
    op.execute(
        """
        CREATE FUNCTION mem_web_sessions_ended() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE
            next_epoch bigint;
        BEGIN
            -- As mem_access_changed() (0021) does for every statement of its tables.
            IF EXISTS (SELECT 1 FROM ended WHERE expires_at > now()) THEN
                UPDATE mem_access_epoch SET epoch = epoch + 1 WHERE id = 1
                    RETURNING epoch INTO next_epoch;
                PERFORM pg_notify('memory_access_changes', next_epoch::text);
            END IF;
            RETURN NULL;
        END
        $$
        """
    )
    op.execute(
        f"CREATE TRIGGER {_TABLE}_ended AFTER DELETE ON {_TABLE} "
        f"REFERENCING OLD TABLE AS ended FOR EACH STATEMENT EXECUTE FUNCTION {_ENDED}()"
    )
    op.execute(
        f"CREATE TRIGGER {_TABLE}_access_changed AFTER UPDATE OF token_hash, key_id, "
        f"expires_at, id ON {_TABLE} FOR EACH STATEMENT EXECUTE FUNCTION mem_access_changed()"
    )
    op.execute(
        f"CREATE TRIGGER {_TABLE}_access_changed_truncate AFTER TRUNCATE ON {_TABLE} "
        "FOR EACH STATEMENT EXECUTE FUNCTION mem_access_changed()"
    )


def downgrade() -> None:
    op.execute(f"DROP TRIGGER {_TABLE}_access_changed_truncate ON {_TABLE}")
    op.execute(f"DROP TRIGGER {_TABLE}_access_changed ON {_TABLE}")
    op.execute(f"DROP TRIGGER {_TABLE}_ended ON {_TABLE}")
    op.execute(f"DROP FUNCTION {_ENDED}()")
