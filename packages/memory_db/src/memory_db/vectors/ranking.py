"""A search's database work in two statements of one transaction (issue 31).

:func:`start_search` sets what the ranking is planned and run with, checks that the alias still
points at the index the query was embedded for, resolves the caller's readable vaults and
counts the entries of that scope (the ``auto`` strategy's choice, see
:meth:`VectorIndex.search`). :func:`rank_and_meter` then reads, in one statement, the nearest
vectors, the full-text list, the distances of the word matches' vectors, the candidates a
search can answer (the most relevant that the authorisation predicates and the exact filters
admit, checked best first) reloaded, and writes the search's usage and provenance entries.
With the transaction's BEGIN and COMMIT that is four round trips, where the same work took
eighteen in three transactions.

Why two statements and not one: the ranking query must be planned after its settings apply
(``plan_cache_mode``, and ``enable_sort`` off for the graph walk), and which query it is (the
bits scan or the graph) depends on the count.
"""

from __future__ import annotations

import json
import re
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypedDict, Unpack

from sqlalchemy import (
    Float,
    Integer,
    Text,
    bindparam,
    cast,
    column,
    func,
    literal,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, aggregate_order_by
from sqlalchemy.dialects.postgresql.base import PGDialect
from sqlalchemy.engine import Engine
from sqlalchemy.exc import ProgrammingError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.elements import BindParameter, TextClause

from memory_db.errors import MemoryDbError, NotFound
from memory_db.ids import new_id
from memory_db.repositories.assets import AssetRepository, scope_values, stored_from_json
from memory_db.repositories.audit import provenance_entry, usage_entry_of
from memory_db.repositories.filters import AssetFilter
from memory_db.repositories.identities import ACCESSIBLE_VAULTS_SQL, vault_from_json
from memory_db.repositories.records import StoredAsset, TextMatch, VaultRecord, VaultScope
from memory_db.schema import Asset, AssetObject
from memory_db.statement_cache import StatementCache
from memory_db.vectors.index import (
    SearchTuning,
    VectorHit,
    VectorIndex,
    scope_condition,
    search_settings,
    set_config_columns,
)

# Renders a SQLAlchemy query with ``:name`` parameters, as the text statements here take them.
_NAMED_PARAMS = PGDialect(paramstyle="named")
_CAST = re.compile(r":(\w+)::(\w+)")
# PostgreSQL's "undefined_table": the index the process remembered was dropped after a switch.
_UNDEFINED_TABLE = "42P01"
# Ranking statements by shape (see ``_shape``), built once and run with each search's values.
# A shape is an index, a strategy, words or not and a number of scopes: few per process; the
# bound only guards against a caller with ever more vaults.
_STATEMENTS: StatementCache[tuple[object, ...], Any] = StatementCache(256)
# :func:`start_search`'s statements by their text, for a search whose values are all
# parameters (no typed filter value is bound to the text). A new text clause was parsed for
# its parameters and walked for its cache key on every search, then its key hashed afresh;
# a kept one has its key already (about 0.2 ms of a search's CPU).
_STARTS: StatementCache[str, TextClause] = StatementCache(256)
_NO_FILTERS = AssetFilter()
# How long a scope counted above the bits scan's limit is taken as large without being counted
# again (see :class:`LargeScopes`).
LARGE_SCOPE_SECONDS = 30.0
# How far below the last reloaded candidate's relevance others are reloaded too: scores are
# answered rounded to six decimals over a ceiling of at most about 2.2, and summed in another
# order than here, so the server's order can differ from this one within about 2.2e-6.
TIE_MARGIN = 1e-5
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
class NamedScope:
    """A vault, project or folder a search names, checked by :func:`start_search` itself.

    ``vault_owner`` and ``vault_name``: a handle split as ``VaultRepository.resolve`` splits
    it (the owner lower-cased, the caller's own when the handle names none; the name
    lower-cased); both None when no vault is named. The project and the folder are looked for
    in the first vault of the scope, as ``memory_tools.workflows.assets.resolve_filters`` does; a
    folder
    only in the project named (none: a folder is never found).
    """

    vault_owner: str | None = None
    vault_name: str | None = None
    project_id: str | None = None
    folder_id: str | None = None
    include_subfolders: bool = False
    # The filters without a vector column (tags, untagged, the source host): the ready assets
    # of the scope that match them are listed, up to ``candidate_cap`` + 1.
    candidates: AssetFilter | None = None
    candidate_cap: int = 0


@dataclass(frozen=True, slots=True)
class SearchStart:
    """What :func:`start_search` found: the caller's vaults, the strategy, the named scope."""

    # The caller's readable vaults (own first; only the named one when a vault is named);
    # None when the caller gave them.
    vaults: list[VaultRecord] | None
    strategy: Literal["ann", "scan"]
    # Whether the named project exists in the scope's first vault (None: none named).
    project_found: bool | None = None
    # The named folder and, when asked, the active folders below it (None: none named;
    # empty: not found).
    folder_ids: tuple[str, ...] | None = None
    # The ready assets matching ``NamedScope.candidates`` (None: no such filter); more than
    # the cap means the count and the ranking were not restricted to them.
    candidate_ids: tuple[str, ...] | None = None
    # The ranking statement runs with a generic plan, planned once per connection (see
    # :func:`start_search`'s ``plan_once``).
    plan_once: bool = False


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
    """The lists a search fuses and its reloaded candidates, by asset id."""

    hits: list[VectorHit]
    words: list[TextMatch]
    word_hits: list[VectorHit]  # in no particular order: they only raise a similarity
    # Each reloaded candidate's row as the statement returned it (``reload_rows``' JSON): about
    # ``limit`` of them, the ones a search can answer; made records only when answered
    # (:meth:`stored`).
    reloaded: dict[str, dict[str, Any]]

    def stored(self, asset_id: str) -> StoredAsset | None:
        """The reloaded candidate ``asset_id`` as a record; None when it was not reloaded."""
        row = self.reloaded.get(asset_id)
        return None if row is None else stored_from_json(row)


@dataclass(frozen=True, slots=True)
class _Large:
    vaults: tuple[str, ...] | None  # the physical vaults counted (None: the caller gave them)
    until: float


class LargeScopes:
    """Scopes lately counted above the bits scan's limit, by start statement and its values.

    Counting a scope reads up to ``scan_max_rows + 1`` index entries: about 0.8 ms of
    PostgreSQL's CPU on every search of a library larger than the limit, to learn again what
    the last search learnt (docs/performance.md). So a scope counted large is taken as large,
    without its count, for :data:`LARGE_SCOPE_SECONDS`, and then counted again. Only the
    strategy depends on it; what the search may read does not. The caller's vaults are still
    resolved by the statement, and when they are not the ones counted (a grant given or
    revoked, a vault made), the statement counts. What can be stale is a scope that lost most
    of its entries by deletion since it was counted: for up to that long it is walked on the
    graph with its filter (the iterative scan fills the result) instead of scanned exactly.

    One per engine (a process's database), used from one event loop; bounded like the
    statement caches.
    """

    def __init__(self, bound: int = 1024) -> None:
        self._large: StatementCache[str, _Large] = StatementCache(bound)

    def known(self, key: str) -> _Large | None:
        """The scope's large count, while it is fresh."""
        large = self._large.get(key)
        return large if large is not None and large.until > time.monotonic() else None

    def counted(self, key: str, count: int, limit: int, vaults: tuple[str, ...] | None) -> None:
        """Remember a count: a large one for a while, a small one not at all."""
        if count > limit:
            self._large.keep(key, _Large(vaults, time.monotonic() + LARGE_SCOPE_SECONDS))
        elif self._large.get(key) is not None:
            self._large.keep(key, _Large(vaults, 0.0))

    def forget(self) -> None:
        """Forget every scope: each is counted at its next search."""
        self._large = StatementCache(self._large.bound)


_SCOPES_BY_ENGINE: weakref.WeakKeyDictionary[Engine, LargeScopes] = weakref.WeakKeyDictionary()


def large_scopes(session: AsyncSession) -> LargeScopes:
    """The scopes counted large through ``session``'s engine (one memory per database)."""
    engine = session.get_bind()
    if not isinstance(engine, Engine):  # a session bound to a connection: its engine
        engine = engine.engine
    scopes = _SCOPES_BY_ENGINE.get(engine)
    if scopes is None:
        scopes = _SCOPES_BY_ENGINE[engine] = LargeScopes()
    return scopes


async def start_search(
    session: AsyncSession,
    index: VectorIndex,
    alias: str,
    *,
    viewer: str | None,
    scopes: Sequence[VaultScope],
    filters: AssetFilter,
    tuning: SearchTuning,
    named: NamedScope | None = None,
    plan_once: bool = False,
) -> SearchStart:
    """Settings, alias check, the caller's vaults and the scope count, in one round trip.

    ``viewer``: resolve every vault that identity may read here (``scopes`` is then ignored),
    or only the one ``named`` names, and look up the project and folder it names (the caller
    refuses what is not found: an empty ``vaults``, ``project_found`` False, empty
    ``folder_ids``; the count is then of nothing); ``None``: the caller resolved them
    (``scopes``; ``named`` is ignored). ``AliasMoved`` when the alias no longer
    points at ``index`` (or its table was dropped). Transaction-local settings (see
    :func:`search_settings`); ``enable_sort`` is turned off for the rest of the transaction
    when the count chooses the graph (the ranking statement's only sort-free plan for the
    graph walk is the HNSW scan; its other sorts have no alternative plan). ``NotFound`` when
    the alias is missing.

    ``plan_once``: the ranking statement that follows is the one kept for its shape (no exact
    filter: :func:`planned_once`). When the count chooses the graph it is then run with a
    generic plan (``plan_cache_mode``), planned once per connection instead of on every
    search: about 1.6 ms of PostgreSQL's CPU per search at 100,000 assets. The plan cannot
    differ where it matters: with sorting off, the graph walk is the only plan of the nearest
    list that needs no sort, whatever the estimates; the word list is the full-text index's
    whatever the words; the rest reads by key. A search with exact filters, or with the bits
    scan, keeps a plan made for its values (a generic plan cannot see a tag's selectivity).
    """
    settings = dict(search_settings(tuning, index.name))
    custom = settings.pop("plan_cache_mode")
    params: dict[str, object] = {
        "alias": alias,
        "scan_max": tuning.scan_max_rows,
        "plan_custom": custom,
        "plan_generic": "force_generic_plan" if plan_once else custom,
    }
    columns = set_config_columns(settings, params)
    named_columns = "NULL, NULL, NULL"
    if viewer is not None:
        params["viewer"] = viewer.strip().lower()
        where = [
            "vault = ANY(ARRAY(SELECT physical_vault FROM vaults))",
            "owner_identity = ANY(ARRAY(SELECT DISTINCT owner_identity FROM vaults))",
        ]
        where.extend(filters.vector_conditions(params))
        prefix = f"WITH vaults AS MATERIALIZED ({ACCESSIBLE_VAULTS_SQL}) "
        if named is not None:
            prefix, named_columns = _named_scope(named, params, where)
        scope_where = " AND ".join(where)
        listed = (
            "(SELECT coalesce(json_agg(json_build_array(id, owner_identity, handle, "
            "physical_vault, permission, created_at) ORDER BY shared, by_owner, by_name), "
            "'[]') FROM vaults)"
        )
    else:
        scope_where, scoped = scope_condition(scopes, filters)
        params.update(scoped)
        prefix, listed = "", "NULL"
    # A scope counted large lately is not counted again (LargeScopes): the count is the ELSE
    # of a CASE, which PostgreSQL computes only when it is reached. With the caller's vaults
    # resolved here, it is reached unless they are the vaults that were counted (in code point
    # order, as Python sorts them).
    known = (
        'ARRAY(SELECT physical_vault FROM vaults ORDER BY physical_vault COLLATE "C") = '
        "CAST(:large_vaults AS text[])"
        if viewer is not None
        else "CAST(:known_large AS boolean)"
    )
    count = (
        f"CASE WHEN {known} THEN CAST(:scan_max AS integer) + 1 "
        f"ELSE {index.count_sql(scope_where, tuning)} END"
    )
    sql = (
        f"{prefix}SELECT {', '.join(columns)}, "
        "(SELECT index_name FROM mem_vector_index_aliases WHERE alias = :alias), "
        f"{listed}, m.n, set_config('enable_sort', CASE WHEN m.n > :scan_max THEN 'off' "
        f"ELSE current_setting('enable_sort') END, true), {named_columns}, "
        "set_config('plan_cache_mode', CASE WHEN m.n > :scan_max THEN :plan_generic "
        "ELSE :plan_custom END, true) "
        # OFFSET 0 keeps ``m`` a subquery of its own: pulled up, its count was computed once
        # for each of the two places that read ``m.n`` (about 1.2 ms each at 100,000 assets).
        f"FROM (SELECT {count} AS n OFFSET 0) m"
    )
    # Typed parameters (a rendered filter's) are bound to the text; the rest go as values.
    typed = [value for value in params.values() if isinstance(value, BindParameter)]
    values = {k: v for k, v in params.items() if not isinstance(v, BindParameter)}
    # A scope is remembered by its statement and every value that shapes it: only when every
    # value is a parameter (a typed filter value is bound to the text, out of sight here).
    memory = None if typed else large_scopes(session)
    scope_key = sql + repr(sorted(values.items())) if memory is not None else ""
    large = memory.known(scope_key) if memory is not None else None
    if viewer is not None:
        values["large_vaults"] = None if large is None else list(large.vaults or ())
    else:
        values["known_large"] = large is not None
    if typed:
        statement = text(sql).bindparams(*typed)
    elif (kept := _STARTS.get(sql)) is not None:  # every value a parameter: kept by its text
        statement = kept
    else:
        statement = _STARTS.keep(sql, text(sql))
    try:
        row = (await session.execute(statement, values)).one()
    except ProgrammingError as exc:
        if getattr(exc.orig, "sqlstate", None) == _UNDEFINED_TABLE:
            raise AliasMoved(f"the index table {index.name} is gone") from None
        raise
    target, vaults, count = row[len(settings)], row[len(settings) + 1], row[len(settings) + 2]
    project_found, folders = row[len(settings) + 4], row[len(settings) + 5]
    candidates = row[len(settings) + 6]
    if target is None:
        raise NotFound("vector index alias", alias)
    if target != index.name:
        raise AliasMoved(f"the alias {alias} moved from {index.name} to {target}")
    strategy: Literal["ann", "scan"] = "scan" if int(count) <= tuning.scan_max_rows else "ann"
    resolved = None if vaults is None else [vault_from_json(v) for v in _json(vaults)]
    if memory is not None:
        counted = None if resolved is None else tuple(sorted(v.physical_vault for v in resolved))
        if large is None or (viewer is not None and counted != large.vaults):
            memory.counted(scope_key, int(count), tuning.scan_max_rows, counted)
    return SearchStart(
        vaults=resolved,
        strategy=strategy,
        project_found=None if project_found is None else bool(project_found),
        folder_ids=None if folders is None else tuple(str(f) for f in _json(folders)),
        candidate_ids=None if candidates is None else tuple(str(c) for c in _json(candidates)),
        plan_once=plan_once and strategy == "ann",
    )


def planned_once(
    filters: AssetFilter, vector_filters: AssetFilter, named: NamedScope | None
) -> bool:
    """Whether a search's ranking statement will be the one kept for its shape.

    No exact filter, and nothing the start statement resolves into one (a named folder, or
    the candidates of filters without a vector column). What :func:`start_search`'s
    ``plan_once`` asks; :func:`ranking_statement` refuses a statement built afresh after it.
    """
    if named is not None and (named.folder_id is not None or named.candidates is not None):
        return False
    return _unfiltered(filters, vector_filters)


def _unfiltered(filters: AssetFilter, vector_filters: AssetFilter) -> bool:
    return filters == _NO_FILTERS and vector_filters == _NO_FILTERS


def _named_scope(named: NamedScope, params: dict[str, object], where: list[str]) -> tuple[str, str]:
    """The CTEs that resolve what a search names, and the two columns that report it.

    ``vaults`` becomes the one vault named (own before shared, as ``VaultRepository.resolve``
    answers) or every readable one; ``first`` its first, where the project and folder are
    looked for; ``folders`` the folder and, when asked, the active folders below it. The
    count's ``where`` gains the folder condition (its ids are only known here).
    """
    ctes = [f"accessible AS MATERIALIZED ({ACCESSIBLE_VAULTS_SQL})"]
    if named.vault_name is not None:
        params["v_owner"], params["v_name"] = named.vault_owner, named.vault_name
        ctes.append(
            "vaults AS MATERIALIZED (SELECT * FROM accessible WHERE owner_identity = :v_owner "
            "AND by_name = :v_name ORDER BY shared LIMIT 1)"
        )
    else:
        ctes.append("vaults AS MATERIALIZED (SELECT * FROM accessible)")
    ctes.append(
        "first AS MATERIALIZED (SELECT owner_identity, physical_vault FROM vaults "
        "ORDER BY shared, by_owner, by_name LIMIT 1)"
    )
    project, folders = "NULL", "NULL"
    if named.folder_id is not None:
        params["n_folder"], params["n_project"] = named.folder_id, named.project_id
        params["n_subfolders"] = named.include_subfolders
        in_first = (
            "JOIN first ON f.owner_identity = first.owner_identity "
            "AND f.vault = first.physical_vault WHERE f.deleted_at IS NULL"
        )
        # The folder, then (when asked) the active folders below it, level by level.
        ctes.append(
            "folders AS MATERIALIZED (WITH RECURSIVE tree(id, project_id) AS ("
            f"SELECT f.id, f.project_id FROM mem_asset_folders f {in_first} "
            "AND f.id = :n_folder AND f.project_id IS NOT DISTINCT FROM CAST(:n_project AS text) "
            "UNION ALL SELECT f.id, f.project_id FROM mem_asset_folders f "
            "JOIN tree ON f.parent_id = tree.id AND f.project_id = tree.project_id "
            f"{in_first} AND CAST(:n_subfolders AS boolean)"
            ") SELECT id FROM tree)"
        )
        folders = "(SELECT coalesce(json_agg(id), '[]') FROM folders)"
        where.append("folder_id = ANY(ARRAY(SELECT id FROM folders))")
    elif named.project_id is not None:
        params["n_project"] = named.project_id
        project = (
            "EXISTS (SELECT 1 FROM mem_asset_projects p JOIN first "
            "ON p.owner_identity = first.owner_identity AND p.vault = first.physical_vault "
            "WHERE p.id = :n_project AND p.status <> 'deleted')"
        )
    listed = "NULL"
    if named.candidates is not None:
        ctes.append(f"candidates AS MATERIALIZED ({_candidates_sql(named, params)})")
        listed = "(SELECT coalesce(json_agg(id), '[]') FROM candidates)"
        # Restricted to the candidates when they are few; else the ranking overfetches.
        params["n_cap"] = named.candidate_cap
        where.append(
            "((SELECT count(*) FROM candidates) > :n_cap "
            "OR asset_id = ANY(ARRAY(SELECT id FROM candidates)))"
        )
    return "WITH " + ", ".join(ctes) + " ", f"{project}, {folders}, {listed}"


def _candidates_sql(named: NamedScope, params: dict[str, object]) -> str:
    """The ready assets of ``vaults`` (and the folders named) matching the candidate filters.

    Built from the one definition of the filters (``AssetFilter.conditions``, as
    ``AssetRepository.matching_ids`` applies them) and rendered into the statement with named
    parameters, which join ``params``.
    """
    filters = named.candidates if named.candidates is not None else AssetFilter()
    query = select(Asset.id).where(
        text(
            "(mem_assets.owner_identity, mem_assets.vault) IN "
            "(SELECT owner_identity, physical_vault FROM vaults)"
        ),
        Asset.status == literal("ready", literal_execute=True),
        *filters.conditions(),
    )
    if filters.reads_objects():
        query = query.join(
            AssetObject,
            (AssetObject.id == Asset.object_id)
            & (AssetObject.owner_identity == Asset.owner_identity),
        )
    if named.folder_id is not None:
        query = query.where(text("mem_assets.folder_id IN (SELECT id FROM folders)"))
    compiled = query.limit(named.candidate_cap + 1).compile(
        dialect=_NAMED_PARAMS, compile_kwargs={"render_postcompile": True}
    )
    for name, value in compiled.params.items():
        if name in params:
            raise MemoryDbError(f"the candidate filter's parameter {name} is taken")
        # Typed as the filter declared it (tags are JSONB: serialised by its bind processor);
        # the items of an expanded IN list (plain strings) have no bind of their own.
        bind = compiled.binds.get(name)
        params[name] = value if bind is None else bindparam(name, value, type_=bind.type)
    # text() reads ``:name::TYPE`` as no parameter at all: spell the cast out.
    return _CAST.sub(r"CAST(:\1 AS \2)", str(compiled))


@dataclass(frozen=True, slots=True)
class FusionWeights:
    """The constants of the server's fusion rule (``memory_tools.workflows.search.fuse``).

    The ranking statement orders the candidates by the same rule to reload only those a
    search can answer.
    """

    rrf_k: int  # a place p (0 first) in a ranked list counts 1 / (rrf_k + p + 1)
    precise_word_matches: int  # at most this many assets holding every word get the bonus
    precise_match_bonus: float


class RankingParameters(TypedDict):
    """What one search ranks, filters and meters (:func:`rank_and_meter`)."""

    vector: Sequence[float]
    model: str
    filters: AssetFilter
    vector_filters: AssetFilter
    words: str | None
    overfetch: int
    text_hits: int
    evidence_floor: float
    min_score: float | None
    limit: int
    fusion: FusionWeights
    tuning: SearchTuning
    metering: Metering


async def rank_and_meter(
    session: AsyncSession,
    index: VectorIndex,
    start: SearchStart,
    scopes: Sequence[VaultScope],
    **ranking: Unpack[RankingParameters],
) -> Ranked:
    """The ranked lists, the reloaded candidates and the metering, in one statement.

    ``vector_filters`` restrict the vector list (fields with a vector column; asset ids for
    narrowed candidates); ``filters``, every exact filter, restrict the word list and the
    reload. Candidates are the assets with evidence as ``memory_tools.workflows.search.best_first``
    counts it (a similarity above ``evidence_floor`` or a word match, a similarity at all, at
    least ``min_score``). The ``limit`` most relevant that are ready, in scope and matching
    ``filters`` are reloaded, with any within :data:`TIE_MARGIN` of the last (the rest could
    not be answered). The provenance detail's ``results`` is how many were reloaded, at most
    ``limit``.

    The statement and its values: :func:`ranking_statement`.
    """
    statement, values = ranking_statement(index, start, scopes, **ranking)
    row = (await session.execute(statement, values)).one()
    found = [_json(value) for value in row]
    words, text_hits = ranking["words"], ranking["text_hits"]
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
        reloaded={r["asset"]["id"]: r for r in found[-1]},
    )


