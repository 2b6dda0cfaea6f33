"""``image_asset_search`` (docs/design.md#searching): text, image and fused queries.

The flow, over the caller's vaults:

1. authenticate (the tool layer) and check the filters; a search by a stored image resolves
   its scope and the image first;
2. a temporary query image (base64 or URL) is fetched and validated exactly like a save, and
   never stored; a stored query image is the asset's sanitised preview;
3. embed the query once with ``retrieval.query`` (outside any transaction), unless it names a
   vault, project or folder or filters without a vector column: then in step 4, once its
   first statement found them (a refused search embeds nothing);
4. one transaction of two statements (``memory_db.vectors.ranking``): the caller's readable
   vaults (unless resolved in step 1) or the one named, the project and folder named, the
   candidates of a filter without a vector column, the alias checked and the scope counted; then the
   filtered ANN query over the aliased index, only in entitled vaults,
   overfetching 50 representation hits; for text, a full-text list over title, tags, alt text,
   description, text read in the image and generated context (a generated column,
   rebuildable); fusion by asset with reciprocal-rank fusion plus the best cosine similarity,
   scaled to a 0..1 ``score`` that orders the results (:func:`fuse`); candidates reloaded
   under the authorisation predicates with every exact filter and only ``ready`` assets;
   usage metered, provenance written;
5. at most 30 compact results, each with an optional fresh preview link and thumbnail. Only
   results with evidence are returned (a word match, or a similarity above the embedder's
   evidence floor), never padding up to ``limit``; when none reaches the embedder's good-match
   line the view says ``no_good_match`` with the best similarity seen
   (``memory_db.embedding.thresholds``).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Literal

import anyio
from pydantic import Field

from memory_db import MemoryDbError, get_logger
from memory_db.embedding import FusedInput, ImageInput, TextInput, match_thresholds
from memory_db.embedding.types import Embedder, EmbedResult, EmbedValue
from memory_db.errors import ConfigurationError, EmbeddingError
from memory_db.repositories import AssetFilter, StoredAsset, TextMatch
from memory_db.runtime import prepare_vector_index
from memory_db.vectors import (
    AliasMoved,
    FusionWeights,
    Metering,
    NamedScope,
    Ranked,
    SearchStart,
    SearchTuning,
    VectorHit,
    VectorIndex,
    planned_once,
)
from memory_tools import metrics, policy
from memory_tools.access import Caller, ResolvedVault, readable, require_scope
from memory_tools.errors import (
    EmbeddingFailed,
    EmbeddingUnavailable,
    FeatureDisabled,
    InvalidInputFailure,
    NotFoundFailure,
)
from memory_tools.ingest import inputs
from memory_tools.ingest.images import inspect_image
from memory_tools.query_cache import QueryKey
from memory_tools.services import MemoryServices
from memory_tools.text import refuse_nul
from memory_tools.wire import Thumbnail, WireModel, fitting
from memory_tools.workflows.assets import (
    FilterFields,
    PreviewLink,
    check_filters,
    normalised_filters,
    read_preview,
    resolve_filters,
    signed_preview,
    vault_handles,
)
from memory_tools.workflows.meaning import search_reason

log = get_logger(__name__)

MAX_SEARCH_LIMIT = 30
MAX_QUERY_CHARS = 2000
# Representation hits fetched from the index before fusion.
OVERFETCH = 50
# How often a search embeds its query again when the index switched while it was embedding.
SWITCH_RETRIES = 2
# Metadata (full-text) hits that join the fusion of a text query.
TEXT_HITS = 50
# Reciprocal-rank fusion constant: a first place adds 1/21 ≈ 0.048 to an asset's relevance,
# a tenth place 1/30 ≈ 0.033; the best cosine similarity carries the rest.
RRF_K = 20
# When this few assets hold every word of a text query (an exact title, a name, a code), they
# are what the caller means and come first, whatever their similarity: a text diluted by a long
# description embeds farther from the query than the many shorter texts that share only its
# common words. Words more assets share are no such evidence, and similarity decides.
PRECISE_WORD_MATCHES = 3
# What a precise word match adds to its relevance: more than any similarity (at most 1).
PRECISE_MATCH_BONUS = 1.0
# The same rule's constants as the ranking statement takes them (it reloads only the
# candidates this fusion can answer).
FUSION_WEIGHTS = FusionWeights(RRF_K, PRECISE_WORD_MATCHES, PRECISE_MATCH_BONUS)
# Filters without a column in the vector index (tags, untagged, source host): when they match
# at most this many assets the ANN query is restricted to exactly those; beyond it, the index
# is overfetched (up to WIDE_OVERFETCH hits) and the filters are applied on reload.
CANDIDATE_CAP = 10_000
WIDE_OVERFETCH = 1000
# A query image up to this size is hashed on the event loop (about 0.5 ms at 1 MiB); a larger
# one in a worker thread.
HASH_INLINE_BYTES = 1024 * 1024

Mode = Literal["text", "image", "fused"]


@dataclass(frozen=True, kw_only=True)
class SearchRequest(FilterFields):
    """What ``image_asset_search`` was asked."""

    query: str | None = None
    asset_id: str | None = None
    image_base64: str | None = None
    source_url: str | None = None
    # A query image's bytes as they came (the web app's file field); checked and never stored
    # like imageBase64, under the same ASSET_MAX_BYTES limit.
    image_bytes: bytes | None = None
    limit: int = 10
    min_score: float | None = None
    include_preview: bool = False
    include_thumbnails: bool = False


class SearchHit(WireModel):
    """One search result, best first."""

    asset_id: str
    vault: str
    title: str
    mime_type: str
    width: int
    height: int
    project_id: str | None
    folder_id: str | None
    source_url: str | None
    tags: list[str]
    created_at: datetime
    score: float = Field(
        description="Relevance from 0 to 1 (higher is better) that orders the results: the "
        "similarity, the word match and the places in the lists fused (docs/tools.md). Above "
        "0 for every word match. Compare scores within one answer, not across searches."
    )
    similarity: float = Field(
        description="Best cosine similarity (-1 to 1) of the asset's vectors to the query; "
        "minScore, bestScore and goodMatchScore are on this scale."
    )
    match_representations: list[str] = Field(
        description="The lists that found it and counted: visual (the picture), fused (the "
        "picture with its words) when that vector's similarity is above the embedder's "
        "evidence floor; metadata when its words (title, tags, alt text, description, text "
        "read in the image) match the query."
    )
    embedding_model: str
    preview: PreviewLink | None


class SearchView(WireModel):
    """Search results with evidence, best first (at most the requested limit, maybe none)."""

    mode: str = Field(description="text, image or fused: how the query was embedded.")
    results: list[SearchHit] = Field(
        description="Only results with evidence (a word match, or a similarity above the "
        "embedder's evidence floor); never padded up to limit."
    )
    no_good_match: bool = Field(
        description="True when no result matched by words or reached goodMatchScore: treat the "
        "results as weak, or as nothing found when there are none."
    )
    best_score: float | None = Field(
        description="The best similarity seen (also when nothing was returned); null when no "
        "image was compared. A similarity, like each result's similarity, not its score."
    )
    good_match_score: float = Field(
        description="The embedder's documented good-match line for this kind of query, as a "
        "similarity."
    )
    no_good_match_reason: str | None = Field(
        default=None, description="Why noGoodMatch, when known (e.g. words-only search)."
    )


@dataclass
class Evidence:
    """One asset's evidence gathered from the ranked lists."""

    # Reciprocal-rank fusion, the precise-word bonus and the best similarity (when positive).
    relevance: float = 0.0
    similarity: float | None = None  # best cosine similarity of any of its vectors
    matched: set[str] = field(default_factory=lambda: set[str]())
    score: float = 0.0  # relevance scaled to 0..1 by the most any result could have

    def rank(self, position: int) -> None:
        """Count a place (0 is first) in one ranked list."""
        self.relevance += 1.0 / (RRF_K + position + 1)

    def similar(self, value: float) -> None:
        """Count one cosine similarity of the query to one of the asset's vectors."""
        self.similarity = value if self.similarity is None else max(self.similarity, value)


