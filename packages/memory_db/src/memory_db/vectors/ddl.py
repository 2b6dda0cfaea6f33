"""Physical versioned vector tables: creation, registry, aliases (docs/design.md#vectors).

One table per index name (default ``memory_assets_v1``), holding the vector's metadata as real
columns. Element type ``halfvec`` by default: half the bytes of ``vector`` with the same recall
in our measurement (``benchmarks/vector_search.py``, ``docs/vector-index.md``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from sqlalchemy import text
from sqlalchemy.dialects.postgresql.base import RESERVED_WORDS
from sqlalchemy.ext.asyncio import AsyncSession

from memory_db.embedding.factory import EmbedderIdentity
from memory_db.errors import Conflict, InvalidInput, NotFound
from memory_db.settings import DEFAULT_GRAPH_M, GRAPH_M_CHOICES

ElementType = Literal["halfvec", "vector"]
DEFAULT_ALIAS = "memory_assets"
_IDENT = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
# The relations an index table brings (its key and indexes): PostgreSQL would cut a name
# longer than 63 bytes silently, onto another's, so the table's name leaves room for these.
_DERIVED = ("_pkey", "_hnsw", "_scope", "_scope_keys", "_asset", "_vault_created", "_vault_kind")
MAX_NAME = 63 - max(len(suffix) for suffix in _DERIVED)
# Built-in HNSW limits: 2,000 dimensions for vector, 4,000 for halfvec.
_MAX_INDEXED = {"vector": 2000, "halfvec": 4000}


def check_identifier(name: str, what: str = "index name") -> str:
    """A lowercase SQL identifier (it becomes a table name), or ``InvalidInput``."""
    if (
        not _IDENT.fullmatch(name)
        or len(name) > MAX_NAME
        or name.startswith(("mem_", "pg_"))
        or name in RESERVED_WORDS  # it is written into SQL unquoted
    ):
        raise InvalidInput(
            f"{what} must be a lowercase identifier of at most {MAX_NAME} characters, not an "
            "SQL keyword nor starting with mem_ or pg_"
        )
    return name


# Every column, in table order: the column list for bulk loads (``COPY``). A writer supplies
# ``embedding_bits`` with ``memory_db.vectors.codes.vector_codes`` of the embedding.
WRITABLE_COLUMNS = (
    "id",
    "asset_id",
    "object_id",
    "owner_identity",
    "vault",
    "project_id",
    "folder_id",
    "representation",
    "model",
    "dimensions",
    "mime_type",
    "source_kind",
    "created_at",
    "embedding",
    "embedding_bits",
)
# The columns the bits scan reads besides the scope keys: with them in the scope B-tree, that
# search is an index-only scan of one contiguous range (binary codes), not a table visit per
# row; only the few re-scored candidates are read from the table.
SCOPE_INCLUDE = (
    "model",
    "id",
    "asset_id",
    "mime_type",
    "source_kind",
    "created_at",
    "embedding_bits",
)


# The HNSW graph's build parameters (docs/vector-index.md#the-graph-parameters): how many
# neighbours each node keeps (``m``) and how wide the search that picks them is
# (``ef_construction``). Chosen by ``benchmarks/scale.py``; see the figures in docs/scaling.md.
# ``m`` is a setting (ASSET_VECTOR_GRAPH_M, 32 by default): 32 reaches at 300,000 vectors with
# a walk of 200 candidates the recall 16 reaches with 1,000, but an insert costs about 3.4x as
# much CPU.
HNSW_M = DEFAULT_GRAPH_M
# What pgvector builds when an index names no ``m``: graphs made before the setting existed.
PGVECTOR_DEFAULT_M = 16
HNSW_EF_CONSTRUCTION = 64


def hnsw_index_sql(
    name: str,
    element: ElementType,
    *,
    m: int = HNSW_M,
    ef_construction: int = HNSW_EF_CONSTRUCTION,
) -> str:
    """The HNSW graph of an index table (cosine distance), with its build parameters."""
    return (
        f"CREATE INDEX {name}_hnsw ON {name} USING hnsw (embedding {element}_cosine_ops) "
        f"WITH (m = {int(m)}, ef_construction = {int(ef_construction)})"
    )


def scope_index_sql(name: str) -> str:
    """The scope B-tree, covering what the bits scan (``strategy="scan"``) reads."""
    return (
        f"CREATE INDEX {name}_scope ON {name} (vault, owner_identity, project_id, folder_id) "
        f"INCLUDE ({', '.join(SCOPE_INCLUDE)})"
    )


def _table_sql(name: str, dimensions: int, element: ElementType, m: int) -> list[str]:
    column = f"{element}({dimensions})"
    return [
        f"""
        CREATE TABLE {name} (
            id text PRIMARY KEY CHECK (id ~ '^[0-9a-f]{{64}}$'),
            asset_id text NOT NULL,
            object_id text NOT NULL,
            owner_identity text NOT NULL,
            vault text NOT NULL,
            project_id text,
            folder_id text,
            representation text NOT NULL CHECK (representation IN ('visual', 'fused')),
            model text NOT NULL,
            dimensions integer NOT NULL CHECK (dimensions = {dimensions}),
            mime_type text NOT NULL,
            source_kind text NOT NULL,
            created_at timestamptz NOT NULL,
            embedding {column} NOT NULL,
            embedding_bits bit({dimensions}) NOT NULL
        )
        """,
        # Keep vectors in the row (a 1,024-d halfvec is just over the TOAST threshold): a
        # filtered exact search then reads the matching rows, not one TOAST lookup per row.
        f"ALTER TABLE {name} ALTER COLUMN embedding SET STORAGE PLAIN",
        hnsw_index_sql(name, element, m=m),
        scope_index_sql(name),
        # Keys only: counting the rows a filter matches (how a search picks its path) reads
        # this narrow index, a sixth of the covering one's pages.
        f"CREATE INDEX {name}_scope_keys ON {name} (vault, owner_identity, project_id, folder_id)",
        f"CREATE INDEX {name}_asset ON {name} (asset_id)",
        f"CREATE INDEX {name}_vault_created ON {name} (vault, created_at)",
        f"CREATE INDEX {name}_vault_kind ON {name} (vault, source_kind, mime_type)",
    ]


def check_dimensions(dimensions: int, element: ElementType) -> None:
    """``InvalidInput`` unless an index of ``element`` can hold (and HNSW-index) ``dimensions``."""
    if element not in _MAX_INDEXED:
        raise InvalidInput("element type must be halfvec or vector")
    if not 1 <= dimensions <= _MAX_INDEXED[element]:
        raise InvalidInput(f"{element} indexes hold 1-{_MAX_INDEXED[element]} dimensions")


async def create_index(
    session: AsyncSession,
    name: str,
    *,
    dimensions: int,
    element: ElementType = "halfvec",
    identity: EmbedderIdentity | None = None,
    m: int = HNSW_M,
) -> None:
    """Create and register a versioned index table (``Conflict`` if the name is taken).

    ``identity``: the embedder that will fill it (its dimensions must be ``dimensions``).
    ``m``: the neighbours per node of its HNSW graph (one of ``GRAPH_M_CHOICES``).
    """
    if m not in GRAPH_M_CHOICES:
        raise InvalidInput(f"an HNSW graph keeps {GRAPH_M_CHOICES} neighbours per node, not {m}")
    check_identifier(name)
    check_dimensions(dimensions, element)
    if identity is not None and identity.dimensions != dimensions:
        raise InvalidInput(f"the embedder makes {identity.dimensions}-d vectors, not {dimensions}")
    exists = await session.scalar(text("SELECT to_regclass(:n) IS NOT NULL"), {"n": name})
    registered = await session.scalar(
        text("SELECT 1 FROM mem_vector_indexes WHERE name = :n"), {"n": name}
    )
    if exists or registered:
        raise Conflict(f"vector index {name} already exists")
    # An index named like an alias would make every operator command that takes either name
    # (reindex, drop-index, the health report) ambiguous.
    is_alias = await session.scalar(
        text("SELECT 1 FROM mem_vector_index_aliases WHERE alias = :n"), {"n": name}
    )
    if is_alias:
        raise Conflict(f"{name} is the name of an alias; name the index another way")
    derived = [name + suffix for suffix in _DERIVED]
    taken = await session.scalar(
        text("SELECT n FROM unnest(CAST(:names AS text[])) n WHERE to_regclass(n) IS NOT NULL"),
        {"names": derived},
    )
    if taken is not None:
        raise Conflict(f"{taken} exists already: {name} cannot have its indexes; choose another")
    for statement in _table_sql(name, dimensions, element, m):
        await session.execute(text(statement))
    await session.execute(
        text(
            "INSERT INTO mem_vector_indexes (name, dimensions, element_type, provider, model) "
            "VALUES (:n, :d, :e, :p, :m)"
        ),
        {
            "n": name,
            "d": dimensions,
            "e": element,
            "p": None if identity is None else identity.provider,
            "m": None if identity is None else identity.model,
        },
    )


async def index_identity(session: AsyncSession, name: str) -> EmbedderIdentity | None:
    """The embedder recorded for an index (``None`` for one made before it was recorded)."""
    row = (
        await session.execute(
            text("SELECT provider, model, dimensions FROM mem_vector_indexes WHERE name = :n"),
            {"n": name},
        )
    ).one_or_none()
    if row is None:
        raise NotFound("vector index", name)
    if row[0] is None or row[1] is None:
        return None
    return EmbedderIdentity(str(row[0]), str(row[1]), int(row[2]))


async def record_identity(session: AsyncSession, name: str, identity: EmbedderIdentity) -> bool:
    """Record ``identity`` for an index that has none yet (its dimensions must match)."""
    result = await session.execute(
        text(
            "UPDATE mem_vector_indexes SET provider = :p, model = :m "
            "WHERE name = :n AND provider IS NULL AND dimensions = :d"
        ),
        {"n": name, "p": identity.provider, "m": identity.model, "d": identity.dimensions},
    )
    return bool(getattr(result, "rowcount", 0))


async def describe_index(session: AsyncSession, name: str) -> tuple[int, ElementType]:
    """Dimensions and element type of a registered index."""
    row = (
        await session.execute(
            text("SELECT dimensions, element_type FROM mem_vector_indexes WHERE name = :n"),
            {"n": name},
        )
    ).one_or_none()
    if row is None:
        raise NotFound("vector index", name)
    element: ElementType = "vector" if row[1] == "vector" else "halfvec"
    return int(row[0]), element


@dataclass(frozen=True)
class CacheFit:
    """The sizes that decide whether searches of an index are served from shared buffers."""

    graph_bytes: int  # the index table's HNSW indexes, on disk
    table_bytes: int  # the index table itself (the rows a search reloads)
    shared_buffers_bytes: int  # the server's shared_buffers

    @property
    def graph_fits(self) -> bool:
        """Whether the HNSW graph fits in ``shared_buffers`` (with nothing else in them)."""
        return self.graph_bytes <= self.shared_buffers_bytes


async def cache_fit(session: AsyncSession, name: str) -> CacheFit:
    """How index ``name``'s HNSW graph and table compare with the server's ``shared_buffers``.

    Every HNSW index on the table counts (however it is named): a search walks one of them.
    """
    row = (
        await session.execute(
            text(
                "SELECT "
                "coalesce((SELECT sum(pg_relation_size(i.indexrelid)) FROM pg_index i "
                "JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam "
                "WHERE i.indrelid = to_regclass(:n) AND a.amname = 'hnsw'), 0), "
                "coalesce(pg_relation_size(to_regclass(:n)), 0), "
                "pg_size_bytes(current_setting('shared_buffers'))"
            ),
            {"n": check_identifier(name)},
        )
    ).one()
    return CacheFit(
        graph_bytes=int(row[0]), table_bytes=int(row[1]), shared_buffers_bytes=int(row[2])
    )


def graph_m_sql(table_oid: str) -> str:
    """A SQL value: the neighbours per node of the HNSW graph on the table ``table_oid`` names.

    ``table_oid``: an SQL expression of the table's oid. A graph that names no ``m`` (or none at
    all) counts as pgvector's default, :data:`PGVECTOR_DEFAULT_M`. The search reads it where it
    sizes its walk (``memory_db.vectors.index.ef_search_setting``), the start-up in
    :func:`graph_m`.
    """
    return (
        f"(SELECT COALESCE(MAX(CAST(o.option_value AS integer)), {PGVECTOR_DEFAULT_M}) "
        "FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
        "JOIN pg_am a ON a.oid = i.relam AND a.amname = 'hnsw' "
        "CROSS JOIN LATERAL pg_options_to_table(i.reloptions) o "
        f"WHERE x.indrelid = {table_oid} AND o.option_name = 'm')"
    )


async def graph_m(session: AsyncSession, name: str) -> int:
    """The neighbours per node of index ``name``'s HNSW graph (:func:`graph_m_sql`)."""
    found = await session.scalar(
        text(f"SELECT {graph_m_sql('to_regclass(:n)')}"), {"n": check_identifier(name)}
    )
    return int(found)


