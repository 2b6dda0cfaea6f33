"""The versioned vector index (docs/design.md#vectors): tables, aliases, scoped upsert, ANN."""

from memory_db.vectors.codes import CODE_SCHEME, vector_codes
from memory_db.vectors.ddl import (
    DEFAULT_ALIAS,
    WRITABLE_COLUMNS,
    ElementType,
    create_index,
    describe_index,
    drop_index,
    ensure_default_index,
    resolve_alias,
    switch_alias,
)
from memory_db.vectors.index import (
    SearchTuning,
    VectorHit,
    VectorIndex,
    VectorRecord,
    vector_id,
)

__all__ = [
    "CODE_SCHEME",
    "DEFAULT_ALIAS",
    "WRITABLE_COLUMNS",
    "ElementType",
    "SearchTuning",
    "VectorHit",
    "VectorIndex",
    "VectorRecord",
    "create_index",
    "describe_index",
    "drop_index",
    "ensure_default_index",
    "resolve_alias",
    "switch_alias",
    "vector_codes",
    "vector_id",
]
