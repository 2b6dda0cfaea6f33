"""The oldest PostgreSQL and pgvector the schema supports, checked before any migration runs."""

from __future__ import annotations

import pytest

from memory_db.migrate import MIN_PGVECTOR, MIN_POSTGRES, unsupported, version_tuple


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.8.0", (0, 8, 0)),
        ("0.8.6", (0, 8, 6)),
        ("0.10.1", (0, 10, 1)),
        ("18.6 (Debian)", (18, 6)),
    ],
)
def test_version_strings_compare_as_numbers(text: str, expected: tuple[int, ...]) -> None:
    assert version_tuple(text) == expected
    assert (version_tuple("0.10.0") > MIN_PGVECTOR) and MIN_POSTGRES == (15,)


@pytest.mark.parametrize(
    ("postgres_num", "pgvector", "refused"),
    [
        (180006, "0.8.6", None),  # the embedded default
        (150000, "0.8.0", None),  # the oldest supported pair
        (170002, "0.10.0", None),
        (140012, "0.8.0", "PostgreSQL 14 is not supported"),
        (130020, "0.8.0", "PostgreSQL 13 is not supported"),
        (180006, "0.7.4", "pgvector 0.7.4 is too old; 0.8.0 or newer"),
        (160004, None, "the vector extension (pgvector 0.8.0 or newer) is not available"),
    ],
)
def test_servers_older_than_the_schema_needs_are_refused(
    postgres_num: int, pgvector: str | None, refused: str | None
) -> None:
    reason = unsupported(postgres_num, pgvector)
    if refused is None:
        assert reason is None
    else:
        assert reason is not None and reason.startswith(refused)
