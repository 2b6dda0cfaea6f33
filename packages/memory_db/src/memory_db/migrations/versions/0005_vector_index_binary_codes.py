"""1-bit codes of every vector, read index-only by the opt-in bits scan.

Each registered vector index table gets a generated column ``embedding_bits``
(``binary_quantize(embedding)``, one bit per dimension) and its scope B-tree becomes a covering
index that includes the codes and the columns a search filters on; a narrow index on the scope
keys alone serves the count that picks a search's path. The bits scan (``strategy="scan"``)
of one vault, project or folder ranks the codes from one contiguous index range and re-scores only
the best candidates with their full vectors (docs/vector-index.md). Tables created from now on
have both from the start (``memory_db.vectors.ddl``); the SQL below is this revision's own copy.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30 15:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_KEYS = "(vault, owner_identity, project_id, folder_id)"
_INCLUDE = "INCLUDE (model, id, asset_id, mime_type, source_kind, created_at, embedding_bits)"


def _registered() -> list[tuple[str, int]]:
    rows = op.get_bind().execute(sa.text("SELECT name, dimensions FROM mem_vector_indexes"))
    return [(str(name), int(dimensions)) for name, dimensions in rows]


def _has_codes(name: str) -> bool:
    found = op.get_bind().scalar(
        sa.text(
            "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name = :t AND column_name = 'embedding_bits'"
        ),
        {"t": name},
    )
    return found is not None


def upgrade() -> None:
    for name, dimensions in _registered():
        if _has_codes(name):
            continue
        # Names come from the registry, whose CHECK allows only lowercase identifiers.
        op.execute(
            f'ALTER TABLE "{name}" ADD COLUMN embedding_bits bit({dimensions}) '
            f"GENERATED ALWAYS AS (binary_quantize(embedding)::bit({dimensions})) STORED"
        )
        op.execute(f'DROP INDEX IF EXISTS "{name}_scope"')
        op.execute(f'CREATE INDEX "{name}_scope" ON "{name}" {_KEYS} {_INCLUDE}')
        op.execute(f'CREATE INDEX IF NOT EXISTS "{name}_scope_keys" ON "{name}" {_KEYS}')


def downgrade() -> None:
    for name, _dimensions in _registered():
        if not _has_codes(name):
            continue
        op.execute(f'DROP INDEX IF EXISTS "{name}_scope"')
        op.execute(f'DROP INDEX IF EXISTS "{name}_scope_keys"')
        op.execute(f'ALTER TABLE "{name}" DROP COLUMN embedding_bits')
        op.execute(f'CREATE INDEX "{name}_scope" ON "{name}" {_KEYS}')