def relevance_ceiling(*, words: bool) -> float:
    """The most relevance a result can have: first in every list, similarity 1.

    Two vector lists (visual, fused); with a text query also the word list and its precise
    match bonus. A result's ``score`` is its relevance divided by this, so 1.0 is the best any
    result of this kind of query could get.
    """
    lists = 3 if words else 2
    return lists / (RRF_K + 1) + (PRECISE_MATCH_BONUS if words else 0.0) + 1.0


def fuse(
    hits: Sequence[VectorHit],
    words: Sequence[TextMatch],
    word_hits: Sequence[VectorHit],
    *,
    evidence_floor: float,
    text_query: bool,
) -> dict[str, Evidence]:
    """Reciprocal-rank fusion of the ranked lists, plus each asset's best similarity.

    ``hits``: the ANN list, best first, whose ``visual`` and ``fused`` hits rank as two lists;
    a hit at or below the embedder's ``evidence_floor`` is not evidence (the index returns its
    nearest hits whatever they score: for ``local-hash-v1`` a text query against an image-only
    vector is exactly 0.0), so it neither ranks nor names its representation, though its
    similarity is still known. ``words``: the full-text list, best first (a precise match, one
    of at most ``PRECISE_WORD_MATCHES`` holding every word, gets ``PRECISE_MATCH_BONUS``);
    ``word_hits``: the similarities of the word matches' vectors, which count but do not rank.

    Each asset's relevance is the sum of its places, the bonus and its best similarity when
    positive (a negative one is no evidence against a word match); its ``score`` is that
    relevance over :func:`relevance_ceiling` for this kind of query (``text_query``: a word list
    was searched), rounded as answered, so it lies in 0..1, orders the results, and is above 0
    for every word match.
    """
    fusion: dict[str, Evidence] = {}
    for representation in ("visual", "fused"):
        ranked = [h for h in hits if h.representation == representation]
        position = 0
        for hit in ranked:
            evidence = fusion.setdefault(hit.asset_id, Evidence())
            evidence.similar(hit.score)
            if hit.score > evidence_floor:  # the list is best first: the rest are noise too
                evidence.rank(position)
                evidence.matched.add(representation)
                position += 1
    precise = sum(match.every_word for match in words) <= PRECISE_WORD_MATCHES
    for position, match in enumerate(words):
        evidence = fusion.setdefault(match.asset_id, Evidence())
        evidence.rank(position)
        evidence.matched.add("metadata")
        if precise and match.every_word:
            evidence.relevance += PRECISE_MATCH_BONUS
    for hit in word_hits:
        fusion[hit.asset_id].similar(hit.score)
    ceiling = relevance_ceiling(words=text_query)
    for evidence in fusion.values():
        if evidence.similarity is not None:
            evidence.relevance += max(evidence.similarity, 0.0)
        evidence.score = round(evidence.relevance / ceiling, 6)
    return fusion


