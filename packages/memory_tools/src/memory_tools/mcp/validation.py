"""Turn argument-validation failures into ``invalid_input`` tool errors with a readable message."""

from __future__ import annotations

from typing import Any

from fastmcp.exceptions import ToolError, ValidationError
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from pydantic import ValidationError as PydanticValidationError

_MESSAGES = {
    "unexpected_keyword_argument": "is not a known field",
    "missing_argument": "is required",
    "missing": "is required",
}


def describe(error: PydanticValidationError) -> str:
    """``field: problem; field: problem`` without echoing the submitted values."""
    parts: list[str] = []
    for item in error.errors(include_input=False, include_url=False):
        field = ".".join(str(p) for p in item["loc"]) or "arguments"
        message = _MESSAGES.get(item["type"], str(item["msg"]))
        parts.append(f"{field}: {message}")
    return "; ".join(parts)


class InvalidInputMiddleware(Middleware):
    """Report schema violations as ``invalid_input: ...`` like every other refusal."""

    async def on_call_tool(
        self, context: MiddlewareContext[Any], call_next: CallNext[Any, Any]
    ) -> Any:
        """Re-raise argument validation errors as stable-coded tool errors."""
        try:
            return await call_next(context)
        except ValidationError as exc:
            cause = exc.__cause__
            detail = (
                describe(cause)
                if isinstance(cause, PydanticValidationError)
                else "invalid arguments"
            )
            raise ToolError(f"invalid_input: {detail}") from None
        except PydanticValidationError as exc:
            raise ToolError(f"invalid_input: {describe(exc)}") from None
