"""Reads and writes of one versioned vector index, always inside the caller's vault scopes."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import numpy as np
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from memory_db.embedding.factory import EmbedderIdentity
from memory_db.errors import InvalidInput, NotFound
from memory_db.repositories.filters import AssetFilter
from memory_db.repositories.records import VaultScope
from memory_db.vectors.codes import vector_codes
from memory_db.vectors.ddl import PGVECTOR_DEFAULT_M, ElementType, check_identifier, graph_m_sql

REPRESENTATIONS = ("visual", "fused")


def vector_id(asset_id: str, representation: str, model: str, dimensions: int) -> str:
    """Vector id: ``sha256("asset-v1::{asset_id}::{representation}::{model}::{dimensions}")``."""
    key = f"asset-v1::{asset_id}::{representation}::{model}::{dimensions}"
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class VectorRecord:
    """One representation of one asset, with its metadata (docs/design.md#vectors)."""

    asset_id: str
    object_id: str
    project_id: str | None
    folder_id: str | None
    representation: str
    model: str
    mime_type: str
    source_kind: str
    created_at: datetime
    embedding: Sequence[float]


@dataclass(frozen=True, slots=True)
class StoredVector:
    """A stored vector read back for reuse (the same bytes need not be embedded twice)."""

    asset_id: str
    object_id: str
    representation: str
    embedding: list[float]


@dataclass(frozen=True, slots=True)
class VectorHit:
    """A nearest-neighbour hit: cosine distance (0 = same direction) and score = 1 - distance."""

    vector_id: str
    asset_id: str
    representation: str
    distance: float

    @property
    def score(self) -> float:
        """Cosine similarity."""
        return 1.0 - self.distance


@dataclass(frozen=True, slots=True)
class Breadth:
    """How wide a graph walk is for a table's size.

    ``minimum`` candidates up to ``from_rows`` rows, then one more per ``rows_per_ef`` beyond.
    """

    minimum: int
    from_rows: int
    rows_per_ef: int


# Measured by benchmarks/scale.py on clustered 1,024-d vectors (docs/scaling.md): a graph of
# 16 neighbours per node needs 250 candidates for recall@10 0.96-0.98 at 100,000 vectors and
# 1,000 for 0.957 at 300,000; one of 32 gets 0.995 with 100 at 100,000 and 0.961-0.974 with
# 200-400 at 300,000, so its walk starts narrower and grows slower (250 at 300,000).
NARROW_GRAPH_BREADTH = Breadth(minimum=250, from_rows=100_000, rows_per_ef=267)
WIDE_GRAPH_BREADTH = Breadth(minimum=100, from_rows=100_000, rows_per_ef=1334)
WIDE_GRAPH_M = 32


@dataclass(frozen=True, slots=True)
class SearchTuning:
    """Search knobs, tuned by ``benchmarks/vector_search.py`` (see docs/vector-index.md).

    ``scan_max_rows``: with ``strategy="auto"``, a filter matching at most this many rows is
    answered by the bits scan: the matching rows' 1-bit codes (``memory_db.vectors.codes``),
    read index-only from the scope B-tree, are ranked by Hamming distance and a pool of
    ``max(rescore_factor * limit, rescore_min)`` candidates is re-scored with the full vectors.
    More rows go to the HNSW iterative scan (``"ann"``) with ``ef_search`` and
    ``max_scan_tuples``.

    ``ef_search``: how many candidates the graph walk keeps (pgvector's ``hnsw.ef_search``).
    ``None`` (the default) sizes it to the table and its graph, :meth:`ef_search_for` of the
    rows PostgreSQL estimates it holds and the graph's ``m``: recall at a fixed breadth falls
    as the graph grows, and a graph with more neighbours per node reaches the same recall with
    a narrower walk (``narrow`` for graphs of fewer than ``wide_m`` neighbours, ``wide`` from
    ``wide_m``; measured by ``benchmarks/scale.py``, docs/scaling.md).
    """

    ef_search: int | None = None
    ef_search_max: int = 1000  # pgvector's own maximum
    narrow: Breadth = NARROW_GRAPH_BREADTH
    wide: Breadth = WIDE_GRAPH_BREADTH
    wide_m: int = WIDE_GRAPH_M
    max_scan_tuples: int = 20_000
    scan_max_rows: int = 8_000
    rescore_factor: int = 4
    rescore_min: int = 100

    def ef_search_for(self, rows: float, m: int = PGVECTOR_DEFAULT_M) -> int:
        """The graph walk's breadth for a table of ``rows`` vectors in a graph of ``m``.

        ``ef_search`` when set, else the graph's :class:`Breadth`, at most ``ef_search_max``:
        with 32 neighbours (the default graph) 100 up to 100,000 rows, 175 at 200,000, 250 at
        300,000; with 16 (``m`` unknown: pgvector's default) 250 up to 100,000, 625 at 200,000,
        1,000 from 300,000. The same rule as the SQL the search sends
        (:func:`ef_search_setting`).
        """
        if self.ef_search is not None:
            return self.ef_search
        breadth = self.wide if m >= self.wide_m else self.narrow
        more = math.ceil((max(rows, 0.0) - breadth.from_rows) / breadth.rows_per_ef)
        return min(self.ef_search_max, max(breadth.minimum, breadth.minimum + more))

    def pool(self, limit: int) -> int:
        """How many candidates a scan re-scores for ``limit`` results."""
        return max(self.rescore_factor * limit, self.rescore_min, limit)


@dataclass(frozen=True, slots=True)
class SettingSql:
    """A setting's value computed by PostgreSQL in the statement that sets it."""

    sql: str
    params: dict[str, object]


# "exact": every matching row's full vector (full recall; the reference for the others).
Strategy = Literal["auto", "ann", "scan", "exact"]


# What makes the "ann" query walk the graph. Without it, a filter matching more rows than the
# scan takes (10 % of 100,000) was planned as a bitmap scan of the scope B-tree that scored and
# sorted every matching row: the planner multiplies the selectivities of the vault and owner
# lists as if independent, though a vault has exactly one owner, so it expected a tenth of the
# rows, and such a plan took 200 ms where the graph takes 10 (docs/vector-index.md). The ann
# query's only other plans sort the matching rows; with sorting disabled, the HNSW index scan
# (which returns rows in distance order) is chosen whatever the estimate. Set only for this
# query, and set back to the default right after it: the scan and exact queries, and whatever
# the caller's transaction runs next, need their sorts.
_GRAPH_ONLY = {"enable_sort": "off"}

# Half precision holds magnitudes up to 65,504; anything larger would be stored as infinity.
_ELEMENT_MAX = {"halfvec": 65504.0, "vector": 3.4028234663852886e38}


def _identity(provider: object, model: object, dimensions: object) -> EmbedderIdentity | None:
    if provider is None or model is None:
        return None
    return EmbedderIdentity(str(provider), str(model), int(str(dimensions)))


async def _registry_row(session: AsyncSession, sql: str, key: str, what: str) -> Sequence[Any]:
    """The one registry row ``sql`` finds for ``:key``, else ``NotFound(what, key)``."""
    row = (await session.execute(text(sql), {"key": key})).one_or_none()
    if row is None:
        raise NotFound(what, key)
    return row


def _components(embedding: Sequence[float], dimensions: int, element: ElementType) -> np.ndarray:
    """The vector as float32 values, sent in pgvector's binary format (``memory_db.vector_wire``).

    Binary: formatting 1,024 floats as text took longer than the server's search of a small
    vault, and the server then parsed them back; a ``real[]`` was encoded element by element.
    Refused here, before any SQL: a wrong length, NaN or infinity, or a value the element type
    cannot hold.
    """
    if len(embedding) != dimensions:
        raise InvalidInput(f"vector has {len(embedding)} dimensions, the index {dimensions}")
    values = np.asarray(embedding, dtype=np.float64)
    if values.ndim != 1:
        raise InvalidInput("vector must be one row of numbers")
    if not np.isfinite(values).all():
        raise InvalidInput("vector has non-finite values")
    if values.size and float(np.abs(values).max()) > _ELEMENT_MAX[element]:
        raise InvalidInput(f"vector has values beyond the range of {element}")
    return values.astype(np.float32)


def ef_search_setting(tuning: SearchTuning, table: str) -> str | SettingSql:
    """``hnsw.ef_search``: the tuning's own, or sized to ``table`` in the statement that sets it.

    Sized from ``pg_class.reltuples``, the planner's estimate that autovacuum's analyze
    keeps within about a tenth of the table (-1 before the first analyze: the minimum), and
    from the ``m`` its HNSW graph was built with (pgvector's default, 16, when the index names
    none). Read where the settings are set, so sizing costs no round trip of its own. The same
    rule as :meth:`SearchTuning.ef_search_for`.
    """
    if tuning.ef_search is not None:
        return str(tuning.ef_search)
    return SettingSql(
        "(SELECT CAST(CAST(LEAST(CAST(:ef_max AS integer), GREATEST(b.minimum, b.minimum + "
        "CEIL((GREATEST(c.reltuples, 0) - b.from_rows) / b.per_ef))) AS integer) AS text) "
        "FROM pg_class c CROSS JOIN LATERAL (SELECT CASE WHEN g.m >= CAST(:wide_m AS integer) "
        "THEN CAST(:wide_min AS integer) ELSE CAST(:narrow_min AS integer) END AS minimum, "
        "CASE WHEN g.m >= CAST(:wide_m AS integer) THEN CAST(:wide_from AS integer) "
        "ELSE CAST(:narrow_from AS integer) END AS from_rows, "
        "CASE WHEN g.m >= CAST(:wide_m AS integer) THEN CAST(:wide_rows AS integer) "
        "ELSE CAST(:narrow_rows AS integer) END AS per_ef "
        # OFFSET 0 reads the graph's m once: pulled up, it was read for each of its four uses
        # (the expression took 250 instead of 165 microseconds, a bare SELECT 1 110).
        f"FROM (SELECT {graph_m_sql('c.oid')} AS m OFFSET 0) g) b "
        "WHERE c.oid = CAST(:ef_table AS regclass))",
        {
            "ef_max": tuning.ef_search_max,
            "wide_m": tuning.wide_m,
            "wide_min": tuning.wide.minimum,
            "wide_from": tuning.wide.from_rows,
            "wide_rows": tuning.wide.rows_per_ef,
            "narrow_min": tuning.narrow.minimum,
            "narrow_from": tuning.narrow.from_rows,
            "narrow_rows": tuning.narrow.rows_per_ef,
            "ef_table": table,
        },
    )


def set_config_columns(
    settings: Mapping[str, str | SettingSql], params: dict[str, object]
) -> list[str]:
    """``set_config(name, value, true)`` columns for ``settings``, parameters into ``params``.

    A setting's value is a string, or SQL computing it in the same statement (``SettingSql``).
    """
    columns: list[str] = []
    for i, (name, value) in enumerate(settings.items()):
        params[f"n{i}"] = name
        if isinstance(value, SettingSql):
            columns.append(f"set_config(:n{i}, {value.sql}, true)")
            params.update(value.params)
        else:
            columns.append(f"set_config(:n{i}, :v{i}, true)")
            params[f"v{i}"] = value
    return columns


def search_settings(tuning: SearchTuning, table: str) -> dict[str, str | SettingSql]:
    """What a search over ``table`` is planned and run with (transaction-local).

    Every search planned with its real LIMIT and vector (a cached generic plan cannot see them
    and was seen to settle on a full scan), and the HNSW settings (read only by an HNSW scan),
    the graph walk's breadth sized to the table (:func:`ef_search_setting`).
    """
    return {
        "plan_cache_mode": "force_custom_plan",
        "hnsw.iterative_scan": "relaxed_order",
        "hnsw.max_scan_tuples": str(tuning.max_scan_tuples),
        "hnsw.ef_search": ef_search_setting(tuning, table),
    }


def scope_condition(
    scopes: Sequence[VaultScope], filters: AssetFilter | None
) -> tuple[str, dict[str, object]]:
    """SQL over a vector table keeping the entitled vaults and the filters, and its parameters.

    Parameters ``vaults`` and ``owners``, and ``filter_<name>`` for each filtering field (only
    fields with a vector column: ``AssetFilter.for_vectors``). Physical vault names are unique
    across owners, so the two ANY lists cannot pair an owner with another owner's vault.
    """
    params: dict[str, object] = {
        "vaults": [s.physical_vault for s in scopes],
        "owners": sorted({s.owner_identity for s in scopes}),
    }
    where = ["vault = ANY(:vaults)", "owner_identity = ANY(:owners)"]
    if filters is not None:
        where.extend(filters.vector_conditions(params))
    return " AND ".join(where), params


class VectorIndex:
    """One physical index table; construct with ``await VectorIndex.open(session, name)``."""

    def __init__(
        self,
        session: AsyncSession,
        name: str,
        dimensions: int,
        element: ElementType,
        *,
        identity: EmbedderIdentity | None = None,
        mirrors: Sequence[str] = (),
    ):
        self._session = session
        self.name = check_identifier(name)
        self.dimensions = dimensions
        self.element: ElementType = element
        self._cast = f"{element}({dimensions})"
        # The embedder recorded for the table (None: made before identities were recorded).
        self.identity = identity
        # Indexes being rebuilt beside this one (``mem_vector_rebuilds``): deletes and moves
        # apply to them too, so a rebuild never keeps what was deleted or moved meanwhile.
        self.mirrors = tuple(check_identifier(m) for m in mirrors)

    def bound(self, session: AsyncSession) -> VectorIndex:
        """The same index on another session (a later transaction), without reading it again."""
        return VectorIndex(
            session,
            self.name,
            self.dimensions,
            self.element,
            identity=self.identity,
            mirrors=self.mirrors,
        )

    @classmethod
    async def open(cls, session: AsyncSession, name: str) -> VectorIndex:
        """Bind to a registered index."""
        row = await _registry_row(
            session,
            "SELECT name, dimensions, element_type, provider, model FROM mem_vector_indexes "
            "WHERE name = :key",
            name,
            "vector index",
        )
        return cls._bound(session, row)

    @classmethod
    async def open_alias(
        cls, session: AsyncSession, alias: str, *, hold: bool = True
    ) -> VectorIndex:
        """Bind to the index ``alias`` points at now, holding the alias until the commit.

        The alias row is read ``FOR SHARE``: a switch (an UPDATE of that
        row) waits for this transaction, so writes made under the old target commit before
        the switch, and every transaction after it finds the new target. A reader passes
        ``hold=False``: it reads the index in one snapshot and makes no switch wait.

        Holding takes its own statement first: a locking read joined to the index registry,
        when it waited for a switch, rechecks the join against the registry row it read
        before the switch and finds no row at all. After the wait, the second statement's
        snapshot sees the switch, its target and the rebuild rows as committed.
        """
        if hold:
            locked = await session.scalar(
                text("SELECT index_name FROM mem_vector_index_aliases WHERE alias = :a FOR SHARE"),
                {"a": alias},
            )
            if locked is None:
                raise NotFound("vector index alias", alias)
        row = await _registry_row(
            session,
            "SELECT i.name, i.dimensions, i.element_type, i.provider, i.model, "
            # Mirrors: the rebuild filling beside it, and the index it replaced
            # (kept in step until dropped, so switching back stays possible).
            "ARRAY(SELECT r.target_index FROM mem_vector_rebuilds r "
            "WHERE r.alias = a.alias AND r.state = 'filling' "
            "UNION SELECT r.source_index FROM mem_vector_rebuilds r "
            "WHERE r.target_index = a.index_name AND r.state = 'switched' ORDER BY 1) "
            "FROM mem_vector_index_aliases a "
            "JOIN mem_vector_indexes i ON i.name = a.index_name "
            "WHERE a.alias = :key",
            alias,
            "vector index alias",
        )
        return cls._bound(session, row, mirrors=[str(m) for m in row[5] or ()])

    @classmethod
    def _bound(
        cls, session: AsyncSession, row: Sequence[Any], mirrors: Sequence[str] = ()
    ) -> VectorIndex:
        """A registry row (name, dimensions, element_type, provider, model) bound to ``session``."""
        element: ElementType = "vector" if row[2] == "vector" else "halfvec"
        return cls(
            session,
            str(row[0]),
            int(row[1]),
            element,
            identity=_identity(row[3], row[4], row[1]),
            mirrors=mirrors,
        )

    def _tables(self) -> tuple[str, ...]:
        """The table and its mirrors: where a delete or a move applies."""
        return (self.name, *self.mirrors)

    async def upsert(self, scope: VaultScope, records: Sequence[VectorRecord]) -> list[str]:
        """Insert or replace vectors (idempotent by vector id); return their ids."""
        ids: list[str] = []
        rows = []
        embeddings = [_components(r.embedding, self.dimensions, self.element) for r in records]
        codes = vector_codes(embeddings, self.dimensions) if embeddings else []
        for record, embedding, code in zip(records, embeddings, codes, strict=True):
            if record.representation not in REPRESENTATIONS:
                raise InvalidInput("representation must be visual or fused")
            if self.identity is not None and record.model != self.identity.model:
                # One model per table: a search never compares vectors of two models.
                raise InvalidInput(f"{self.name} holds vectors of {self.identity.model} only")
            vid = vector_id(record.asset_id, record.representation, record.model, self.dimensions)
            ids.append(vid)
            rows.append(
                {
                    "id": vid,
                    "asset_id": record.asset_id,
                    "object_id": record.object_id,
                    "owner": scope.owner_identity,
                    "vault": scope.physical_vault,
                    "project_id": record.project_id,
                    "folder_id": record.folder_id,
                    "representation": record.representation,
                    "model": record.model,
                    "dimensions": self.dimensions,
                    "mime_type": record.mime_type,
                    "source_kind": record.source_kind,
                    "created_at": record.created_at,
                    "embedding": embedding,
                    "bits": code,
                }
            )
        if rows:
            await self._session.execute(
                text(
                    f"INSERT INTO {self.name} (id, asset_id, object_id, owner_identity, vault, "
                    "project_id, folder_id, representation, model, dimensions, mime_type, "
                    "source_kind, created_at, embedding, embedding_bits) VALUES (:id, :asset_id, "
                    ":object_id, :owner, :vault, :project_id, :folder_id, :representation, "
                    ":model, :dimensions, :mime_type, :source_kind, :created_at, "
                    f"{self._vector(':embedding')}, {self._bits(':bits')}) "
                    "ON CONFLICT (id) DO UPDATE SET embedding = EXCLUDED.embedding, "
                    "embedding_bits = EXCLUDED.embedding_bits, "
                    "project_id = EXCLUDED.project_id, folder_id = EXCLUDED.folder_id, "
                    "object_id = EXCLUDED.object_id, mime_type = EXCLUDED.mime_type, "
                    "source_kind = EXCLUDED.source_kind "
                    # An id never moves between owners or vaults: refuse rather than re-home.
                    f"WHERE {self.name}.owner_identity = EXCLUDED.owner_identity "
                    f"AND {self.name}.vault = EXCLUDED.vault"
                ),
                rows,
            )
        return ids

    async def delete_asset(self, scope: VaultScope, asset_id: str) -> int:
        """Delete every vector of an asset in this scope (and its mirrors); return how many."""
        counts = [
            await self._session.execute(
                text(
                    f"DELETE FROM {table} WHERE asset_id = :a AND owner_identity = :o "
                    "AND vault = :v"
                ),
                {"a": asset_id, "o": scope.owner_identity, "v": scope.physical_vault},
            )
            for table in self._tables()
        ]
        return int(getattr(counts[0], "rowcount", 0) or 0)

    async def delete_representation(
        self, scope: VaultScope, asset_id: str, representation: str
    ) -> int:
        """Delete one representation's vectors of an asset (and in its mirrors); how many."""
        counts = [
            await self._session.execute(
                text(
                    f"DELETE FROM {table} WHERE asset_id = :a AND owner_identity = :o "
                    "AND vault = :v AND representation = :r"
                ),
                {
                    "a": asset_id,
                    "o": scope.owner_identity,
                    "v": scope.physical_vault,
                    "r": representation,
                },
            )
            for table in self._tables()
        ]
        return int(getattr(counts[0], "rowcount", 0) or 0)

    async def count_asset(self, scope: VaultScope, asset_id: str) -> int:
        """How many vectors an asset has in this scope."""
        value = await self._session.scalar(
            text(
                f"SELECT count(*) FROM {self.name} WHERE asset_id = :a AND owner_identity = :o "
                "AND vault = :v"
            ),
            {"a": asset_id, "o": scope.owner_identity, "v": scope.physical_vault},
        )
        return int(value or 0)

    async def vectors_of_objects(
        self,
        owner_identity: str,
        object_ids: Sequence[str],
        *,
        model: str,
        representation: str,
        limit: int = 64,
    ) -> list[StoredVector]:
        """Stored vectors of ``model`` of one owner's assets of these objects (for reuse).

        ``visual``: one per object (any asset's: the same bytes make the same vector).
        ``fused``: the newest ``limit`` (they differ by their assets' text). Owner-scoped twice,
        the assets and the vectors: an object deduplicated by another owner never lends its
        vectors. Read through the assets' object index and this table's asset index.
        """
        if not object_ids:
            return []
        if representation not in REPRESENTATIONS:
            raise InvalidInput("representation must be visual or fused")
        sql, params = self._of_objects(owner_identity, object_ids, representation, limit, "")
        rows = await self._session.execute(text(sql), {**params, "m": model})
        return [StoredVector(r[0], r[1], r[2], [float(x) for x in r[3]]) for r in rows]

    async def reusable_vectors(
        self,
        owner_identity: str,
        visual_objects: Sequence[str],
        fused_objects: Sequence[str],
        *,
        model: str,
        fused_limit: int = 64,
    ) -> list[StoredVector]:
        """:meth:`vectors_of_objects` for both representations, in one statement.

        The visual vector of each of ``visual_objects`` and the newest ``fused_limit`` fused
        vectors of ``fused_objects``: what a worker batch may reuse, in one round trip.
        """
        parts: list[str] = []
        params: dict[str, object] = {"m": model}
        for representation, objects, limit in (
            ("visual", visual_objects, len(visual_objects)),
            ("fused", fused_objects, fused_limit),
        ):
            if objects:
                sql, own = self._of_objects(
                    owner_identity, objects, representation, limit, f"_{representation}"
                )
                parts.append(f"({sql})")
                params.update(own)
        if not parts:
            return []
        rows = await self._session.execute(text(" UNION ALL ".join(parts)), params)
        return [StoredVector(r[0], r[1], r[2], [float(x) for x in r[3]]) for r in rows]

    def _of_objects(
        self,
        owner_identity: str,
        object_ids: Sequence[str],
        representation: str,
        limit: int,
        suffix: str,
    ) -> tuple[str, dict[str, object]]:
        """The query of :meth:`vectors_of_objects` (``:m`` the model), parameters named apart."""
        one_each = "DISTINCT ON (v.object_id) " if representation == "visual" else ""
        order = "v.object_id, v.asset_id" if one_each else "v.created_at DESC, v.asset_id"
        o, objects, r, n = (f":{name}{suffix}" for name in ("o", "objects", "r", "limit"))
        sql = (
            f"SELECT {one_each}v.asset_id, v.object_id, v.representation, "
            f"CAST(CAST(v.embedding AS vector) AS real[]) FROM {self.name} v "
            "WHERE v.asset_id IN (SELECT a.id FROM mem_assets a "
            f"WHERE a.owner_identity = {o} AND a.object_id = ANY({objects})) "
            f"AND v.owner_identity = {o} AND v.object_id = ANY({objects}) AND v.model = :m "
            f"AND v.representation = {r} ORDER BY {order} LIMIT {n}"
        )
        params: dict[str, object] = {
            f"o{suffix}": owner_identity,
            f"objects{suffix}": sorted(set(object_ids)),
            f"r{suffix}": representation,
            f"limit{suffix}": limit,
        }
        return sql, params

    async def move_asset(
        self, scope: VaultScope, asset_id: str, project_id: str | None, folder_id: str | None
    ) -> int:
        """Update the placement of an asset's vectors, mirrors too (a move copies no vectors)."""
        counts = [
            await self._session.execute(
                text(
                    f"UPDATE {table} SET project_id = :p, folder_id = :f WHERE asset_id = :a "
                    "AND owner_identity = :o AND vault = :v"
                ),
                {
                    "p": project_id,
                    "f": folder_id,
                    "a": asset_id,
                    "o": scope.owner_identity,
                    "v": scope.physical_vault,
                },
            )
            for table in self._tables()
        ]
        return int(getattr(counts[0], "rowcount", 0) or 0)

    async def search(
        self,
        query: Sequence[float],
        scopes: Sequence[VaultScope],
        *,
        model: str,
        limit: int = 50,
        filters: AssetFilter | None = None,
        strategy: Strategy = "auto",
        tuning: SearchTuning | None = None,
    ) -> list[VectorHit]:
        """Nearest vectors among the entitled vaults only, nearest first.

        Strategies: ``"ann"`` walks the HNSW graph in a MATERIALIZED CTE with pgvector's
        iterative scan (``relaxed_order``, bounded ``max_scan_tuples``), re-sorted outside, so a
        filter that matches few rows still fills the result in the right order. ``"scan"`` reads
        the matching rows' 1-bit codes index-only from the scope B-tree, takes the
        ``tuning.pool(limit)`` nearest by Hamming distance and re-scores them with their full
        vectors. ``"exact"`` scores every matching row with its full vector (full recall).
        ``"auto"`` picks ``"scan"`` when the filter matches at most ``tuning.scan_max_rows``
        rows, else ``"ann"``. Thresholds belong to the caller, applied to the result: a
        distance bound inside an iterative scan makes it visit up to ``max_scan_tuples`` rows.
        ``filters`` apply beside the scope; only fields with a vector column may filter
        (``AssetFilter.for_vectors``), any other is ``InvalidInput``.
        """
        if not scopes:
            return []
        if not 1 <= limit <= 1000:
            raise InvalidInput("limit must be 1-1000")
        tuning = tuning or SearchTuning()
        components = _components(query, self.dimensions, self.element)
        scope_where, params = scope_condition(scopes, filters)
        chosen: Literal["ann", "scan", "exact"]
        if strategy == "auto":
            # The same round trip counts at most scan_max_rows + 1 matching rows on the narrow
            # keys B-tree (index-only); the model is added for the search itself. (Counting and
            # searching in one statement was tried: it saves no time measurably, and that
            # statement would be planned before the settings apply, so a cached generic plan
            # made for large scopes could later scan the whole table for a small one.)
            count = self.count_sql(scope_where, tuning)
            settings = search_settings(tuning, self.name)
            row = await self._set(settings, also=count, params=dict(params))
            chosen = "scan" if int(row[-1] or 0) <= tuning.scan_max_rows else "ann"
            if chosen == "ann":
                await self._set(_GRAPH_ONLY)
        else:
            chosen = strategy
            settings = search_settings(tuning, self.name)
            await self._set({**settings, **_GRAPH_ONLY} if strategy == "ann" else settings)
        sql, nearest = self.nearest_sql(
            chosen, components, scope_where, params, model=model, limit=limit, tuning=tuning
        )
        rows = (await self._session.execute(text(sql), nearest)).all()
        if chosen == "ann":
            # The caller's transaction goes on (the full-text list, the reload): its queries
            # are planned with sorting allowed again.
            await self._session.execute(text("SET LOCAL enable_sort TO DEFAULT"))
        return [VectorHit(r[0], r[1], r[2], float(r[3])) for r in rows]

    def nearest_sql(
        self,
        chosen: Literal["ann", "scan", "exact"],
        components: np.ndarray,
        scope_where: str,
        scope_params: dict[str, object],
        *,
        model: str,
        limit: int,
        tuning: SearchTuning,
    ) -> tuple[str, dict[str, object]]:
        """The nearest-first query of one strategy (see :meth:`search`) and its parameters.

        ``scope_where`` and ``scope_params`` come from :func:`scope_condition`. The query
        returns ``id, asset_id, representation, distance``, nearest first; a caller's
        statement may embed it as a CTE (``memory_db.vectors.ranking``).
        """
        params: dict[str, object] = {**scope_params, "q": components, "model": model, "k": limit}
        where = scope_where + " AND model = :model"
        distance = f"embedding <=> {self._vector(':q')}"
        if chosen == "scan":
            params["pool"] = tuning.pool(limit)
            params["bits"] = vector_codes([components], self.dimensions)[0]
            sql = (
                f"WITH pool AS MATERIALIZED (SELECT id FROM {self.name} WHERE {where} "
                f"ORDER BY embedding_bits <~> {self._bits(':bits')}, id LIMIT :pool) "
                f"SELECT v.id, v.asset_id, v.representation, v.{distance} AS distance "
                f"FROM {self.name} v JOIN pool USING (id) ORDER BY distance, v.id LIMIT :k"
            )
        elif chosen == "exact":
            # Every matching row scored once: OFFSET 0 keeps the subquery from being merged
            # into the outer query, so no index can serve the ordering and the rows come
            # through the scope B-tree. (Ordering by "distance + 0" instead computed each
            # distance twice, for the sort key and for the output.)
            sql = (
                f"SELECT id, asset_id, representation, distance FROM (SELECT id, asset_id, "
                f"representation, {distance} AS distance FROM {self.name} WHERE {where} "
                "OFFSET 0) matching ORDER BY distance, id LIMIT :k"
            )
        else:
            # The query vector once per execution: a search's ranking statement runs a generic
            # plan (memory_db.vectors.ranking), where a cast of the parameter is not folded
            # into a constant when planned, and would be made again for every row.
            distance = f"embedding <=> {self.vector_once_sql(':q')}"
            sql = (
                f"WITH ann AS MATERIALIZED (SELECT id, asset_id, representation, {distance} "
                f"AS distance FROM {self.name} WHERE {where} ORDER BY {distance} LIMIT :k) "
                "SELECT id, asset_id, representation, distance FROM ann ORDER BY distance, id"
            )
        return sql, params

    def count_sql(self, scope_where: str, tuning: SearchTuning) -> str:
        """How many entries of the scope there are, counted up to ``scan_max_rows + 1``.

        On the narrow keys B-tree, index-only: what ``auto`` chooses its strategy by.
        """
        return (
            f"(SELECT count(*) FROM (SELECT 1 FROM {self.name} WHERE {scope_where} "
            f"LIMIT {int(tuning.scan_max_rows) + 1}) m)"
        )

    def components(self, embedding: Sequence[float]) -> np.ndarray:
        """The query vector as sent: checked for this index (dimensions, finite, in range)."""
        return _components(embedding, self.dimensions, self.element)

    def vector_sql(self, parameter: str) -> str:
        """SQL taking a vector parameter (:meth:`components`) as this index's vector type."""
        return self._vector(parameter)

    def vector_once_sql(self, parameter: str) -> str:
        """:meth:`vector_sql` as a scalar subquery: converted once per execution.

        Also in a generic plan, where the cast is not folded into a constant when planned and
        every row made it again.
        """
        return f"(SELECT {self._vector(parameter)})"

    async def distances(
        self,
        query: Sequence[float],
        scopes: Sequence[VaultScope],
        asset_ids: Sequence[str],
        *,
        model: str,
    ) -> list[VectorHit]:
        """The exact distance of every vector of these assets (scored candidates of other lists)."""
        if not scopes or not asset_ids:
            return []
        rows = await self._session.execute(
            text(
                f"SELECT id, asset_id, representation, embedding <=> {self._vector(':q')} "
                f"FROM {self.name} WHERE asset_id = ANY(:ids) AND vault = ANY(:vaults) "
                "AND owner_identity = ANY(:owners) AND model = :model"
            ),
            {
                "q": _components(query, self.dimensions, self.element),
                "ids": list(asset_ids),
                "vaults": [s.physical_vault for s in scopes],
                "owners": sorted({s.owner_identity for s in scopes}),
                "model": model,
            },
        )
        # Physical vault names are unique across owners, so the two ANY lists cannot pair an
        # owner with another owner's vault.
        return [VectorHit(r[0], r[1], r[2], float(r[3])) for r in rows]

    async def graph_nearest(
        self, query: Sequence[float], scope: VaultScope, *, model: str, limit: int
    ) -> set[str]:
        """Ids of the ``limit`` nearest vectors of one vault by the graph's own distance, ties too.

        The reference a graph search is measured against (reindex's recall). The HNSW index of
        a cosine opclass keeps each vector normalised and rounded again to the element type and
        ranks by their inner product; exact search and reported distances use the stored
        vector, and the two disagree in the last digits (measured: ten vectors the graph ranks
        at one distance, reported from 0.3846592 to 0.3846657). Here every row of the vault is
        scored as the graph scores it (the same pgvector functions, ``l2_normalize`` and
        ``<#>``, so equal copies give bit-equal distances), and every vector as near as the
        ``limit``-th is returned: any of them is a right answer for the graph. All of the
        vault's vectors when it holds fewer than ``limit``.
        """
        if not 1 <= limit <= 1000:
            raise InvalidInput("limit must be 1-1000")
        rows = await self._session.execute(
            text(
                "WITH scored AS MATERIALIZED (SELECT id, l2_normalize(embedding) <#> "
                f"l2_normalize({self._vector(':q')}) AS graph FROM {self.name} "
                "WHERE vault = :vault AND owner_identity = :owner AND model = :model) "
                "SELECT id FROM scored WHERE graph <= COALESCE((SELECT graph FROM scored "
                "ORDER BY graph LIMIT 1 OFFSET :last), 'Infinity')"
            ),
            {
                "q": _components(query, self.dimensions, self.element),
                "vault": scope.physical_vault,
                "owner": scope.owner_identity,
                "model": model,
                "last": limit - 1,
            },
        )
        return {str(r[0]) for r in rows}

    def _bits(self, parameter: str) -> str:
        """SQL turning a text parameter (``"0110..."``) into this index's code type."""
        return f"CAST(CAST({parameter} AS text) AS bit({self.dimensions}))"

    def _vector(self, parameter: str) -> str:
        """SQL taking a vector parameter (:func:`_components`) as this index's vector type."""
        return f"CAST({parameter} AS {self._cast})"

    async def _set(
        self,
        settings: Mapping[str, str | SettingSql],
        *,
        also: str | None = None,
        params: dict[str, object] | None = None,
    ) -> tuple[Any, ...]:
        """``SET LOCAL`` several settings in one round trip, with an optional extra column.

        A setting's value is a string, or SQL computing it in the same statement (``SettingSql``).
        """
        values: dict[str, object] = {}
        columns = set_config_columns(settings, values)
        if also is not None:
            columns.append(also)
            values.update(params or {})
        result = await self._session.execute(text(f"SELECT {', '.join(columns)}"), values)
        return tuple(result.one())