def best_first(
    fusion: Mapping[str, Evidence], *, evidence_floor: float, min_score: float | None
) -> list[str]:
    """The candidates with evidence, best score first (ties by id), before any row is read.

    Evidence is a word match or a similarity above the embedder's ``evidence_floor``; an asset
    without any similarity has none (its vectors are not in the index yet). ``minScore`` is
    applied to the similarity.
    """
    return sorted(
        (
            asset_id
            for asset_id, e in fusion.items()
            if e.similarity is not None
            and (e.similarity > evidence_floor or "metadata" in e.matched)
            and (min_score is None or e.similarity >= min_score)
        ),
        key=lambda asset_id: (-fusion[asset_id].score, asset_id),
    )


def answered(ranked: Ranked, ordered: Sequence[str], limit: int) -> list[StoredAsset]:
    """The first ``limit`` candidates of ``ordered`` (:func:`best_first`) that were reloaded.

    Reloaded means ready, in scope and matching the filters. The ranking statement reloads
    only the candidates that can be among these (``memory_db.vectors.ranking``); only the
    answered become records.
    """
    chosen = [asset_id for asset_id in ordered if asset_id in ranked.reloaded][:limit]
    return [row for asset_id in chosen if (row := ranked.stored(asset_id)) is not None]


def verdict(
    results: Sequence[SearchHit], fusion: Mapping[str, Evidence], *, good_line: float
) -> tuple[bool, float | None]:
    """Whether any result is a good match, and the best similarity to show.

    A result is good with a similarity at the embedder's ``good_line`` or a word match. The
    best similarity is the best result's, or, with no result, the best seen at all (so an
    empty answer still says how close anything came).
    """
    good = any(
        hit.similarity >= good_line or "metadata" in hit.match_representations for hit in results
    )
    best = max((hit.similarity for hit in results), default=None)
    seen = [e.similarity for e in fusion.values() if e.similarity is not None]
    if best is None and seen:
        best = round(max(seen), 6)
    return good, best


