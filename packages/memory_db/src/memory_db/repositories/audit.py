"""Provenance and provider usage ledgers, append-only (docs/design.md#ledgers)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NotRequired, TypedDict, Unpack

from sqlalchemy import ColumnElement, Insert, insert, select

from memory_db.ids import new_id
from memory_db.repositories._base import SessionRepository, record_from_row
from memory_db.repositories.records import ProvenanceRecord, VaultScope
from memory_db.schema import (
    PROVENANCE_OPERATIONS,
    PROVENANCE_OUTCOMES,
    USAGE_SOURCES,
    ProvenanceEvent,
    UsageLedgerEntry,
)


class ProvenanceRepository(SessionRepository):
    """Who did what to which target, and the outcome. Details must hold no secrets."""

    async def record(
        self,
        operation: str,
        *,
        actor_identity: str,
        outcome: str = "succeeded",
        owner_identity: str | None = None,
        vault: str | None = None,
        target_kind: str | None = None,
        target_id: str | None = None,
        detail: dict[str, Any] | None = None,
    ) -> str:
        """Append one event and return its id."""
        if operation not in PROVENANCE_OPERATIONS:
            raise ValueError(f"unknown provenance operation {operation!r}")
        if outcome not in PROVENANCE_OUTCOMES:
            raise ValueError(f"unknown provenance outcome {outcome!r}")
        event_id = new_id("apv")
        self._session.add(
            ProvenanceEvent(
                id=event_id,
                operation=operation,
                actor_identity=actor_identity,
                owner_identity=owner_identity,
                vault=vault,
                target_kind=target_kind,
                target_id=target_id,
                outcome=outcome,
                detail=detail or {},
            )
        )
        await self._session.flush()
        return event_id

    async def record_in_vault(
        self,
        operation: str,
        scope: VaultScope,
        target_kind: str,
        target_id: str,
        *,
        actor_identity: str,
        detail: dict[str, Any] | None = None,
    ) -> str:
        """:meth:`record` a succeeded event about one target of one vault.

        The target is an asset, a folder, a project or the vault itself; the scope names the
        owner and vault the event is filed under.
        """
        return await self.record(
            operation,
            actor_identity=actor_identity,
            owner_identity=scope.owner_identity,
            vault=scope.physical_vault,
            target_kind=target_kind,
            target_id=target_id,
            detail=detail,
        )

    async def record_many(self, events: Sequence[dict[str, Any]]) -> None:
        """Append several succeeded events in one statement (the worker's batches).

        Each event has the keyword arguments of :meth:`record` (``operation``,
        ``actor_identity``, ``owner_identity``, ``vault``, ``target_kind``, ``target_id``,
        ``detail``).
        """
        rows: list[dict[str, Any]] = []
        for event in events:
            if event["operation"] not in PROVENANCE_OPERATIONS:
                raise ValueError(f"unknown provenance operation {event['operation']!r}")
            rows.append({"id": new_id("apv"), "outcome": "succeeded", "detail": {}, **event})
        if rows:
            await self._session.execute(insert(ProvenanceEvent), rows)

    async def for_target(
        self, target_kind: str, target_id: str, *, limit: int = 100
    ) -> list[ProvenanceRecord]:
        """The events about one target, oldest first (a job's timeline on the Jobs page)."""
        rows = await self._session.scalars(
            select(ProvenanceEvent)
            .where(
                ProvenanceEvent.target_id == target_id,
                ProvenanceEvent.target_kind == target_kind,
            )
            .order_by(ProvenanceEvent.created_at, ProvenanceEvent.id)
            .limit(limit)
        )
        return [record_from_row(ProvenanceRecord, row, detail=dict(row.detail)) for row in rows]


def provenance_entry(
    operation: str,
    *,
    actor_identity: str | ColumnElement[Any],
    detail: ColumnElement[Any],
    event_id: str | ColumnElement[Any] | None = None,
) -> Insert:
    """One succeeded event as an INSERT a caller's statement runs (a search's, as a CTE).

    ``detail`` is SQL: part of it may be computed by that statement (how many results). The
    actor and the id may be SQL too (a search's named parameters: its statement is built once
    and run with each search's values).
    """
    if operation not in PROVENANCE_OPERATIONS:
        raise ValueError(f"unknown provenance operation {operation!r}")
    return insert(ProvenanceEvent).values(
        id=new_id("apv") if event_id is None else event_id,
        operation=operation,
        actor_identity=actor_identity,
        outcome="succeeded",
        detail=detail,
    )


class UsageFields(TypedDict):
    """One usage entry's columns, as ``usage_entry`` and ``UsageRepository.record`` take them."""

    owner_identity: str
    source: str
    model: str
    total_tokens: int
    prompt_tokens: NotRequired[int]
    image_tokens: NotRequired[int]
    request_id: NotRequired[str | None]
    asset_id: NotRequired[str | None]
    job_id: NotRequired[str | None]


def _check_source(source: str) -> None:
    if source not in USAGE_SOURCES:
        raise ValueError(f"unknown usage source {source!r}")


def usage_entry(*, entry_id: str | None = None, **fields: Unpack[UsageFields]) -> Insert:
    """One usage entry as an INSERT (run alone, or by a caller's statement: a search's CTE).

    Token counts left out are 0 (the columns' default); ids left out are null.
    """
    _check_source(fields["source"])
    return insert(UsageLedgerEntry).values(id=entry_id or new_id("aul"), **fields)


def usage_entry_of(source: str, **columns: ColumnElement[Any]) -> Insert:
    """:func:`usage_entry` with its columns (the id too) as SQL, ``source`` a known one.

    For a statement built once and run with each call's values as named parameters (a
    search's ranking statement).
    """
    _check_source(source)
    return insert(UsageLedgerEntry).values(source=source, **columns)


class UsageRepository(SessionRepository):
    """Metered provider usage; pricing is derived elsewhere from a rate table."""

    async def record(self, **fields: Unpack[UsageFields]) -> str:
        """Append one usage entry and return its id."""
        entry_id = new_id("aul")
        await self._session.execute(usage_entry(entry_id=entry_id, **fields))
        return entry_id

    async def record_many(self, entries: Sequence[dict[str, Any]]) -> None:
        """Append several entries in one statement (the worker's batches)."""
        rows = []
        for entry in entries:
            _check_source(entry["source"])
            rows.append({"id": new_id("aul"), **entry})
        if rows:
            await self._session.execute(insert(UsageLedgerEntry), rows)
