"""A search's database work in two statements of one transaction (issue 31).

:func:`start_search` sets what the ranking is planned and run with, checks that the alias still
points at the index the query was embedded for, resolves the caller's readable vaults and
counts the entries of that scope (the ``auto`` strategy's choice, see
:meth:`VectorIndex.search`). :func:`rank_and_meter` then reads, in one statement, the nearest
vectors, the full-text list, the distances of the word matches' vectors, every candidate with
evidence reloaded under the authorisation predicates and the exact filters, and writes the
search's usage and provenance entries. With the transaction's BEGIN and COMMIT that is four
round trips, where the same work took eighteen in three transactions.

Why two statements and not one: the ranking query must be planned after its settings apply
(``plan_cache_mode``, and ``enable_sort`` off for the graph walk), and which query it is (the
bits scan or the graph) depends on the count.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import Float, Text, cast, column, func, literal, select, text
from sqlalchemy.dialects.postgresql import JSONB, aggregate_order_by
from sqlalchemy.exc import ProgrammingError
from sqlalchemy.ext.asyncio import AsyncSession

from memory_db.errors import MemoryDbError, NotFound
from memory_db.repositories.assets import AssetRepository, stored_from_json
from memory_db.repositories.audit import provenance_entry, usage_entry
from memory_db.repositories.filters import AssetFilter
from memory_db.repositories.identities import ACCESSIBLE_VAULTS_SQL, vault_from_json
from memory_db.repositories.records import StoredAsset, TextMatch, VaultRecord, VaultScope
from memory_db.vectors.index import (
    SearchTuning,
    VectorHit,
    VectorIndex,
    scope_condition,
    search_settings,
    set_config_columns,
)

# PostgreSQL's "undefined_table": the index the process remembered was dropped after a switch.
_UNDEFINED_TABLE = "42P01"
# The ranked lists' columns as the ranking statement reads them.
_HIT_COLUMNS = (
    column("id", Text),
    column("asset_id", Text),
    column("representation", Text),
    column("distance", Float),
)


class AliasMoved(MemoryDbError):
    """The alias no longer points at the index the query was embedded for: embed again."""


@dataclass(frozen=True, slots=True)
class SearchStart:
    """What :func:`start_search` found: the caller's vaults and the strategy."""

    # The caller's readable vaults (own first); None when the caller gave them.
    vaults: list[VaultRecord] | None
    strategy: Literal["ann", "scan"]


@dataclass(frozen=True, slots=True)
class Metering:
    """The usage and provenance entries a search writes with its ranking."""

    identity: str
    model: str
    total_tokens: int
    prompt_tokens: int
    image_tokens: int
    request_id: str | None
    # Provenance detail; ``results`` is added by the statement (how many were reloaded).
    detail: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Ranked:
    """The lists a search fuses and its reloaded candidates (in no particular order)."""

    hits: list[VectorHit]
    words: list[TextMatch]
    word_hits: list[VectorHit]
    rows: list[StoredAsset]


