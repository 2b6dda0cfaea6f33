"""Rebuilding the vector index, for another model or dimension, without downtime.

``memory-server reindex --to NAME`` (docs/runbooks/switch-models.md) runs :func:`reindex`:

1. **start** (or resume): create the versioned table ``NAME`` recording its embedder's identity
   and a ``mem_vector_rebuilds`` row. From then on every worker embeds new saves into both
   indexes, and deletes and moves reach both (``VectorIndex.open_alias``); searches keep
   reading the old index.
2. **walk**: every asset not being deleted, in id order from the row's cursor, is embedded
   again from its asset and object rows (the stored, sanitised preview; never a source URL)
   in batches; each batch's vectors and the cursor commit together, so a crashed run resumes
   after the last batch it finished and never duplicates (vector ids are deterministic).
3. **verify**: every asset with a vector in the old index must have one in the new (the
   missing ones are embedded, then counted again), and recall@10 of the new index's HNSW search
   against exact search over it is measured on a sample of its own vectors as queries.
4. **switch**: below ``--min-recall`` nothing switches (unless ``--force``). Otherwise, in one
   transaction holding the alias row (writers of the old index wait), the counts are checked
   once more and the alias is pointed at ``NAME``. Every process then embeds queries and saves
   with the new model, with no restart. The old index stays, kept in step for deletes and
   moves, so ``reindex --to OLD`` can switch back (embedding only what was saved since) until
   it is dropped (``--drop-old`` or ``memory-server reindex-drop OLD``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from memory_db import (
    AssetRecord,
    Database,
    MemoryDbError,
    MemorySettings,
    VaultScope,
    get_logger,
)
from memory_db.embedding import (
    JINA_MODEL,
    LOCAL_MODEL,
    Embedder,
    EmbedderIdentity,
    EmbedValue,
    FusedInput,
    FusesByCombining,
    ImageInput,
    TextInput,
    check_identity,
    clip_dimensions,
)
from memory_db.errors import ChecksumMismatch, ConfigurationError, EmbeddingError
from memory_db.runtime import warn_if_index_outgrows_buffers
from memory_db.vectors import (
    WALK_DONE,
    Rebuild,
    VectorRecord,
    check_dimensions,
    check_identifier,
)
from memory_tools.errors import (
    ConflictFailure,
    EmbeddingUnavailable,
    InvalidInputFailure,
    Unavailable,
    translate,
)
from memory_tools.ingest.plan import asset_fused_text
from memory_tools.jobs.embed_reuse import Known, Need, plan_request
from memory_tools.operations.admin import OPERATOR
from memory_tools.operations.reindex_defaults import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_MIN_RECALL,
    DEFAULT_RECALL_QUERIES,
    RECALL_K,
)
from memory_tools.services import MemoryServices
from memory_tools.workflows.assets import read_preview

log = get_logger(__name__)

# Rounds of "embed what is missing, count again" before a switch gives up (each round finds
# only what the workers could not embed for the new index meanwhile).
CATCH_UP_ROUNDS = 3

# done, total, detail: the command's progress bar.
ProgressCallback = Callable[[int, int, str], None]


class RecallTooLow(ConflictFailure):
    """The new index's search recall is below the threshold: nothing was switched.

    A ``conflict`` (the index is not fit to switch to yet), like every other refusal: the
    codes are one closed set that callers and the server instructions share.
    """


@dataclass(frozen=True)
class ReindexRequest:
    """What the operator asked for; unset identity parts default to the active index's."""

    target: str
    provider: str | None = None
    model: str | None = None
    dimensions: int | None = None
    batch_size: int = DEFAULT_BATCH_SIZE
    min_recall: float = DEFAULT_MIN_RECALL
    recall_queries: int = DEFAULT_RECALL_QUERIES
    force: bool = False
    drop_old: bool = False


@dataclass(frozen=True)
class ReindexReport:
    """What a run did: counts, the measured recall and whether the alias switched."""

    target: str
    source: str
    embedder: str
    resumed: bool
    embedded: int
    skipped: int
    source_assets: int
    target_assets: int
    missing: int
    recall: float | None
    min_recall: float
    forced: bool
    switched: bool
    dropped_old: bool


