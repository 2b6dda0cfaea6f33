"""What the session-bound repositories share: the session they run in, and the joins they repeat.

A repository never commits, opens or closes its session: the unit of work that made it does
(``memory_db.unit_of_work``), so every repository of one unit of work sees the same transaction.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import fields
from functools import cache
from typing import Any, ClassVar, Protocol, TypeVar

import anyio
from sqlalchemy import ColumnElement, Executable, Result, and_
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from memory_db.errors import MemoryDbError
from memory_db.logs import get_logger
from memory_db.repositories._errors import constraint_name, sqlstate
from memory_db.schema import Asset, AssetObject

log = get_logger(__name__)

# PostgreSQL's deadlock_detected: it aborted this statement to break a cycle of lock waits.
_DEADLOCK = "40P01"
# Runs of one autocommitted statement that PostgreSQL keeps aborting to break deadlocks.
STATEMENT_ATTEMPTS = 3


class DataclassInstance(Protocol):
    """Any dataclass instance: what ``dataclasses.fields`` takes.

    Spelled here because typeshed's own (``_typeshed``) exists only for type checkers, and the
    isolated-package check (``scripts/check_imports.py``) resolves every import, even those
    under ``TYPE_CHECKING``.
    """

    __dataclass_fields__: ClassVar[dict[str, Any]]


RecordT = TypeVar("RecordT", bound=DataclassInstance)


async def execute_alone(
    session: AsyncSession, statement: Executable, params: Mapping[str, Any] | None = None
) -> Result[Any]:
    """Run ``statement``; when it is its own transaction, run it again after a deadlock.

    For the single statements that lock an owner's counters in a CTE and then update them
    (a save's hold and commit, ``LOCK_WITH_RESERVATION``). When the lock had to wait for
    another save, it locks the row's newest version, while the update still reaches the row
    through the version the statement's snapshot sees and queues for that version's tuple
    lock. A third save queued there first, waiting for this one, closes a cycle, and
    PostgreSQL aborts one of them: two ``internal`` errors in about 33,000 calls of
    ``benchmarks/load.py --full`` (64 clients). Splitting the lock and the update into two
    statements of a transaction would avoid it at two more round trips per save; PostgreSQL's
    documented remedy, running the transaction again, costs nothing until it happens.
    Autocommitted, the statement was the whole transaction and nothing of it remains, so it
    runs again, up to ``STATEMENT_ATTEMPTS`` times, a few milliseconds apart. Inside a
    transaction of several statements it runs once: that transaction is aborted, and only its
    caller can start it again.
    """
    options = (await session.connection()).sync_connection.get_execution_options()  # type: ignore[union-attr]
    alone = options.get("isolation_level") == "AUTOCOMMIT"
    attempt = 1
    while True:
        try:
            return await session.execute(statement, params)
        except DBAPIError as exc:
            if not alone or attempt >= STATEMENT_ATTEMPTS or sqlstate(exc) != _DEADLOCK:
                raise
        log.warning("statement_deadlocked_run_again", attempt=attempt)
        attempt += 1
        # Apart in time, so that two statements aborted together do not meet again.
        await anyio.sleep(random.uniform(0.005, 0.05))  # noqa: S311 - a jitter, not a secret


class SessionRepository:
    """A repository bound to the session of one unit of work."""

    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    async def _flush_refusing(
        self, change: Callable[[], None], refusals: Mapping[str, MemoryDbError]
    ) -> None:
        """Apply ``change`` and flush it in a savepoint; the transaction goes on either way.

        A constraint the flush breaks that ``refusals`` names raises its error instead (a
        taken name is a ``Conflict``); any other integrity error is raised as it is.
        """
        try:
            async with self._session.begin_nested():
                change()
                await self._session.flush()
        except IntegrityError as exc:
            refusal = refusals.get(constraint_name(exc) or "")
            if refusal is not None:
                raise refusal from exc
            raise


def asset_object_join() -> ColumnElement[bool]:
    """The join from an asset to its stored object.

    Objects are the owner's, so the owner is part of the key: an asset can only ever reach the
    bytes of its own owner (the composite foreign key holds the same rule in the database).
    """
    return and_(
        AssetObject.id == Asset.object_id,
        AssetObject.owner_identity == Asset.owner_identity,
    )


@cache
def _field_names(record_type: type[DataclassInstance]) -> tuple[str, ...]:
    return tuple(field.name for field in fields(record_type))


def record_from_row(record_type: type[RecordT], row: object, **given: Any) -> RecordT:
    """A record filled from the same-named attributes of an ORM row, except the ``given`` fields.

    Records (``records.py``) name their fields after their table's columns, so the mapping is
    by name. ``given`` holds the fields that are not a plain copy: JSON and array values copied
    out of the row (a record must not share mutable state with the session), a renamed
    column, or a value the row does not hold.
    """
    values = {name: getattr(row, name) for name in _field_names(record_type) if name not in given}
    return record_type(**values, **given)
