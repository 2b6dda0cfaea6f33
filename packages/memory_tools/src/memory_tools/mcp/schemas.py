"""Tool parameter types shared by several tools.

Every output shape is the workflow's own result model (:mod:`memory_tools.wire`).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated

from pydantic import BeforeValidator, Field
from pydantic_core import PydanticCustomError

# Extended ISO 8601 as RFC 3339 writes it: a date, a time (seconds and fraction optional) and a
# zone. Nothing looser: a bare "0" or 1700000000 would otherwise be read as a Unix time.
_INSTANT = re.compile(
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(?P<zone>Z|[+-]\d{2}(:?\d{2})?)?"
)
_INSTANT_EXAMPLE = "e.g. 2026-11-30T12:00:00Z or 2026-11-30T13:00:00+01:00"


def iso_instant(value: object) -> object:
    """An instant from an ISO 8601 string with a date, a time and a zone; nothing else.

    ``None`` and ``datetime`` (Python callers) pass through; numbers, dates alone, times
    without a zone and other strings are refused with a message that says what to send.
    """
    if value is None or isinstance(value, datetime):
        return value
    if not isinstance(value, str):
        raise PydanticCustomError(
            "iso_instant_type",
            "give an ISO 8601 string with a date, a time and a zone "
            f"({_INSTANT_EXAMPLE}); numbers are not read as Unix times",
        )
    match = _INSTANT.fullmatch(value.strip())
    if match is not None and match["zone"] is None:
        raise PydanticCustomError("iso_instant_zone", f"give a time zone ({_INSTANT_EXAMPLE})")
    try:
        if match is None:
            raise ValueError(value)
        return datetime.fromisoformat(value.strip())
    except ValueError:
        raise PydanticCustomError(
            "iso_instant",
            f"not an ISO 8601 instant: give a date, a time and a zone ({_INSTANT_EXAMPLE})",
        ) from None


CreatedAfterParam = Annotated[
    datetime | None,
    BeforeValidator(iso_instant),
    Field(
        description="Created at or after this instant (inclusive). ISO 8601 with a date, a time "
        "and a zone, e.g. 2026-11-30T12:00:00Z or 2026-11-30T13:00:00+01:00; a value without "
        "a zone is refused."
    ),
]
CreatedBeforeParam = Annotated[
    datetime | None,
    BeforeValidator(iso_instant),
    Field(
        description="Created before this instant (exclusive). ISO 8601 with a date, a time and "
        "a zone, e.g. 2026-12-01T00:00:00Z; a value without a zone is refused."
    ),
]
