"""What a request carries, read the same way wherever it is sent.

- A small JSON request body, read bounded and parsed strictly (:func:`read_body`,
  :func:`parse_body`): shared by the web app's upload endpoints
  (:mod:`memory_tools.web.uploads`) and the bearer upload routes that serving composes
  (:mod:`memory_tools.serving.upload_routes`): both read the body before the call takes its
  turn and refuse it the same way.
- A comma-separated field of a form or query (:func:`comma_separated`): the tags typed on the
  asset page, in the bulk actions' Tag field and in the library's and search's filters.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError
from starlette.requests import Request

from memory_tools.errors import InvalidInputFailure
from memory_tools.text import refuse_nul_anywhere
from memory_tools.wire import WireModel, describe

MAX_BODY = 64 * 1024


async def read_body(request: Request) -> bytes:
    """The request body, read before the call takes its turn (a slow sender holds none).

    Read in chunks and refused as soon as it passes ``MAX_BODY``: a huge body is never held.
    """
    too_large = InvalidInputFailure(f"the request body is larger than {MAX_BODY} bytes")
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > MAX_BODY:
        raise too_large
    raw = bytearray()
    async for chunk in request.stream():
        raw.extend(chunk)
        if len(raw) > MAX_BODY:
            raise too_large
    return bytes(raw)


def parse_body(raw: bytes, model: type[WireModel]) -> Any:
    """The body as ``model``: camelCase names only, no coercion, no NUL in any string."""
    try:
        body = model.model_validate_json(raw or b"{}", by_alias=True, by_name=False)
    except ValidationError as exc:
        known = {field.alias or name for name, field in model.model_fields.items()}
        raise InvalidInputFailure(describe(exc, known)) from None
    refuse_nul_anywhere(body.model_dump(by_alias=True))
    return body


def comma_separated(values: Iterable[str]) -> list[str]:
    """The items of one or more comma-separated fields (``beach, 2026``), in the order typed.

    Each value is split at its commas and each item stripped of surrounding spaces; a blank
    item (``a,,b``, a trailing comma, a field left empty) is dropped, and an item typed twice
    is kept once, where first typed. Nothing more is judged here: what a tag may be and how many
    a request may carry is the workflows' to say (``ingest.inputs.canonical_tags`` for an
    image's tags, ``FilterParameters`` for a filter), so a form meets the limits a tool does.
    """
    # A dict keeps the order typed and finds a repeat in constant time: a list's ``in`` made a
    # 64 KiB field of distinct items cost seconds of the event loop (quadratic).
    items = dict.fromkeys(
        item for value in values for part in value.split(",") if (item := part.strip())
    )
    return list(items)


__all__ = ["MAX_BODY", "comma_separated", "parse_body", "read_body"]