async def reindex(
    services: MemoryServices, request: ReindexRequest, *, progress: ProgressCallback | None = None
) -> ReindexReport:
    """Start or resume the rebuild into ``request.target``, verify it, switch (module doc)."""
    if not 1 <= request.batch_size <= 1000:
        raise InvalidInputFailure("--batch-size: 1-1000")
    if not 0.0 <= request.min_recall <= 1.0:
        raise InvalidInputFailure("--min-recall: between 0 and 1")
    if not 1 <= request.recall_queries <= 10_000:
        raise InvalidInputFailure("--recall-queries: 1-10000")
    try:
        rebuild, identity, resumed = await _start(services, request)
        embedder = _embedder(services, identity)
        recall: float | None = None
        counts = (0, 0)
        if not rebuild.walked:
            await _walk(services, rebuild, embedder, request.batch_size, progress)
        for _round in range(CATCH_UP_ROUNDS):
            await _catch_up(services, rebuild, embedder, request.batch_size)
            recall, counts = await _verify(services, rebuild, request.recall_queries)
            if recall is not None and recall < request.min_recall and not request.force:
                raise RecallTooLow(
                    f"recall@{RECALL_K} of {rebuild.target_index} is {recall:.3f}, below "
                    f"--min-recall {request.min_recall}; nothing was switched (run again to "
                    "measure again, or pass --force to switch anyway)"
                )
            forced = recall is not None and recall < request.min_recall
            if await _switch(services, rebuild, recall, forced):
                break
        else:
            raise ConflictFailure(
                f"assets kept appearing in {rebuild.source_index} without vectors in "
                f"{rebuild.target_index}; nothing was switched (run again)"
            )
        # Read before the drop: dropping the source index cascades onto this rebuild's row.
        finished = await _load(services, rebuild.target_index)
        dropped = False
        if request.drop_old:
            await _drop(services.database, rebuild.source_index)
            dropped = True
        # The new graph may be larger than the old (more dimensions, more vectors).
        await warn_if_index_outgrows_buffers(
            services.database,
            rebuild.target_index,
            embedded=services.settings.uses_embedded_database,
        )
    except MemoryDbError as exc:
        raise translate(exc) from None
    log.info(
        "vector_index_switched",
        target=rebuild.target_index,
        source=rebuild.source_index,
        embedder=str(identity),
        recall=recall,
    )
    return ReindexReport(
        target=rebuild.target_index,
        source=rebuild.source_index,
        embedder=str(identity),
        resumed=resumed,
        embedded=finished.embedded,
        skipped=finished.skipped,
        source_assets=counts[0],
        target_assets=counts[1],
        missing=0,
        recall=recall,
        min_recall=request.min_recall,
        forced=request.force and recall is not None and recall < request.min_recall,
        switched=True,
        dropped_old=dropped,
    )


async def drop_old_index(database: Database, name: str) -> None:
    """Drop an index no alias points at, and forget a rebuild into it that never switched."""
    try:
        await _drop(database, name)
    except MemoryDbError as exc:
        raise translate(exc) from None


async def _drop(database: Database, name: str) -> None:
    check_identifier(name)
    async with database.unit_of_work() as uow:
        await uow.vector_indexes.abandon_rebuild(name)
        await uow.vector_indexes.drop(name)
        await uow.provenance.record(
            "vector_index_switch",
            actor_identity=OPERATOR,
            target_kind="vector_index",
            target_id=name,
            detail={"dropped": name},
        )


# --- start -------------------------------------------------------------------------------------


def _wanted(
    active: EmbedderIdentity | None, request: ReindexRequest, settings: MemorySettings
) -> EmbedderIdentity:
    """The new index's embedder: the request's parts, the rest from the active index."""
    provider = request.provider or (active.provider if active else "local")
    same = active is not None and active.provider == provider
    if provider == "clip" and not request.model and not same:
        raise InvalidInputFailure(
            "--provider clip needs --model NAME: a model directory under ASSET_EMBED_MODEL_DIR "
            "(memory-server models list)"
        )
    model = request.model or (
        active.model if same and active else (LOCAL_MODEL if provider == "local" else JINA_MODEL)
    )
    dimensions = request.dimensions or (active.dimensions if same and active else None)
    if dimensions is None:
        # A clip model's dimension is its own (model.json or the catalog), not a default.
        dimensions = clip_dimensions(model, settings) if provider == "clip" else 1024
    return EmbedderIdentity(provider, model, dimensions)


