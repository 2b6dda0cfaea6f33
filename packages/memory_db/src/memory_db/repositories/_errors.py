"""Translation of database integrity errors into memory-db errors."""

from __future__ import annotations

from sqlalchemy.exc import DBAPIError


def constraint_name(exc: DBAPIError) -> str | None:
    """The name of the constraint an asyncpg error reports, if any."""
    cause = exc.orig.__cause__ if exc.orig is not None else None
    return getattr(cause, "constraint_name", None) or getattr(exc.orig, "constraint_name", None)


def sqlstate(exc: DBAPIError) -> str | None:
    """The SQLSTATE of the underlying asyncpg error."""
    cause = exc.orig.__cause__ if exc.orig is not None else None
    return getattr(cause, "sqlstate", None) or getattr(exc.orig, "sqlstate", None)