def _check(request: SearchRequest) -> tuple[Mode, str | None]:
    """The query mode and the cleaned text; ``invalid_input`` for anything malformed."""
    text = inputs.clean_text(request.query, "query", MAX_QUERY_CHARS)
    images = [
        name
        for name, value in (
            ("assetId", request.asset_id),
            ("imageBase64", request.image_base64),
            ("sourceUrl", request.source_url),
            ("image", request.image_bytes),
        )
        if value is not None
    ]
    if len(images) > 1:
        raise InvalidInputFailure(f"give at most one query image, not {' and '.join(images)}")
    if text is None and not images:
        raise InvalidInputFailure("query: give a text query, a query image, or both")
    if not 1 <= request.limit <= MAX_SEARCH_LIMIT:
        raise InvalidInputFailure(f"limit: between 1 and {MAX_SEARCH_LIMIT}")
    if request.min_score is not None and not -1.0 <= request.min_score <= 1.0:
        raise InvalidInputFailure("minScore: between -1 and 1 (a cosine similarity)")
    check_filters(request)
    if not images:
        return "text", text
    return ("fused" if text is not None else "image"), text


@dataclass
class Query:
    """A search's query, and its vector once embedded (with whether it came from the cache)."""

    text: str | None
    image: bytes | None
    embedding: tuple[EmbedResult, bool] | None = None


@dataclass(frozen=True)
class Given:
    """What a search that names its scope resolved before fetching or embedding anything."""

    vaults: list[ResolvedVault]
    filters: AssetFilter
    # A stored query image's preview: its storage key and hash.
    preview: tuple[str, str | None] | None


def _names_a_scope(request: SearchRequest) -> bool:
    """Whether the scope must be resolved in a unit of work of its own, before the ranking.

    A stored query image must be found before it is embedded, and a project named without
    its vault names the vault (``resolve_filters`` finds it among the caller's). Every other
    search, one that names a vault, project or folder or filters without a vector column
    included, resolves and checks them in the ranking transaction's first statement
    (:func:`_named`; one checkout and four round trips in all).
    """
    return request.asset_id is not None or (
        request.vault is None and request.project_id is not None
    )


def _named(caller: Caller, request: SearchRequest) -> NamedScope | None:
    """The vault, project and folder a search names, for the ranking's first statement.

    A handle no vault can have is refused here, before anything is fetched or embedded, with
    the answer an unknown vault gets (as ``memory_tools.access.resolve_vault``).
    """
    outside = request.filters.outside_vectors()
    if (
        request.vault is None
        and request.project_id is None
        and request.folder_id is None
        and not outside
    ):
        return None
    owner: str | None = None
    name: str | None = None
    if request.vault is not None:
        refuse_nul(request.vault, "vault")
        # Split as VaultRepository.resolve splits it.
        given_owner, _, given_name = request.vault.rpartition("/")
        if not given_name or len(request.vault) > 400:
            raise NotFoundFailure(f"vault {request.vault!r} not found")
        owner = given_owner.strip().lower() or caller.identity.strip().lower()
        name = given_name.lower()
    return NamedScope(
        vault_owner=owner,
        vault_name=name,
        project_id=request.project_id,
        folder_id=request.folder_id,
        include_subfolders=request.include_subfolders,
        # Tags, untagged, the source host: the matching assets narrow the ranking.
        candidates=(
            replace(normalised_filters(request), project_id=request.project_id) if outside else None
        ),
        candidate_cap=CANDIDATE_CAP,
    )