async def _start(
    services: MemoryServices, request: ReindexRequest
) -> tuple[Rebuild, EmbedderIdentity, bool]:
    """Create the target and its rebuild row, or find the one to resume; refuse the rest.

    Every refusal comes before anything is written.
    """
    alias = services.vector_alias
    target = request.target
    try:
        check_identifier(target)
    except MemoryDbError as exc:
        raise InvalidInputFailure(f"--to: {exc}") from None
    element = services.settings.asset_embed_vector_type
    async with services.database.unit_of_work() as uow:
        current = await uow.vector_indexes.resolve_alias(alias)
        active = await uow.vector_indexes.identity(current)
        if target == current:
            raise InvalidInputFailure(f"{target} is the index {alias} points at already")
        existing = await uow.vector_indexes.rebuild(target)
        if existing is not None and existing.state == "filling" and existing.alias == alias:
            identity = await uow.vector_indexes.identity(target)
            if identity is None or _differs(identity, request):
                raise ConflictFailure(
                    f"{target} is being rebuilt for {identity}; run again without "
                    "--provider/--model/--dim (or with the same) to resume it"
                )
            return existing, identity, True
        kept = await uow.vector_indexes.rebuild(current)
        registered = await uow.vector_indexes.exists(target)
        if (
            registered
            and kept is not None
            and kept.state == "switched"
            and kept.source_index == target
        ):
            # Switching back to the index this one replaced: kept in step for deletes and
            # moves, it lacks only what was saved since; the catch-up embeds those.
            identity = await uow.vector_indexes.identity(target)
            if identity is None or _differs(identity, request):
                raise ConflictFailure(f"{target} was filled by another embedder than asked")
            _embedder(services, identity)
            rebuild = await uow.vector_indexes.start_rebuild(
                alias=alias, target=target, source=current, cursor=WALK_DONE
            )
            return rebuild, identity, False
        if registered:
            raise ConflictFailure(
                f"vector index {target} exists; choose a new name (or drop it first)"
            )
        try:
            identity = _wanted(active, request, services.settings)
            check_identity(identity)
            check_dimensions(identity.dimensions, element)
        except (ConfigurationError, MemoryDbError) as exc:
            raise InvalidInputFailure(str(exc)) from None
        _embedder(services, identity)  # this process must be able to embed with it
        await uow.vector_indexes.create(
            target,
            dimensions=identity.dimensions,
            element=element,
            identity=identity,
            m=services.settings.asset_vector_graph_m,
        )
        rebuild = await uow.vector_indexes.start_rebuild(alias=alias, target=target, source=current)
    log.info("vector_index_rebuild_started", target=target, source=current, embedder=str(identity))
    return rebuild, identity, False


def _differs(identity: EmbedderIdentity, request: ReindexRequest) -> bool:
    return (
        (request.provider is not None and request.provider != identity.provider)
        or (request.model is not None and request.model != identity.model)
        or (request.dimensions is not None and request.dimensions != identity.dimensions)
    )


def _embedder(services: MemoryServices, identity: EmbedderIdentity) -> Embedder:
    try:
        return services.embedders.get(identity)
    except ConfigurationError as exc:
        raise InvalidInputFailure(f"cannot embed with {identity}: {exc}") from None


async def _load(services: MemoryServices, target: str) -> Rebuild:
    async with services.database.unit_of_work() as uow:
        rebuild = await uow.vector_indexes.rebuild(target)
    if rebuild is None:
        raise ConflictFailure(f"the rebuild into {target} was abandoned meanwhile")
    return rebuild


# --- walk and catch-up -------------------------------------------------------------------------


async def _walk(
    services: MemoryServices,
    rebuild: Rebuild,
    embedder: Embedder,
    batch_size: int,
    progress: ProgressCallback | None,
) -> None:
    """Embed every live asset after the cursor into the target, one committed batch at a time."""
    cursor = rebuild.cursor
    async with services.database.unit_of_work() as uow:
        left = await uow.assets.count_live(after=cursor)
        done = 0 if cursor is None else await uow.assets.count_live() - left
    total = done + left
    if progress is not None:
        progress(done, total, "")
    while True:
        async with services.database.unit_of_work() as uow:
            batch = await uow.assets.live_after(cursor, batch_size)
        if not batch:
            break
        embedded, skipped = await _fill(services, rebuild, embedder, batch, cursor=batch[-1].id)
        cursor = batch[-1].id
        done += len(batch)
        total = max(total, done)
        if progress is not None:
            progress(done, total, f"{embedded} embedded, {skipped} skipped")
    async with services.database.unit_of_work() as uow:
        await uow.vector_indexes.advance_rebuild(
            rebuild.target_index, cursor=WALK_DONE, embedded=0, skipped=0
        )


