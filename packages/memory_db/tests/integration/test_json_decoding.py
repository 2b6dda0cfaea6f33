"""json and jsonb values come back decoded by pydantic-core's parser, as json.loads would."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic_core import from_json
from sqlalchemy import text

from memory_db import database as database_module
from memory_db.database import create_engine

# Values that differ between careless parsers: big integers, a float at the edge of its
# precision, an escaped astral and accented character, nesting, a key given twice (last one wins).
DOCUMENT = (
    '{"big": 123456789012345678901234567890, "float": 0.30000000000000004, '
    '"text": "\\ud83d\\ude00 \\u00e9", "nested": [{"a": [1, 2.5, null, true]}], "k": 1, "k": 2}'
)


async def test_json_and_jsonb_are_decoded_by_pydantic_core_as_json_loads_would(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    decoded: list[str] = []

    def counting(value: Any) -> Any:
        decoded.append(value)
        return from_json(value)

    monkeypatch.setattr(database_module, "from_json", counting)
    engine = create_engine(database_url, pool_size=1)
    try:
        async with engine.connect() as connection:
            row = (
                await connection.execute(
                    text("SELECT CAST(:d AS json), CAST(:d AS jsonb)"), {"d": DOCUMENT}
                )
            ).one()
    finally:
        await engine.dispose()
    assert len(decoded) == 2  # before: the standard library decoded both, nothing came here
    assert row[0] == json.loads(DOCUMENT)
    assert row[1] == json.loads(DOCUMENT.replace('"k": 1, ', ""))  # jsonb keeps the last key
