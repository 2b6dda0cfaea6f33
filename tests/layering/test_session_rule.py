"""The session stays behind the unit of work: ``scripts/check_layering.py`` refuses reading it.

Above memory_db, no code reads a ``session`` attribute (``uow.session``, ``uow._session``) or
uses ``session_of``: every statement goes through a repository method. memory_db itself, and
the tests, may.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .test_import_rules import _tree, check


@pytest.mark.parametrize(
    ("source", "what"),
    [
        ("async def f(uow):\n    await uow.session.execute(1)\n", "reads .session"),
        ("def f(uow):\n    return uow._session\n", "reads ._session"),
        (
            "async def f(uow):\n    async with uow.session.begin_nested():\n        pass\n",
            "reads .session",
        ),
        ("from memory_db.unit_of_work import session_of\n", "imports session_of"),
        (
            "import memory_db.unit_of_work as u\n\ndef f(uow):\n    return u.session_of(uow)\n",
            "uses session_of",
        ),
    ],
    ids=["attribute", "private-attribute", "begin-nested", "import-helper", "helper-by-module"],
)
@pytest.mark.parametrize(
    "where",
    [
        # A module of memory_tools sits in a room (the rooms rule refuses one in none).
        "packages/memory_tools/src/memory_tools/workflows",
        "packages/scraper_mcp/src/scraper_mcp",
        "apps/memory_server/src/memory_server",
    ],
)
def test_the_session_read_above_memory_db_is_refused(
    tmp_path: Path, source: str, what: str, where: str
) -> None:
    found = check.violations(_tree(tmp_path, source, where))
    assert len(found) == 1, found
    assert found[0].startswith(f"{where}/module.py:")
    assert what in found[0]
    assert "the session stays behind the unit of work" in found[0]


@pytest.mark.parametrize(
    "source",
    [
        # A method named ``session`` on another object (the OCR engine pool's).
        "def f(engines, deadline):\n    with engines.session(deadline) as child:\n"
        "        return child\n",
        # The repositories the unit of work holds.
        "async def f(uow):\n    return await uow.vector_indexes.resolve_alias()\n",
        "async def f(uow):\n    async with uow.savepoint():\n        pass\n",
        # An MCP request context's session: the SDK's peer of the client, no database.
        "async def f(ctx, note):\n    await ctx.session.send_notification(note)\n",
    ],
    ids=["method-call", "repository", "savepoint", "mcp-request-context"],
)
def test_the_unit_of_works_methods_are_allowed(tmp_path: Path, source: str) -> None:
    assert check.violations(_tree(tmp_path, source)) == []


def test_memory_db_reads_its_own_session(tmp_path: Path) -> None:
    source = (
        "from memory_db.unit_of_work import session_of\n\ndef f(uow):\n    return uow._session\n"
    )
    assert check.violations(_tree(tmp_path, source, "packages/memory_db/src/memory_db")) == []
