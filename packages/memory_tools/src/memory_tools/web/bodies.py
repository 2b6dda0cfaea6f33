"""A small JSON request body, read bounded and parsed strictly: the upload routes' bodies.

Shared by the web app's upload endpoints (:mod:`memory_tools.web.uploads`) and the bearer
upload routes that serving composes (:mod:`memory_tools.serving.upload_routes`): both read the
body before the call takes its turn and refuse it the same way.
"""

from __future__ import annotations

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


__all__ = ["MAX_BODY", "parse_body", "read_body"]