def ranking_statement(
    index: VectorIndex,
    start: SearchStart,
    scopes: Sequence[VaultScope],
    *,
    reuse: bool = True,
    **ranking: Unpack[RankingParameters],
) -> tuple[Any, dict[str, object]]:
    """The statement of :func:`rank_and_meter` and the values of its named parameters.

    Every value of the statement is a named parameter, so a search without exact filters runs
    the statement built for its shape (see :func:`_shape`) with its own values (``reuse``
    False: built afresh). Building it took the server about 5 ms of CPU per search, a
    quarter of the whole call: SQLAlchemy's construction and cache key of a large statement.
    """
    vector, model, words = ranking["vector"], ranking["model"], ranking["words"]
    filters, vector_filters = ranking["filters"], ranking["vector_filters"]
    text_hits, metering = ranking["text_hits"], ranking["metering"]
    components = index.components(vector)
    scope_where, scope_params = scope_condition(scopes, vector_filters)
    sql, params = index.nearest_sql(
        start.strategy,
        components,
        scope_where,
        scope_params,
        model=model,
        limit=ranking["overfetch"],
        tuning=ranking["tuning"],
    )
    values: dict[str, object] = {
        **params,
        **scope_values(scopes),
        "floor": ranking["evidence_floor"],
        "min_score": ranking["min_score"],
        "results_limit": ranking["limit"],
        "rrf_k": ranking["fusion"].rrf_k,
        "precise_matches": ranking["fusion"].precise_word_matches,
        "precise_bonus": ranking["fusion"].precise_match_bonus,
        "usage_id": new_id("aul"),
        "provenance_id": new_id("apv"),
        "metered_identity": metering.identity,
        "metered_model": metering.model,
        "total_tokens": metering.total_tokens,
        "prompt_tokens": metering.prompt_tokens,
        "image_tokens": metering.image_tokens,
        "request_id": metering.request_id,
        "detail": json.dumps(metering.detail),
    }
    if words is not None:
        values.update(words=words, text_limit=text_hits)
    shape = _shape(
        index, start, scopes, words=words, filters=filters, vector_filters=vector_filters
    )
    if shape is None and start.plan_once:
        # Planned once, a statement with filters would keep the plan of the first search's
        # values for every later one: planned_once and _shape disagree.
        raise MemoryDbError("a ranking statement with filters cannot run with a generic plan")
    statement = _STATEMENTS.get(shape) if shape is not None and reuse else None
    if statement is None:
        statement = _ranking_statement(
            index, sql, tuple(params), values, scopes, filters, words=words, text_hits=text_hits
        )
        if shape is not None:
            _STATEMENTS.keep(shape, kept_for_others(statement, values))
    return statement, values