async def index_exists(session: AsyncSession, name: str) -> bool:
    """Whether an index of that name is registered."""
    found = await session.scalar(
        text("SELECT 1 FROM mem_vector_indexes WHERE name = :n"), {"n": name}
    )
    return found is not None


async def drop_index(session: AsyncSession, name: str) -> None:
    """Drop an index that no alias points at."""
    check_identifier(name)
    used = await session.scalar(
        text("SELECT alias FROM mem_vector_index_aliases WHERE index_name = :n"), {"n": name}
    )
    if used:
        raise Conflict(f"alias {used} still points at {name}; switch it first")
    await describe_index(session, name)
    filling = await session.scalar(
        text("SELECT alias FROM mem_vector_rebuilds WHERE target_index = :n AND state = 'filling'"),
        {"n": name},
    )
    if filling:
        raise Conflict(f"{name} is being rebuilt for alias {filling}; abandon the rebuild first")
    await session.execute(text(f"DROP TABLE IF EXISTS {name}"))
    await session.execute(text("DELETE FROM mem_vector_indexes WHERE name = :n"), {"n": name})


async def resolve_alias(session: AsyncSession, alias: str = DEFAULT_ALIAS) -> str:
    """The physical index an alias points at."""
    name = await session.scalar(
        text("SELECT index_name FROM mem_vector_index_aliases WHERE alias = :a"), {"a": alias}
    )
    if name is None:
        raise NotFound("vector index alias", alias)
    return str(name)