async def start_search(
    session: AsyncSession,
    index: VectorIndex,
    alias: str,
    *,
    viewer: str | None,
    scopes: Sequence[VaultScope],
    filters: AssetFilter,
    tuning: SearchTuning,
) -> SearchStart:
    """Settings, alias check, the caller's vaults and the scope count, in one round trip.

    ``viewer``: resolve every vault that identity may read here (``scopes`` is then ignored);
    ``None``: the caller resolved them (``scopes``). ``AliasMoved`` when the alias no longer
    points at ``index`` (or its table was dropped). Transaction-local settings (see
    :func:`search_settings`); ``enable_sort`` is turned off for the rest of the transaction
    when the count chooses the graph (the ranking statement's only sort-free plan for the
    graph walk is the HNSW scan; its other sorts have no alternative plan). ``NotFound`` when
    the alias is missing.
    """
    settings = search_settings(tuning, index.name)
    params: dict[str, object] = {"alias": alias, "scan_max": tuning.scan_max_rows}
    columns = set_config_columns(settings, params)
    if viewer is not None:
        params["viewer"] = viewer.strip().lower()
        where = [
            "vault = ANY(ARRAY(SELECT physical_vault FROM vaults))",
            "owner_identity = ANY(ARRAY(SELECT DISTINCT owner_identity FROM vaults))",
        ]
        where.extend(filters.vector_conditions(params))
        scope_where = " AND ".join(where)
        prefix = f"WITH vaults AS MATERIALIZED ({ACCESSIBLE_VAULTS_SQL}) "
        listed = (
            "(SELECT coalesce(json_agg(json_build_array(id, owner_identity, handle, "
            "physical_vault, permission, created_at) ORDER BY shared, by_owner, by_name), "
            "'[]') FROM vaults)"
        )
    else:
        scope_where, scoped = scope_condition(scopes, filters)
        params.update(scoped)
        prefix, listed = "", "NULL"
    sql = (
        f"{prefix}SELECT {', '.join(columns)}, "
        "(SELECT index_name FROM mem_vector_index_aliases WHERE alias = :alias), "
        f"{listed}, m.n, set_config('enable_sort', CASE WHEN m.n > :scan_max THEN 'off' "
        "ELSE current_setting('enable_sort') END, true) "
        f"FROM (SELECT {index.count_sql(scope_where, tuning)} AS n) m"
    )
    try:
        row = (await session.execute(text(sql), params)).one()
    except ProgrammingError as exc:
        if getattr(exc.orig, "sqlstate", None) == _UNDEFINED_TABLE:
            raise AliasMoved(f"the index table {index.name} is gone") from None
        raise
    target, vaults, count = row[len(settings)], row[len(settings) + 1], row[len(settings) + 2]
    if target is None:
        raise NotFound("vector index alias", alias)
    if target != index.name:
        raise AliasMoved(f"the alias {alias} moved from {index.name} to {target}")
    return SearchStart(
        vaults=None if vaults is None else [vault_from_json(v) for v in _json(vaults)],
        strategy="scan" if int(count) <= tuning.scan_max_rows else "ann",
    )


