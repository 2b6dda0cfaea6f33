"""A worker batch's embeddings written in one statement (issue 31).

:func:`complete_embeddings` runs inside the transaction that locked the batch's assets
(``AssetRepository.lock_many_for_owners``, which the caller checks first for assets being
deleted). In one statement it holds the vector index alias, completes the jobs this worker
still holds, writes their vectors, the usage ledger and the ``asset_embed`` provenance, and
settles the assets from their jobs. With BEGIN, the lock and COMMIT that is four round trips,
where the same work took ten: the alias held, the index read, the jobs completed, the
vectors, usage and provenance inserted, the assets settled, each a statement of its own.

Why the alias is read under lock, and why here that takes no statement of its own
(``VectorIndex.open_alias`` explains the two statements it needs): the alias row is read
``FOR SHARE`` so that a switch waits for this transaction, and vectors written for the old
target commit before the switch. ``open_alias`` joins the alias to the index registry, and a
locking read that waited for a switch rechecks that join against the registry row it read
before the switch and finds no row; so it locks first and reads the index after. Here the
locking read is the alias row alone, with no join: after a wait it returns the row as the
switch left it (PostgreSQL rechecks a locked row against its newest version), and every
write of the statement is conditional on that name being the index the batch was embedded
for. The index's shape is not read at all: the caller has it from its plan, and a name always
has the same shape. A batch an index switch overtook writes nothing and is told so
(:attr:`Completed.alias_target`).

The writes are also conditional on the rebuild filling beside the alias (if any) being the
one the batch was planned with (:attr:`Completed.filling`). A worker remembers its plan
between batches, so it reads no alias per batch (issue 31); without this check a rebuild that
began since the plan was read would miss the batch's vectors until its verification. The
rebuild row is read with the statement's snapshot: a rebuild that commits its start while
the statement runs is not seen, the window every batch had when it read its plan just before
embedding, which the rebuild's verification covers.

Why the assets are locked by a statement before this one, not in it: the settling reads the
assets' other jobs, and a statement's snapshot is taken when it starts; a sibling job that
another batch completed while this one waited for the asset locks would not be seen, and the
asset would be left ``running``. Locked first, this statement starts after every such commit.
Its own job updates it cannot see either, so the settling reads the jobs with the outcome this
statement writes (:func:`memory_db.repositories.assets.settle_ctes`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from memory_db.errors import InvalidInput
from memory_db.ids import new_id
from memory_db.repositories.asset_states import ASSET_STATE_CHANNEL
from memory_db.repositories.assets import settle_ctes
from memory_db.repositories.records import INTEGRITY_CODES, AssetSettled
from memory_db.schema import PROVENANCE_OPERATIONS, USAGE_SOURCES
from memory_db.vectors.codes import vector_codes
from memory_db.vectors.index import REPRESENTATIONS, VectorIndex, VectorRecord, vector_id
from memory_db.vectors.near_duplicates import PAIR_SEARCH_SETTINGS, pair_search_locks

# The vaults the pair search after a completion covers: those a visual vector was written in.
_VISUAL_WRITTEN = "SELECT owner, vault FROM written WHERE representation = 'visual'"


@dataclass(frozen=True, slots=True)
class FinishedJob:
    """One embedding job's outcome: its vector, where it goes, and what it is metered as.

    The placement (vault, and the vector's project, folder, object, source kind, creation
    time) is the asset's as the caller locked it: it cannot change before the commit.
    """

    job_id: str
    owner_identity: str
    vault: str
    vector: VectorRecord
    # The job's usage as the queue records it, and the ledger's row for it.
    usage: Mapping[str, int]
    usage_source: str
    request_id: str | None
    # The ``asset_embed`` provenance entry's detail (docs/design.md#ledgers).
    provenance_operation: str
    provenance_actor: str
    provenance_detail: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Completed:
    """What the completion statement did."""

    # The index the alias pointed at under its lock; nothing was written when it is not the
    # one the batch was embedded for.
    alias_target: str | None
    # The rebuild filling beside the alias under that lock; nothing was written when it is
    # not the one the caller planned with.
    filling: str | None
    # The jobs completed: those this worker still held (a lost lease is left as it is).
    done: frozenset[str]
    # Assets this completion moved into ``ready`` or ``failed`` (for the metrics).
    settled: tuple[AssetSettled, ...]


async def complete_embeddings(
    session: AsyncSession,
    index: VectorIndex,
    alias: str,
    lease_owner: str,
    finished: Sequence[FinishedJob],
    *,
    filling: str | None,
) -> Completed:
    """Complete ``finished`` into ``index`` in one statement, if ``alias`` still points at it.

    ``filling``: the rebuild the caller knows fills beside the alias (``None``: none). The
    statement writes nothing when another one does, or none does any more.

    Run in the transaction that locked the jobs' assets (see the module's docstring). Bad
    vectors (a wrong length, non-finite values, another model than the index's) are refused
    before any SQL (``InvalidInput``).
    """
    rows: list[dict[str, Any]] = []
    flat: list[float] = []
    embeddings = [index.components(f.vector.embedding) for f in finished]
    codes = vector_codes(embeddings, index.dimensions) if embeddings else []
    for n, (job, embedding, code) in enumerate(zip(finished, embeddings, codes, strict=True)):
        record = job.vector
        if record.representation not in REPRESENTATIONS:
            raise InvalidInput("representation must be visual or fused")
        if index.identity is not None and record.model != index.identity.model:
            # One model per table: a search never compares vectors of two models.
            raise InvalidInput(f"{index.name} holds vectors of {index.identity.model} only")
        if job.usage_source not in USAGE_SOURCES:
            raise ValueError(f"unknown usage source {job.usage_source!r}")
        if job.provenance_operation not in PROVENANCE_OPERATIONS:
            raise ValueError(f"unknown provenance operation {job.provenance_operation!r}")
        flat.extend(embedding.tolist())
        rows.append(
            {
                "n": n,
                "job_id": job.job_id,
                "owner": job.owner_identity,
                "asset_id": record.asset_id,
                "vault": job.vault,
                "object_id": record.object_id,
                "project_id": record.project_id,
                "folder_id": record.folder_id,
                "representation": record.representation,
                "model": record.model,
                "mime_type": record.mime_type,
                "source_kind": record.source_kind,
                "created_at": record.created_at.isoformat(),
                "vector_id": vector_id(
                    record.asset_id, record.representation, record.model, index.dimensions
                ),
                "bits": code,
                "usage": dict(job.usage),
                "usage_id": new_id("aul"),
                "usage_source": job.usage_source,
                "total_tokens": int(job.usage.get("total_tokens", 0)),
                "prompt_tokens": int(job.usage.get("prompt_tokens", 0)),
                "image_tokens": int(job.usage.get("image_tokens", 0)),
                "request_id": job.request_id,
                "provenance_id": new_id("apv"),
                "operation": job.provenance_operation,
                "actor": job.provenance_actor,
                "detail": dict(job.provenance_detail),
            }
        )
    if not rows:
        return Completed(alias_target=None, filling=filling, done=frozenset(), settled=())
    d = index.dimensions
    vector = f"CAST((CAST(:flat AS real[]))[i.n * {d} + 1:(i.n + 1) * {d}] AS {index.element}({d}))"
    statement = f"""
        WITH alias AS (
            -- No join in this locking read: after waiting for a switch it returns the alias
            -- as the switch left it (see the module's docstring).
            SELECT index_name FROM mem_vector_index_aliases WHERE alias = :alias FOR SHARE
        ), filling AS (
            -- The rebuild filling beside the alias (at most one): a batch planned without
            -- knowing of it would not write the rebuild's vectors (see the docstring).
            SELECT (SELECT target_index FROM mem_vector_rebuilds
                    WHERE alias = :alias AND state = 'filling') AS target_index
        ), i AS (
            SELECT * FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r(
                n int, job_id text, owner text, asset_id text, vault text, object_id text,
                project_id text, folder_id text, representation text, model text,
                mime_type text, source_kind text, created_at timestamptz, vector_id text,
                bits text, usage jsonb, usage_id text, usage_source text, total_tokens int,
                prompt_tokens int, image_tokens int, request_id text, provenance_id text,
                operation text, actor text, detail jsonb)
        ), done AS (
            UPDATE mem_asset_embedding_jobs AS j SET
                status = 'done', usage = i.usage, last_error_code = NULL, last_error = NULL,
                completed_at = now(), lease_owner = NULL, lease_until = NULL,
                updated_at = now()
            FROM i
            WHERE j.id = i.job_id AND j.owner_identity = i.owner
              AND j.lease_owner = :worker AND j.status = 'running'
              AND (SELECT index_name FROM alias) = :index
              AND (SELECT target_index FROM filling) IS NOT DISTINCT FROM CAST(:filling AS text)
            RETURNING j.id
        ), written AS (
            SELECT DISTINCT ON (i.vector_id) i.* FROM i JOIN done ON done.id = i.job_id
            ORDER BY i.vector_id, i.n DESC
        ), vectors AS (
            INSERT INTO {index.name} (id, asset_id, object_id, owner_identity, vault,
                project_id, folder_id, representation, model, dimensions, mime_type,
                source_kind, created_at, embedding, embedding_bits)
            SELECT i.vector_id, i.asset_id, i.object_id, i.owner, i.vault, i.project_id,
                   i.folder_id, i.representation, i.model, {d}, i.mime_type, i.source_kind,
                   i.created_at, {vector}, CAST(i.bits AS bit({d}))
            FROM written AS i
            ON CONFLICT (id) DO UPDATE SET embedding = EXCLUDED.embedding,
                embedding_bits = EXCLUDED.embedding_bits,
                project_id = EXCLUDED.project_id, folder_id = EXCLUDED.folder_id,
                object_id = EXCLUDED.object_id, mime_type = EXCLUDED.mime_type,
                source_kind = EXCLUDED.source_kind
            -- An id never moves between owners or vaults: refuse rather than re-home.
            WHERE {index.name}.owner_identity = EXCLUDED.owner_identity
              AND {index.name}.vault = EXCLUDED.vault
        ), usage AS (
            INSERT INTO mem_usage_ledger (id, owner_identity, source, model, total_tokens,
                prompt_tokens, image_tokens, asset_id, job_id, request_id)
            SELECT i.usage_id, i.owner, i.usage_source, i.model, i.total_tokens,
                   i.prompt_tokens, i.image_tokens, i.asset_id, i.job_id, i.request_id
            FROM i JOIN done ON done.id = i.job_id
        ), provenance AS (
            -- Who wrote which vector with what, committed with the vectors themselves.
            INSERT INTO mem_provenance (id, operation, actor_identity, owner_identity, vault,
                target_kind, target_id, outcome, detail)
            SELECT i.provenance_id, i.operation, i.actor, i.owner, i.vault, 'asset',
                   i.asset_id, 'succeeded', i.detail
            FROM i JOIN done ON done.id = i.job_id
        ), before_keys AS (
            -- The assets to settle: those with a job completed here.
            SELECT DISTINCT i.owner, i.asset_id FROM i JOIN done ON done.id = i.job_id
        ), before AS (
            SELECT a.id, a.status FROM mem_assets a
            WHERE (a.owner_identity, a.id) IN (SELECT owner, asset_id FROM before_keys)
        ), {
        settle_ctes(
            "SELECT j.id, j.owner_identity, j.asset_id, j.kind, j.representation, "
            "CASE WHEN j.id IN (SELECT id FROM done) THEN 'done' ELSE j.status END AS status, "
            "CASE WHEN j.id IN (SELECT id FROM done) THEN NULL "
            "ELSE j.last_error_code END AS last_error_code, "
            "CASE WHEN j.id IN (SELECT id FROM done) THEN NULL "
            "ELSE j.last_error END AS last_error, j.created_at "
            "FROM mem_asset_embedding_jobs j "
            "WHERE (j.owner_identity, j.asset_id) IN (SELECT owner, asset_id FROM before_keys)"
        )
    }, notified AS (
            SELECT pg_notify(:channel, changed.id) AS sent, changed.id, changed.status,
                   changed.source_kind, before.status AS was
            FROM changed JOIN before ON before.id = changed.id
        )
        SELECT (SELECT index_name FROM alias),
               ARRAY(SELECT id FROM done),
               (SELECT target_index FROM filling),
               (SELECT json_agg(json_build_array(id, status, source_kind, was))
                FROM notified),
               -- For the near-duplicate pair search that follows in this transaction: its
               -- settings, and its lock of each vault a visual vector was written in.
               {PAIR_SEARCH_SETTINGS},
               {pair_search_locks(_VISUAL_WRITTEN)}
    """
    row = (
        await session.execute(
            text(statement),
            {
                "alias": alias,
                "rows": json.dumps(rows),
                "flat": flat,
                "worker": lease_owner,
                "index": index.name,
                "filling": filling,
                "channel": ASSET_STATE_CHANNEL,
                "integrity": list(INTEGRITY_CODES),
            },
        )
    ).one()
    target, done, rebuild, changes = row[:4]
    if isinstance(changes, str):
        changes = json.loads(changes)
    settled = tuple(
        AssetSettled(asset_id=c[0], status=c[1], source_kind=c[2])
        for c in changes or ()
        if c[1] != c[3] and c[1] in ("ready", "failed")
    )
    return Completed(
        alias_target=None if target is None else str(target),
        filling=None if rebuild is None else str(rebuild),
        done=frozenset(str(j) for j in done or ()),
        settled=settled,
    )


__all__ = ["Completed", "FinishedJob", "complete_embeddings"]