def _refusal(request: SearchRequest, start: SearchStart) -> NotFoundFailure | None:
    """What a search naming its scope is refused with, as ``resolve_filters`` refuses it.

    In its order: the vault, then the folder (in the project named), else the project.
    """
    if request.vault is not None and not start.vaults:
        return NotFoundFailure(f"vault {request.vault!r} not found")
    if start.folder_ids is not None and not start.folder_ids:
        return NotFoundFailure("folder not found")
    if start.project_found is False:
        return NotFoundFailure("project not found")
    return None


class AssetSearcher:
    """Runs searches for one server's services."""

    def __init__(self, services: MemoryServices) -> None:
        self.services = services
        self._settings = services.settings
        self._index_ready = False
        # The index the alias pointed at when last read; checked by every ranking transaction.
        self._active: VectorIndex | None = None

    async def search(self, caller: Caller, request: SearchRequest) -> SearchView:
        """Search the caller's readable vaults; see the module docstring for the steps."""
        started = time.perf_counter()
        with metrics.refusals():
            view, candidates = await self._search(caller, request)
        self.services.key_activity.note(caller.key_id, searches=1)
        metrics.count_search(
            view.mode,
            seconds=time.perf_counter() - started,
            candidates=candidates,
            results=len(view.results),
            vector=any(
                {"visual", "fused"} & set(hit.match_representations) for hit in view.results
            ),
        )
        return view

    async def _search(self, caller: Caller, request: SearchRequest) -> tuple[SearchView, int]:
        policy.require(self._settings, "search")
        embedder = self.services.embedder
        if embedder is None:
            raise FeatureDisabled("no embedder is configured on this server")
        mode, text = _check(request)
        require_scope(caller, "read")
        if not self._index_ready:
            # First search before any worker ran: create the index (idempotent, locked).
            await prepare_vector_index(self.services.database, self._settings, embedder)
            self._index_ready = True
        given: Given | None = None
        named: NamedScope | None = None
        if _names_a_scope(request):
            # A filter without a vector column, or a stored query image: resolved (with any
            # vault, project or folder named) before anything is fetched or embedded.
            given = await self._resolve(caller, request)
        else:
            named = _named(caller, request)
        # Only an authorised, well-formed search fetches or decodes a query image. A vault,
        # project or folder it names is checked after that, in the ranking's first statement
        # (never while a fetch holds a pooled connection), but before anything is embedded.
        image = await self._temporary_image(request)
        if given is not None and given.preview is not None:
            key, sha256 = given.preview
            try:
                image = await read_preview(self.services, key, sha256)
            except MemoryDbError:
                raise NotFoundFailure("the asset's image is not available") from None
        active = self._active or await self._read_alias()
        for attempt in range(SWITCH_RETRIES + 1):
            # The query is embedded by the model of the index the alias pointed at when last
            # read, outside any transaction; the ranking transaction checks the alias still
            # points there (an index switch in between means embedding again), so no search
            # compares two models.
            embedder = self._embedder_of(active)
            # A search naming its scope is embedded once the ranking's first statement found
            # it (a refused search spends no tokens); any other before the transaction opens.
            query = Query(text, image)
            if named is None:
                query.embedding = await self._embed_cached(active, embedder, text, image)
            thresholds = match_thresholds(embedder.model, mode)
            try:
                vaults, fusion, rows = await self._rank(
                    caller, request, given, named, active, embedder, query, mode
                )
                break
            except AliasMoved:
                active = await self._read_alias()
                if attempt == SWITCH_RETRIES:
                    raise EmbeddingUnavailable(
                        "the vector index is being switched; retry shortly"
                    ) from None
        else:  # pragma: no cover - the loop always breaks or raises
            raise AssertionError("unreachable")
        handles = vault_handles(vaults)
        results: list[SearchHit] = []
        for stored in rows:
            evidence = fusion[stored.asset.id]
            # best_first keeps only assets with a similarity: this is never the default.
            similarity = evidence.similarity if evidence.similarity is not None else 0.0
            results.append(
                SearchHit(
                    asset_id=stored.asset.id,
                    vault=handles[(stored.asset.owner_identity, stored.asset.vault)],
                    title=stored.asset.title,
                    mime_type=stored.mime_type,
                    width=stored.width,
                    height=stored.height,
                    project_id=stored.asset.project_id,
                    folder_id=stored.asset.folder_id,
                    source_url=stored.asset.source_url,
                    tags=list(stored.asset.tags),
                    created_at=stored.asset.created_at,
                    score=evidence.score,
                    similarity=round(similarity, 6),
                    match_representations=sorted(evidence.matched),
                    embedding_model=embedder.model,
                    preview=None,
                )
            )
        # Results that would not fit one answer are left out, the weakest first.
        kept = fitting(results)
        results, rows = results[:kept], rows[:kept]
        if request.include_preview:
            by_id = {stored.asset.id: stored for stored in rows}
            results = [
                hit.model_copy(
                    update={"preview": await signed_preview(self.services, by_id[hit.asset_id])}
                )
                for hit in results
            ]
        good, best = verdict(results, fusion, good_line=thresholds.good)
        log.info(
            "asset_searched", mode=mode, results=len(results), vaults=len(vaults), good_match=good
        )
        view = SearchView(
            mode=mode,
            results=results,
            no_good_match=not good,
            best_score=best,
            good_match_score=thresholds.good,
            no_good_match_reason=search_reason(embedder.model, good_match=good),
        )
        if request.include_thumbnails:
            # Made by the tool runner (memory_tools.workflows.thumbnails.render), sent beside the
            # answer.
            view = view.with_thumbnails(tuple(Thumbnail.wanted(row) for row in rows))
        return view, len(fusion)

    async def _resolve(self, caller: Caller, request: SearchRequest) -> Given:
        """The vaults, the exact filter and a stored query image's preview, checked first."""
        async with self.services.database.unit_of_work() as uow:
            vaults, filters = await resolve_filters(uow, caller, request)
            preview: tuple[str, str | None] | None = None
            if request.asset_id is not None:
                stored = await uow.assets.get_visible(
                    [v.record.scope for v in vaults], request.asset_id
                )
                if stored is None:
                    raise NotFoundFailure("asset not found")
                if stored.preview_storage_key is None or stored.object_status != "available":
                    raise NotFoundFailure("the asset's image is not available")
                preview = (stored.preview_storage_key, stored.preview_sha256)
        return Given(vaults, filters, preview)

    async def _read_alias(self) -> VectorIndex:
        """The index the alias points at now (remembered: the next search embeds for it)."""
        async with self.services.database.single_statements() as uow:
            self._active = await uow.vector_indexes.open_alias(
                self.services.vector_alias, hold=False
            )
        return self._active

    async def _temporary_image(self, request: SearchRequest) -> bytes | None:
        """The sanitised preview of a query image given inline or by URL (never stored)."""
        limit = self._settings.asset_max_bytes
        if request.image_base64 is not None:
            data = inputs.decode_base64(request.image_base64, limit, searching=True)
        elif request.image_bytes is not None:
            data = inputs.query_image_bytes(request.image_bytes, limit)
        elif request.source_url is not None:
            fetcher = self.services.fetcher
            if fetcher is None:
                raise FeatureDisabled("searching by image URL is not configured on this server")
            data = (await fetcher.fetch(str(await fetcher.check(request.source_url)))).data
        else:
            return None
        # A query image seen before is not decoded again (memory_tools.query_cache).
        if len(data) <= HASH_INLINE_BYTES:
            digest = hashlib.sha256(data).hexdigest()
        else:  # hashlib lets go of the GIL: the event loop goes on meanwhile
            digest = await anyio.to_thread.run_sync(lambda: hashlib.sha256(data).hexdigest())
        preview = self.services.query_previews.get(digest)
        if preview is None:
            inspected = await inspect_image(
                data,
                max_pixels=self._settings.asset_max_decoded_pixels,
                preview_edge=self._settings.asset_preview_max_edge,
                admission=self.services.decode_admission,
            )
            preview = inspected.preview
            self.services.query_previews.put(digest, preview)
        return preview

    def _embedder_of(self, index: VectorIndex) -> Embedder:
        """The embedder of ``index``; a clear failure when this process cannot build it."""
        if index.identity is None:  # made before identities were recorded: the configured one
            if self.services.embedder is None:
                raise EmbeddingUnavailable("this process has no embedder configured")
            return self.services.embedder
        try:
            return self.services.embedders.get(index.identity)
        except ConfigurationError as exc:
            log.error("asset_search_embedder_unavailable", index=index.name, exc_info=True)
            raise EmbeddingUnavailable(
                f"this server cannot embed queries for the active vector index {index.name} "
                f"({index.identity}): {exc}"
            ) from None

    async def _embed_cached(
        self, index: VectorIndex, embedder: Embedder, text: str | None, image: bytes | None
    ) -> tuple[EmbedResult, bool]:
        """The query's vector from this process's cache (zero tokens), else from the embedder.

        Keyed by the identity of the index's embedder, so a cached vector of one model is
        never used after the alias moves to an index of another (memory_tools.query_cache).
        """
        cache = self.services.query_cache
        identity = (
            str(index.identity)
            if index.identity is not None
            else f"configured/{embedder.model}/{embedder.dimensions}"
        )
        key = QueryKey.of(identity, "retrieval.query", embedder.dimensions, text, image)
        if cache.enabled:
            vector = cache.get(key)
            metrics.QUERY_CACHE.labels("miss" if vector is None else "hit").inc()
            if vector is not None:
                return EmbedResult([vector], embedder.model, embedder.dimensions), True
        embedded = await self._embed(embedder, text, image)
        metrics.count_tokens(
            embedder.model,
            prompt=embedded.usage.prompt_tokens,
            image=embedded.usage.image_tokens,
        )
        cache.put(key, embedded.embeddings[0])
        return embedded, False

    async def _embed(
        self, embedder: Embedder, text: str | None, image: bytes | None
    ) -> EmbedResult:
        value: EmbedValue
        if image is None:
            if text is None:
                raise InvalidInputFailure("query: give words or an image")
            value = TextInput(text)
        elif text is None:
            value = ImageInput(data=image)
        else:
            value = FusedInput(parts=(TextInput(text), ImageInput(data=image)))
        try:
            with metrics.embedding_call(embedder.model, "retrieval.query"):
                result = await embedder.embed([value], "retrieval.query")
            metrics.count_inputs(embedder.model, [value])
        except EmbeddingError as exc:
            log.warning(
                "asset_search_embed_failed",
                code=exc.code,
                model=embedder.model,
                task="retrieval.query",
                exc_info=True,
            )
            if exc.retryable:
                raise EmbeddingUnavailable(
                    "the embedding provider is unavailable; retry shortly"
                ) from None
            refused = f"the embedding provider refused the query ({exc.code})"
            raise EmbeddingFailed(refused) from None
        return result

    async def _rank(
        self,
        caller: Caller,
        request: SearchRequest,
        given: Given | None,
        named: NamedScope | None,
        active: VectorIndex,
        embedder: Embedder,
        query: Query,
        mode: Mode,
    ) -> tuple[list[ResolvedVault], dict[str, Evidence], list[StoredAsset]]:
        """The caller's vaults, fused evidence per asset and at most ``limit`` results.

        One transaction of two statements (``memory_db.vectors.ranking``): the first resolves
        the caller's vaults (unless ``given``) and what ``named`` names, checks the alias
        still points at ``active`` and counts the scope; a vault, project or folder named and
        not found is refused there, ``not_found`` as before, before the query is embedded
        (``query`` is embedded between the two statements when it was not before: the
        transaction holds its connection meanwhile); the second reads the ranked lists (ANN;
        full text for a text query) and the candidates with evidence that can be answered
        (the most relevant the authorisation predicates and the exact filters admit), and writes
        the usage and provenance of this search. Fusion
        (:func:`fuse`, :func:`best_first`) is pure. Only assets with evidence are results: a
        word match, or a similarity above the embedder's evidence floor. Nothing is added to
        fill ``limit``. ``AliasMoved`` when the alias moved since the query was embedded.
        """
        text = query.text
        thresholds = match_thresholds(embedder.model, mode)
        filters = given.filters if given is not None else normalised_filters(request)
        tuning = SearchTuning()
        async with self.services.database.unit_of_work() as uow:
            index = uow.vector_indexes.bind(active)
            restricted: tuple[str, ...] | None = None
            overfetch = OVERFETCH
            if given is not None and filters.outside_vectors():
                ids = await uow.assets.matching_ids(
                    [v.record.scope for v in given.vaults],
                    filters,
                    statuses=("ready",),
                    limit=CANDIDATE_CAP + 1,
                )
                if len(ids) <= CANDIDATE_CAP:
                    restricted = tuple(ids)
                else:
                    overfetch = WIDE_OVERFETCH
            if given is None:
                filters = replace(filters, project_id=request.project_id)
            vector_filters = replace(filters.for_vectors(), asset_ids=restricted)
            start = await uow.vector_indexes.start_search(
                index,
                self.services.vector_alias,
                viewer=None if given is not None else caller.identity,
                scopes=[v.record.scope for v in given.vaults] if given is not None else [],
                filters=vector_filters,
                tuning=tuning,
                named=named,
                plan_once=planned_once(filters, vector_filters, named),
            )
            refused = None if given is not None else _refusal(request, start)
            if refused is not None:  # nothing embedded, nothing metered: rolled back
                raise refused
            vaults = given.vaults if given is not None else readable(caller, start.vaults or [])
            if query.embedding is None:
                query.embedding = await self._embed_cached(
                    active, embedder, query.text, query.image
                )
            embedded, cached = query.embedding
            if start.candidate_ids is not None:  # listed by the first statement
                if len(start.candidate_ids) <= CANDIDATE_CAP:
                    vector_filters = replace(vector_filters, asset_ids=start.candidate_ids)
                else:
                    overfetch = WIDE_OVERFETCH
            if start.folder_ids is not None:
                filters = replace(filters, folder_ids=start.folder_ids)
                vector_filters = replace(vector_filters, folder_ids=start.folder_ids)
            ranked = await uow.vector_indexes.rank_and_meter(
                index,
                start,
                [v.record.scope for v in vaults],
                vector=embedded.embeddings[0],
                model=embedder.model,
                filters=filters,
                vector_filters=vector_filters,
                words=text,
                overfetch=overfetch,
                text_hits=TEXT_HITS,
                evidence_floor=thresholds.evidence,
                min_score=request.min_score,
                limit=request.limit,
                fusion=FUSION_WEIGHTS,
                tuning=tuning,
                metering=Metering(
                    identity=caller.identity,
                    model=embedder.model,
                    total_tokens=embedded.usage.total_tokens,
                    prompt_tokens=embedded.usage.prompt_tokens,
                    image_tokens=embedded.usage.image_tokens,
                    request_id=embedded.request_id,
                    detail={
                        "mode": mode,
                        "vaults": len(vaults),
                        "queryChars": len(text or ""),
                        # A cached query vector: nothing was sent, no token spent.
                        "queryEmbeddingCached": cached,
                        "queryTokens": embedded.usage.total_tokens,
                    },
                ),
            )
        fusion = fuse(
            ranked.hits,
            ranked.words,
            ranked.word_hits,
            evidence_floor=thresholds.evidence,
            text_query=text is not None,
        )
        ordered = best_first(
            fusion, evidence_floor=thresholds.evidence, min_score=request.min_score
        )
        return vaults, fusion, answered(ranked, ordered, request.limit)