async def switch_alias(session: AsyncSession, alias: str, index_name: str) -> None:
    """Point ``alias`` at ``index_name`` (in the caller's transaction: readers see old or new)."""
    check_identifier(alias, "alias")
    await describe_index(session, index_name)
    if await session.scalar(text("SELECT 1 FROM mem_vector_indexes WHERE name = :a"), {"a": alias}):
        raise Conflict(f"{alias} is the name of an index; an alias needs a name of its own")
    await session.execute(
        text(
            "INSERT INTO mem_vector_index_aliases (alias, index_name) VALUES (:a, :n) "
            "ON CONFLICT (alias) DO UPDATE SET index_name = EXCLUDED.index_name, updated_at = now()"
        ),
        {"a": alias, "n": index_name},
    )


async def ensure_default_index(
    session: AsyncSession,
    name: str,
    *,
    dimensions: int,
    alias: str = DEFAULT_ALIAS,
    element: ElementType = "halfvec",
    identity: EmbedderIdentity | None = None,
    m: int = HNSW_M,
) -> str:
    """Create ``name`` if missing and point an unset ``alias`` at it; return the alias target.

    ``identity``: the configured embedder, recorded for a new index, and for the aliased one
    when it has none yet (an index made before identities were recorded was filled by it).
    ``m``: the graph of a new index (an existing one keeps its own until a reindex).
    """
    try:
        current = await resolve_alias(session, alias)
    except NotFound:
        current = None
    if current is not None and (identity is None or await index_identity(session, current)):
        return current  # the common case: no lock, no write
    # Servers and workers start concurrently: serialise the first creation (lock held to commit).
    await session.execute(text("SELECT pg_advisory_xact_lock(hashtext('memory_vectors_ddl'))"))
    try:
        current = await resolve_alias(session, alias)
    except NotFound:
        pass
    else:
        if identity is not None:
            await record_identity(session, current, identity)
        return current
    registered = await session.scalar(
        text("SELECT 1 FROM mem_vector_indexes WHERE name = :n"), {"n": name}
    )
    if not registered:
        await create_index(
            session, name, dimensions=dimensions, element=element, identity=identity, m=m
        )
    elif identity is not None:
        await record_identity(session, name, identity)
    await switch_alias(session, alias, name)
    return name