def kept_for_others(statement: Any, values: Mapping[str, object]) -> Any:
    """``statement`` with no value of the search that built it, to run every later search.

    Every named parameter must be one of ``values`` (what each search passes): one that is not
    would keep the building search's value (its vaults, say) and hand it to every later caller
    of the shape, so it is refused here (``MemoryDbError``). The values are then cleared: a
    value a later search did not pass is NULL, never another caller's. Anonymous parameters
    (constants of the statement's text, such as ``limit - 1``) keep theirs.
    """
    compiled = statement.compile(dialect=_NAMED_PARAMS)
    stray = sorted(
        name for name, bind in compiled.binds.items() if not bind.unique and name not in values
    )
    if stray:
        raise MemoryDbError(f"the ranking statement's parameters {stray} are not a search's")
    return statement.params({name: None for name in values})


def _shape(
    index: VectorIndex,
    start: SearchStart,
    scopes: Sequence[VaultScope],
    *,
    words: str | None,
    filters: AssetFilter,
    vector_filters: AssetFilter,
) -> tuple[object, ...] | None:
    """What the ranking statement's text depends on, when nothing else does; else None.

    The index (its table and vector type), the strategy, whether words are ranked and how
    many scopes there are. Exact filters render conditions with values of their own, so a
    search with any is built afresh.
    """
    if not _unfiltered(filters, vector_filters):
        return None
    return (index.name, index.vector_sql(":q"), start.strategy, words is not None, len(scopes))