async def _catch_up(
    services: MemoryServices, rebuild: Rebuild, embedder: Embedder, batch_size: int
) -> None:
    """Embed the assets with vectors in the source index and none in the target."""
    after: str | None = None
    while True:
        async with services.database.unit_of_work() as uow:
            source = await uow.vector_indexes.resolve_alias(rebuild.alias)
            keys = await uow.vector_indexes.missing_assets(
                source, rebuild.target_index, after=after, limit=batch_size
            )
            assets = await uow.assets.get_many_for_owners(keys)
        if not keys:
            return
        after = keys[-1][1]
        batch = [assets[key] for key in keys if key in assets]
        if batch:
            await _fill(services, rebuild, embedder, batch, cursor=None)


async def _fill(
    services: MemoryServices,
    rebuild: Rebuild,
    embedder: Embedder,
    batch: Sequence[AssetRecord],
    *,
    cursor: str | None,
) -> tuple[int, int]:
    """Embed a batch of assets from their stored previews into the target; (embedded, skipped).

    The write locks the assets (as the worker does): one deleted meanwhile gets no vector, one
    moved meanwhile gets its new placement. ``cursor`` (the walk's) commits with the vectors.
    """
    async with services.database.unit_of_work() as uow:
        objects = await uow.objects.get_many([(a.owner_identity, a.object_id) for a in batch])
    values: list[EmbedValue] = []
    wanted: list[tuple[AssetRecord, str, str]] = []  # asset, representation, mime type
    skipped = 0
    for asset in batch:
        stored = objects.get((asset.owner_identity, asset.object_id))
        if stored is None or stored.status != "available" or stored.preview_storage_key is None:
            skipped += 1
            continue
        try:
            preview = await read_preview(
                services, stored.preview_storage_key, stored.preview_sha256
            )
        except ChecksumMismatch:
            skipped += 1  # never embed bytes that are not the ones validated
            continue
        except MemoryDbError:
            raise Unavailable("the object store could not be read; run again to resume") from None
        image = ImageInput(data=preview)
        values.append(image)
        wanted.append((asset, "visual", stored.mime_type))
        text = asset_fused_text(asset)
        if text is not None:
            values.append(FusedInput(parts=(TextInput(text), image)))
            wanted.append((asset, "fused", stored.mime_type))
    embeddings = await _embed_once(embedder, wanted, values)
    records: dict[VaultScope, list[VectorRecord]] = {}
    async with services.database.unit_of_work() as uow:
        current = await uow.assets.lock_many_for_owners(
            sorted({(a.owner_identity, a.id) for a, _r, _m in wanted})
        )
        state = await uow.vector_indexes.rebuild(rebuild.target_index, lock=True)
        if state is None or state.state != "filling":
            raise ConflictFailure(f"the rebuild into {rebuild.target_index} is no longer filling")
        index = await uow.vector_indexes.open(rebuild.target_index)
        done: set[str] = set()
        for (asset, representation, mime), embedding in zip(wanted, embeddings, strict=True):
            now = current.get((asset.owner_identity, asset.id))
            if embedding is None or now is None or now.status in ("deleting", "deleted"):
                continue
            records.setdefault(VaultScope(now.owner_identity, now.vault), []).append(
                VectorRecord(
                    asset_id=now.id,
                    object_id=now.object_id,
                    project_id=now.project_id,
                    folder_id=now.folder_id,
                    representation=representation,
                    model=embedder.model,
                    mime_type=mime,
                    source_kind=now.source_kind,
                    created_at=now.created_at,
                    embedding=embedding,
                )
            )
            done.add(now.id)
        for scope, rows in records.items():
            await index.upsert(scope, rows)
        skipped += len({a.id for a, _r, _m in wanted} - done)
        await uow.vector_indexes.advance_rebuild(
            rebuild.target_index,
            cursor=cursor,
            embedded=len(done),
            skipped=skipped,
        )
    return len(done), skipped


async def _embed_once(
    embedder: Embedder,
    wanted: Sequence[tuple[AssetRecord, str, str]],
    values: Sequence[EmbedValue],
) -> list[list[float] | None]:
    """One vector per value, each image sent once (memory_tools.jobs.embed_reuse, as the worker).

    The assets of one object share its image, and with an embedder that combines fused
    vectors (Jina's ``combine``) a fused value sends only its text. When the provider refuses
    the batch, the values go one by one, as sent before (the refused one gets ``None``).
    """
    combine = (
        embedder.combine_fused
        if isinstance(embedder, FusesByCombining) and embedder.combines_fused
        else None
    )
    needs = [
        Need(asset.owner_identity, asset.object_id, representation, value)
        for (asset, representation, _mime), value in zip(wanted, values, strict=True)
    ]
    plan = plan_request(needs, Known(), combine)
    if not plan.values:
        return []
    try:
        embedded = await embedder.embed(plan.values, "retrieval.passage")
    except EmbeddingError as exc:
        if exc.retryable:
            raise EmbeddingUnavailable(
                f"the embedding provider is unavailable ({exc.code}); run again to resume"
            ) from None
        return await _embed(embedder, values)
    return list(plan.vectors(embedded.embeddings))


