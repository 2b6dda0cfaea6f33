"""Rebuilds in progress (``mem_vector_rebuilds``) and the checks made before a switch.

A rebuild fills ``target_index`` beside the index its alias points at. While it is
``filling``, every writer of the alias's index also writes the target (the worker embeds new
saves into both; deletes and moves reach it as a mirror, see ``VectorIndex.open_alias``). The
walk over existing assets commits its ``cursor`` (the last asset id done) with each batch:
that is where a crashed run resumes. ``switched`` rows stay as the record of the switch; the
source of the current index's switched rebuild is kept in step for deletes and moves until it
is dropped, so switching back is possible.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from memory_db.errors import Conflict, NotFound
from memory_db.repositories.records import VaultScope
from memory_db.vectors.ddl import check_identifier

# The cursor of a rebuild whose walk has finished (sorts after every asset id).
WALK_DONE = "~"

_COLUMNS = (
    "target_index, source_index, alias, state, cursor, embedded, skipped, started_at, "
    "updated_at, switched_at"
)


@dataclass(frozen=True, slots=True)
class Rebuild:
    """One row of ``mem_vector_rebuilds``."""

    target_index: str
    source_index: str
    alias: str
    state: str
    cursor: str | None
    embedded: int
    skipped: int
    started_at: datetime
    updated_at: datetime
    switched_at: datetime | None

    @property
    def walked(self) -> bool:
        """Whether the walk over existing assets has finished."""
        return self.cursor == WALK_DONE


@dataclass(frozen=True, slots=True)
class SampledVector:
    """A stored vector used as a query when measuring recall, with the scope it lives in."""

    scope: VaultScope
    model: str
    embedding: list[float]


def _rebuild(row: Sequence[object]) -> Rebuild:
    return Rebuild(*row)  # type: ignore[arg-type]


async def get_rebuild(session: AsyncSession, target: str, *, lock: bool = False) -> Rebuild | None:
    """The rebuild into ``target`` (locked ``FOR UPDATE`` with ``lock``), or ``None``."""
    row = (
        await session.execute(
            text(
                f"SELECT {_COLUMNS} FROM mem_vector_rebuilds WHERE target_index = :t"
                + (" FOR UPDATE" if lock else "")
            ),
            {"t": target},
        )
    ).one_or_none()
    return None if row is None else _rebuild(tuple(row))


async def filling_rebuild(session: AsyncSession, alias: str) -> Rebuild | None:
    """The rebuild in progress for ``alias``, if any (at most one)."""
    row = (
        await session.execute(
            text(
                f"SELECT {_COLUMNS} FROM mem_vector_rebuilds WHERE alias = :a AND state = 'filling'"
            ),
            {"a": alias},
        )
    ).one_or_none()
    return None if row is None else _rebuild(tuple(row))


async def start_rebuild(
    session: AsyncSession, *, alias: str, target: str, source: str, cursor: str | None = None
) -> Rebuild:
    """Record a rebuild into ``target`` (``Conflict`` if another one fills for ``alias``).

    A row left by an earlier rebuild into ``target`` (a switch back) starts again.
    """
    check_identifier(target)
    try:
        async with session.begin_nested():
            await session.execute(
                text(
                    "INSERT INTO mem_vector_rebuilds (target_index, source_index, alias, cursor) "
                    "VALUES (:t, :s, :a, :c) ON CONFLICT (target_index) DO UPDATE SET "
                    "source_index = EXCLUDED.source_index, alias = EXCLUDED.alias, "
                    "state = 'filling', cursor = EXCLUDED.cursor, embedded = 0, skipped = 0, "
                    "started_at = now(), updated_at = now(), switched_at = NULL"
                ),
                {"t": target, "s": source, "a": alias, "c": cursor},
            )
    except IntegrityError:
        other = await filling_rebuild(session, alias)
        raise Conflict(
            f"a rebuild of {alias} into {other.target_index if other else 'another index'} "
            "is in progress; finish or abandon it first"
        ) from None
    started = await get_rebuild(session, target)
    if started is None:  # removed between our insert and this read: someone abandoned it
        raise Conflict(f"the rebuild into {target} was abandoned while it started")
    return started


async def advance_rebuild(
    session: AsyncSession, target: str, *, cursor: str | None, embedded: int, skipped: int
) -> None:
    """Commit the walk's progress (with the batch's vectors: the resume point).

    ``cursor`` ``None`` keeps the cursor (a catch-up batch after the walk).
    """
    await session.execute(
        text(
            "UPDATE mem_vector_rebuilds SET cursor = COALESCE(:c, cursor), "
            "embedded = embedded + :e, "
            "skipped = skipped + :k, updated_at = now() "
            "WHERE target_index = :t AND state = 'filling'"
        ),
        {"t": target, "c": cursor, "e": embedded, "k": skipped},
    )


async def mark_switched(session: AsyncSession, target: str) -> None:
    """The alias now points at ``target``: the rebuild is done."""
    await session.execute(
        text(
            "UPDATE mem_vector_rebuilds SET state = 'switched', switched_at = now(), "
            "updated_at = now() WHERE target_index = :t"
        ),
        {"t": target},
    )


async def abandon_rebuild(session: AsyncSession, target: str) -> bool:
    """Forget a rebuild in progress (its table stays until dropped); whether there was one."""
    result = await session.execute(
        text("DELETE FROM mem_vector_rebuilds WHERE target_index = :t AND state = 'filling'"),
        {"t": target},
    )
    return bool(getattr(result, "rowcount", 0))


async def lock_alias(session: AsyncSession, alias: str) -> str:
    """Lock an alias row until the commit (writers of its index wait); its current target."""
    name = await session.scalar(
        text("SELECT index_name FROM mem_vector_index_aliases WHERE alias = :a FOR UPDATE"),
        {"a": alias},
    )
    if name is None:
        raise NotFound("vector index alias", alias)
    return str(name)


async def count_assets(session: AsyncSession, index: str) -> int:
    """How many distinct assets have a vector in ``index``."""
    check_identifier(index)
    value = await session.scalar(text(f"SELECT count(DISTINCT asset_id) FROM {index}"))
    return int(value or 0)


async def missing_assets(
    session: AsyncSession, source: str, target: str, *, after: str | None, limit: int
) -> list[tuple[str, str]]:
    """``(owner, asset_id)`` of assets with a vector in ``source`` and none in ``target``.

    In asset id order after ``after``, at most ``limit``: the pages of a verification. Assets
    whose object is quarantined (reconciliation found its bytes missing or changed) are left
    out: a rebuild cannot embed them, and waiting for them would block the switch until the
    bytes are restored. Lifting the quarantine later re-queues their embedding (reconciliation's
    ``missing_vector`` check) into whichever index is active then.
    """
    check_identifier(source)
    check_identifier(target)
    rows = await session.execute(
        text(
            f"SELECT DISTINCT s.owner_identity, s.asset_id FROM {source} s "
            "WHERE s.asset_id > :after AND NOT EXISTS "
            f"(SELECT 1 FROM {target} t WHERE t.asset_id = s.asset_id) "
            "AND NOT EXISTS (SELECT 1 FROM mem_assets a JOIN mem_asset_objects o "
            "ON o.owner_identity = a.owner_identity AND o.id = a.object_id "
            "WHERE a.owner_identity = s.owner_identity AND a.id = s.asset_id "
            "AND o.status = 'quarantined') "
            "ORDER BY s.asset_id LIMIT :n"
        ),
        {"after": after or "", "n": limit},
    )
    return [(str(r[0]), str(r[1])) for r in rows]


async def sample_vectors(session: AsyncSession, index: str, size: int) -> list[SampledVector]:
    """About ``size`` stored vectors from a random point of the id order (wrapping around)."""
    check_identifier(index)
    start = secrets.token_hex(32)
    sampled: list[SampledVector] = []
    for condition in ("id >= :start", "id < :start"):
        if len(sampled) >= size:
            break
        rows = await session.execute(
            text(
                "SELECT owner_identity, vault, model, CAST(CAST(embedding AS vector) AS real[]) "
                f"FROM {index} WHERE {condition} ORDER BY id LIMIT :n"
            ),
            {"start": start, "n": size - len(sampled)},
        )
        sampled.extend(
            SampledVector(VaultScope(str(r[0]), str(r[1])), str(r[2]), [float(x) for x in r[3]])
            for r in rows
        )
    return sampled