def _ranking_statement(
    index: VectorIndex,
    nearest: str,
    nearest_names: Sequence[str],
    values: dict[str, object],
    scopes: Sequence[VaultScope],
    filters: AssetFilter,
    *,
    words: str | None,
    text_hits: int,
) -> Any:
    """The ranking statement, every value of it the named parameter of ``values``."""

    def named(name: str, type_: Any = None) -> Any:
        return bindparam(name, values[name], type_=type_)

    def bound(sql: str, *names: str) -> Any:
        return text(sql).bindparams(*(named(name) for name in names))

    ann = bound(nearest, *nearest_names).columns(*_HIT_COLUMNS).cte("ann")
    ctes: list[Any] = [ann]
    lists = [ann]
    word_ctes = []
    if words is not None:
        every, any_ = AssetRepository.text_lists(scopes, filters, words, limit=text_hits)
        # The query vector, vaults, owners and model are the ANN's own parameters.
        word_hits = (
            bound(
                f"SELECT id, asset_id, representation, embedding <=> "
                f"{index.vector_once_sql(':q')} AS distance FROM {index.name} "
                "WHERE asset_id IN (SELECT id FROM words_every UNION ALL "
                "SELECT id FROM words_any) AND vault = ANY(:vaults) "
                "AND owner_identity = ANY(:owners) AND model = :model",
                "q",
                "vaults",
                "owners",
                "model",
            )
            .columns(*_HIT_COLUMNS)
            .cte("word_hits")
        )
        ctes += [every, any_, word_hits]
        lists.append(word_hits)
        word_ctes = [every, any_]
    # Each candidate's evidence as memory_tools.workflows.search.fuse and best_first count
    # it: its place in each vector list (visual and fused rank apart, only above the floor),
    # its place in the word list (every-word matches first) and the precise-match bonus, its
    # best similarity. ``relevance`` orders the candidates; the server fuses again from the
    # lists, exactly, and that order is the answer's. Here it only chooses which rows to
    # reload (see ``chosen``).
    ranked = [
        "SELECT asset_id, 1 - distance AS similarity, CASE WHEN 1 - distance > :floor "
        "THEN 1.0::float8 / (:rrf_k + row_number() OVER (PARTITION BY representation "
        "ORDER BY distance, id)) END AS term, false AS word FROM ann"
    ]
    if word_ctes:
        ranked += [
            "SELECT asset_id, 1 - distance, NULL, false FROM word_hits",
            "SELECT id, NULL, 1.0::float8 / (:rrf_k + row_number() OVER (ORDER BY list, "
            "rank DESC, id)) + CASE WHEN every AND (SELECT count(*) FROM words_every) "
            "<= :precise_matches THEN :precise_bonus ELSE 0 END, true FROM ("
            "SELECT id, rank, 0 AS list, true AS every FROM words_every UNION ALL "
            "SELECT id, rank, 1, false FROM words_any) w",
        ]
    weights = [named("rrf_k", Integer)]
    if word_ctes:
        weights += [named("precise_matches", Integer), named("precise_bonus", Float)]
    kept = (
        text(
            "SELECT asset_id, coalesce(sum(term), 0) + greatest(max(similarity), 0) AS relevance "
            f"FROM ({' UNION ALL '.join(ranked)}) c GROUP BY asset_id "
            "HAVING max(similarity) IS NOT NULL AND (max(similarity) > :floor OR bool_or(word)) "
            "AND (CAST(:min_score AS float8) IS NULL OR max(similarity) >= :min_score)"
        )
        .bindparams(
            named("floor", Float),
            named("min_score", Float),
            *weights,
        )
        .columns(column("asset_id", Text), column("relevance", Float))
        .cte("kept")
    )
    # Reloaded: the ``results_limit`` most relevant candidates the scope and the exact filters
    # admit, and any within ``TIE_MARGIN`` of the last of them. The walk stops at the line:
    # candidates are checked best first, one at a time (OFFSET 0 keeps the check above the
    # sort), so a search checks about as many as it answers. The server's order rounds scores
    # to six decimals and breaks ties by id, so a candidate this float order puts just below
    # the line may be answered; none further below can be. Before, every candidate with
    # evidence was reloaded (about a hundred for a text query) to answer ten.
    best = (
        select(kept.c.asset_id, kept.c.relevance)
        .order_by(kept.c.relevance.desc())
        .offset(literal(0, literal_execute=True))
        .subquery("best")
    )
    line = (
        select(best.c.relevance)
        .where(AssetRepository.admits(scopes, filters, best.c.asset_id))
        # Ordered again: a join need not keep its input's order (a hash join did not); the
        # planner sees the input sorted and adds no sort of its own.
        .order_by(best.c.relevance.desc())
        .offset(named("results_limit", Integer) - 1)
        .limit(1)
        .scalar_subquery()
    )
    # Fewer admitted than the limit: no line, every candidate (a subquery read once).
    chosen = select(kept.c.asset_id).where(
        kept.c.relevance >= func.coalesce(line - TIE_MARGIN, literal(float("-inf"), Float))
    )
    reloaded = AssetRepository.reload_rows(scopes, filters, chosen).cte("reloaded")
    results = func.least(
        named("results_limit", Integer),
        select(func.count()).select_from(reloaded).scalar_subquery(),
    )
    detail = cast(named("detail", Text), JSONB).op("||")(
        func.jsonb_build_object("results", results)
    )
    usage = usage_entry_of(
        "embed_image_query",
        id=named("usage_id", Text),
        owner_identity=named("metered_identity", Text),
        model=named("metered_model", Text),
        total_tokens=named("total_tokens", Integer),
        prompt_tokens=named("prompt_tokens", Integer),
        image_tokens=named("image_tokens", Integer),
        request_id=named("request_id", Text),
    ).cte("usage")
    provenance = provenance_entry(
        "asset_search",
        actor_identity=named("metered_identity", Text),
        detail=detail,
        event_id=named("provenance_id", Text),
    ).cte("provenance")
    ctes += [kept, reloaded, usage, provenance]
    return select(
        _listed(ann, ann.c.distance, ann.c.id),
        *(_listed(cte, cte.c.rank.desc(), cte.c.id) for cte in word_ctes),
        # In no order: they only raise an asset's best similarity (a maximum). Ordered, this
        # list's sort took PostgreSQL about 2.5 of a text search's 17 ms at 100,000 assets.
        *(_listed(cte) for cte in lists[1:]),
        select(func.coalesce(func.json_agg(reloaded.c.row), text("'[]'::json"))).scalar_subquery(),
    ).add_cte(*ctes)


def _listed(cte: Any, *order: Any) -> Any:
    """The rows of ``cte`` as one JSON array of arrays, in ``order`` (none: as they come)."""
    values = func.json_build_array(*cte.c)
    listed = aggregate_order_by(values, *order) if order else values
    return select(func.coalesce(func.json_agg(listed), text("'[]'::json"))).scalar_subquery()


def _json(value: Any) -> Any:
    """A json column as asyncpg returns it (text) or as already decoded."""
    return json.loads(value) if isinstance(value, str) else value