async def _embed(embedder: Embedder, values: Sequence[EmbedValue]) -> list[list[float] | None]:
    """One vector per value; ``None`` for a value the provider refused (retrying cannot help)."""
    if not values:
        return []
    try:
        return list((await embedder.embed(values, "retrieval.passage")).embeddings)
    except EmbeddingError as exc:
        if exc.retryable:
            raise EmbeddingUnavailable(
                f"the embedding provider is unavailable ({exc.code}); run again to resume"
            ) from None
        if len(values) == 1:
            log.warning("vector_index_rebuild_refused", code=exc.code, exc_info=True)
            return [None]
    # One refused value must not cost its batch-mates their vectors: one by one.
    out: list[list[float] | None] = []
    for value in values:
        out.extend(await _embed(embedder, [value]))
    return out


# --- verify and switch -------------------------------------------------------------------------


async def _verify(
    services: MemoryServices, rebuild: Rebuild, queries: int
) -> tuple[float | None, tuple[int, int]]:
    """Recall@10 of the target's HNSW search, and both asset counts.

    The reference is exact search by the graph's own distance (``VectorIndex.graph_nearest``).

    Each sampled vector of the target is a query in its own vault (searches are per vault).
    ``None`` when the target holds no vector.
    """
    async with services.database.unit_of_work() as uow:
        source = await uow.vector_indexes.resolve_alias(rebuild.alias)
        counts = (
            await uow.vector_indexes.count_assets(source),
            await uow.vector_indexes.count_assets(rebuild.target_index),
        )
        index = await uow.vector_indexes.open(rebuild.target_index)
        sample = await uow.vector_indexes.sample_vectors(rebuild.target_index, queries)
        found = 0
        wanted = 0
        for query in sample:
            # The reference is exact search by the graph's own distance (each vector
            # normalised and rounded again to the element type), not by the stored vector's:
            # the two disagree in the last digits, so vectors the graph sees as tied were
            # reported up to 6.5e-6 apart, and when the graph listed one that exact search had
            # not, recall counted a miss (0.998 at random, whichever the graph met first).
            # Every vector as near as the tenth by the graph's distance is a right answer (the
            # same image saved as several assets ties exactly).
            expected = await index.graph_nearest(
                query.embedding, query.scope, model=query.model, limit=RECALL_K
            )
            ann = await index.search(
                query.embedding, [query.scope], model=query.model, limit=RECALL_K, strategy="ann"
            )
            right = sum(1 for hit in ann if hit.vector_id in expected)
            nearest = min(len(expected), RECALL_K)
            wanted += nearest
            found += min(right, nearest)
    return (None if not wanted else found / wanted), counts


async def _switch(
    services: MemoryServices, rebuild: Rebuild, recall: float | None, forced: bool
) -> bool:
    """Point the alias at the target in one transaction, unless an asset lacks its vectors.

    Holding the alias row, writers of the old index wait: the count checked here is final.
    Returns ``False`` (nothing changed) when assets are still missing.
    """
    async with services.database.unit_of_work() as uow:
        current = await uow.vector_indexes.lock_alias(rebuild.alias)
        if current != rebuild.source_index:
            raise ConflictFailure(
                f"{rebuild.alias} points at {current} now, not at {rebuild.source_index}"
            )
        state = await uow.vector_indexes.rebuild(rebuild.target_index, lock=True)
        if state is None or state.state != "filling":
            raise ConflictFailure(f"the rebuild into {rebuild.target_index} is no longer filling")
        if await uow.vector_indexes.missing_assets(
            current, rebuild.target_index, after=None, limit=1
        ):
            return False
        await uow.vector_indexes.switch_alias(rebuild.alias, rebuild.target_index)
        await uow.vector_indexes.mark_switched(rebuild.target_index)
        await uow.provenance.record(
            "vector_index_switch",
            actor_identity=OPERATOR,
            target_kind="vector_index",
            target_id=rebuild.target_index,
            detail={
                "alias": rebuild.alias,
                "from": rebuild.source_index,
                "to": rebuild.target_index,
                "recall": None if recall is None else round(recall, 4),
                "forced": forced,
            },
        )
    return True
