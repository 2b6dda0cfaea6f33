"""Vector codes from a fixed ±1 projection (SimHash) instead of the elements' signs.

Revision 0005 generated ``embedding_bits`` as ``binary_quantize(embedding)``: one bit per
positive element. Those bits say little about vectors whose elements are mostly zero (the local
embedder's text vectors), so the bits scan lost recall on them. The codes are now the signs of
the vector's dot products with a fixed ±1 matrix (``memory_db.vectors.codes``, scheme
``simhash-sha256-v1``), computed by the writer: the column becomes a plain ``NOT NULL`` column
and every existing row gets its new code here, in batches. The covering scope index follows the
column by itself.

Downgrade restores the generated column of 0005 (and its covering index).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30 18:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from memory_db.vectors.codes import vector_codes

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_KEYS = "(vault, owner_identity, project_id, folder_id)"
_INCLUDE = "INCLUDE (model, id, asset_id, mime_type, source_kind, created_at, embedding_bits)"
_BATCH = 2_000


def _registered() -> list[tuple[str, int]]:
    rows = op.get_bind().execute(sa.text("SELECT name, dimensions FROM mem_vector_indexes"))
    return [(str(name), int(dimensions)) for name, dimensions in rows]


def _generated(name: str) -> bool:
    found = op.get_bind().scalar(
        sa.text(
            "SELECT is_generated FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = :t "
            "AND column_name = 'embedding_bits'"
        ),
        {"t": name},
    )
    return found == "ALWAYS"


def _rewrite_codes(name: str, dimensions: int) -> None:
    # The name comes from the registry, whose CHECK allows only lowercase identifiers.
    bind = op.get_bind()
    after = ""
    while True:
        rows = bind.execute(
            sa.text(
                f'SELECT id, embedding::real[] FROM "{name}" '  # noqa: S608
                f"WHERE id > :after ORDER BY id LIMIT {_BATCH}"
            ),
            {"after": after},
        ).all()
        if not rows:
            return
        codes = vector_codes([list(row[1]) for row in rows], dimensions)
        bind.execute(
            sa.text(
                f'UPDATE "{name}" t SET embedding_bits = CAST(c.bits AS bit({dimensions})) '  # noqa: S608
                "FROM unnest(CAST(:ids AS text[]), CAST(:codes AS text[])) AS c(id, bits) "
                "WHERE t.id = c.id"
            ),
            {"ids": [row[0] for row in rows], "codes": codes},
        )
        after = rows[-1][0]


def _hnsw_indexes(name: str) -> list[tuple[str, str]]:
    rows = op.get_bind().execute(
        sa.text(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() "
            "AND tablename = :t AND indexdef LIKE '%USING hnsw%'"
        ),
        {"t": name},
    )
    return [(str(index), str(definition)) for index, definition in rows]


def upgrade() -> None:
    for name, dimensions in _registered():
        # Names come from the registry, whose CHECK allows only lowercase identifiers.
        if _generated(name):
            op.execute(f'ALTER TABLE "{name}" ALTER COLUMN embedding_bits DROP EXPRESSION')
        # Every rewritten row is a new row version, which the HNSW graph would take in one
        # insertion at a time (measured: about 7 s per 2,000 rows); building the graph again
        # once the codes are written is several times faster.
        graphs = _hnsw_indexes(name)
        for index, _definition in graphs:
            op.execute(f'DROP INDEX "{index}"')
        _rewrite_codes(name, dimensions)
        op.execute(f'ALTER TABLE "{name}" ALTER COLUMN embedding_bits SET NOT NULL')
        if graphs:
            # The default 64 MB made the build of a 100,000-vector graph take 7.5 minutes; with
            # the graph in memory it takes about one (memory is taken as the build needs it).
            op.execute("SET LOCAL maintenance_work_mem = '1GB'")
        for _index, definition in graphs:
            op.execute(definition)


def downgrade() -> None:
    for name, dimensions in _registered():
        if _generated(name):
            continue
        op.execute(f'ALTER TABLE "{name}" DROP COLUMN embedding_bits')  # drops the scope index
        op.execute(
            f'ALTER TABLE "{name}" ADD COLUMN embedding_bits bit({dimensions}) '
            f"GENERATED ALWAYS AS (binary_quantize(embedding)::bit({dimensions})) STORED"
        )
        op.execute(f'CREATE INDEX "{name}_scope" ON "{name}" {_KEYS} {_INCLUDE}')