async def rank_and_meter(
    session: AsyncSession,
    index: VectorIndex,
    start: SearchStart,
    scopes: Sequence[VaultScope],
    *,
    vector: Sequence[float],
    model: str,
    filters: AssetFilter,
    vector_filters: AssetFilter,
    words: str | None,
    overfetch: int,
    text_hits: int,
    evidence_floor: float,
    min_score: float | None,
    limit: int,
    tuning: SearchTuning,
    metering: Metering,
) -> Ranked:
    """The ranked lists, the reloaded candidates and the metering, in one statement.

    ``vector_filters`` restrict the vector list (fields with a vector column; asset ids for
    narrowed candidates); ``filters``, every exact filter, restrict the word list and the
    reload. Candidates are the assets with evidence as ``memory_tools.search.best_first``
    counts it (a similarity above ``evidence_floor`` or a word match, a similarity at all, at
    least ``min_score``), reloaded when ready, in scope and matching ``filters``. The
    provenance detail's ``results`` is how many were reloaded, at most ``limit``.
    """
    components = index.components(vector)
    scope_where, scope_params = scope_condition(scopes, vector_filters)
    sql, params = index.nearest_sql(
        start.strategy,
        components,
        scope_where,
        scope_params,
        model=model,
        limit=overfetch,
        tuning=tuning,
    )
    ann = text(sql).bindparams(**params).columns(*_HIT_COLUMNS).cte("ann")
    ctes: list[Any] = [ann]
    lists = [ann]
    word_ctes = []
    if words is not None:
        every, any_ = AssetRepository.text_lists(scopes, filters, words, limit=text_hits)
        word_hits = (
            text(
                f"SELECT id, asset_id, representation, embedding <=> "
                f"{index.vector_sql(':w_q')} AS distance FROM {index.name} "
                "WHERE asset_id IN (SELECT id FROM words_every UNION ALL "
                "SELECT id FROM words_any) AND vault = ANY(:w_vaults) "
                "AND owner_identity = ANY(:w_owners) AND model = :w_model"
            )
            .bindparams(
                w_q=components,
                w_vaults=scope_params["vaults"],
                w_owners=scope_params["owners"],
                w_model=model,
            )
            .columns(*_HIT_COLUMNS)
            .cte("word_hits")
        )
        ctes += [every, any_, word_hits]
        lists.append(word_hits)
        word_ctes = [every, any_]
    # Each candidate's best similarity and whether words found it: best_first's rule.
    similar = " UNION ALL ".join(
        f"SELECT asset_id, 1 - distance AS similarity, false AS word FROM {cte.name}"
        for cte in lists
    )
    worded = "".join(f" UNION ALL SELECT id, NULL, true FROM {cte.name}" for cte in word_ctes)
    kept = (
        text(
            f"SELECT asset_id FROM ({similar}{worded}) c GROUP BY asset_id "
            "HAVING max(similarity) IS NOT NULL AND (max(similarity) > :floor OR bool_or(word)) "
            "AND (CAST(:min_score AS float8) IS NULL OR max(similarity) >= :min_score)"
        )
        .bindparams(floor=evidence_floor, min_score=min_score)
        .columns(column("asset_id", Text))
        .cte("kept")
    )
    reloaded = AssetRepository.reload_rows(scopes, filters, select(kept.c.asset_id)).cte("reloaded")
    results = func.least(limit, select(func.count()).select_from(reloaded).scalar_subquery())
    detail = cast(literal(json.dumps(metering.detail)), JSONB).op("||")(
        func.jsonb_build_object("results", results)
    )
    usage = usage_entry(
        owner_identity=metering.identity,
        source="embed_image_query",
        model=metering.model,
        total_tokens=metering.total_tokens,
        prompt_tokens=metering.prompt_tokens,
        image_tokens=metering.image_tokens,
        request_id=metering.request_id,
    ).cte("usage")
    provenance = provenance_entry(
        "asset_search", actor_identity=metering.identity, detail=detail
    ).cte("provenance")
    ctes += [kept, reloaded, usage, provenance]

    row = (
        await session.execute(
            select(
                _listed(ann, ann.c.distance, ann.c.id),
                *(_listed(cte, cte.c.rank.desc(), cte.c.id) for cte in word_ctes),
                *(_listed(cte, cte.c.asset_id, cte.c.id) for cte in lists[1:]),
                select(
                    func.coalesce(func.json_agg(reloaded.c.row), text("'[]'::json"))
                ).scalar_subquery(),
            ).add_cte(*ctes)
        )
    ).one()
    found = [_json(value) for value in row]
    words_found: list[TextMatch] = []
    if words is not None:
        words_found = [TextMatch(a, float(r), True) for a, r in found[1]]
        words_found += [TextMatch(a, float(r), False) for a, r in found[2]]
    return Ranked(
        hits=[VectorHit(h[0], h[1], h[2], float(h[3])) for h in found[0]],
        # The every-word list first, then the any-word list: not re-sorted across them.
        words=words_found[:text_hits],
        word_hits=[VectorHit(h[0], h[1], h[2], float(h[3])) for h in found[3]]
        if words is not None
        else [],
        rows=[stored_from_json(r) for r in found[-1]],
    )


def _listed(cte: Any, *order: Any) -> Any:
    """The rows of ``cte`` as one JSON array of arrays, in ``order``."""
    values = func.json_build_array(*cte.c)
    return select(
        func.coalesce(func.json_agg(aggregate_order_by(values, *order)), text("'[]'::json"))
    ).scalar_subquery()


def _json(value: Any) -> Any:
    """A json column as asyncpg returns it (text) or as already decoded."""
    return json.loads(value) if isinstance(value, str) else value
