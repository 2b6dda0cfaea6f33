"""Counting what a block of code sends to the database (tests of round trips and plans)."""

from __future__ import annotations

from collections.abc import Generator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event

from memory_db.unit_of_work import Database


@contextmanager
def statements_sent(database: Database) -> Generator[list[str]]:
    """Every statement ``database``'s engine sends while the block runs, as SQL text."""
    sent: list[str] = []

    def record(*args: Any) -> None:
        sent.append(str(args[2]))

    event.listen(database.engine.sync_engine, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        event.remove(database.engine.sync_engine, "before_cursor_execute", record)
