"""Turn argument-validation failures into ``invalid_input`` tool errors with a readable message."""

from __future__ import annotations

import logging
from typing import Any

from fastmcp.exceptions import ToolError, ValidationError
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from pydantic import ValidationError as PydanticValidationError

from memory_tools.errors import InvalidInputFailure
from memory_tools.text import refuse_nul_anywhere
from memory_tools.wire import describe, unknown_field


async def _tool_fields(context: MiddlewareContext[Any]) -> frozenset[str]:
    """The argument names of the called tool, for suggestions."""
    if context.fastmcp_context is None:
        return frozenset()
    tool = await context.fastmcp_context.fastmcp.get_tool(context.message.name)
    if tool is None:
        return frozenset()
    return frozenset(tool.parameters.get("properties", {}))


class InvalidInputMiddleware(Middleware):
    """Report schema violations as ``invalid_input: ...`` like every other refusal."""

    async def on_call_tool(
        self, context: MiddlewareContext[Any], call_next: CallNext[Any, Any]
    ) -> Any:
        """Refuse NUL anywhere and unknown fields; re-raise validation errors as tool errors.

        Unknown fields are refused here, before the tool runs, so every tool answers them
        alike: a tool with an advertised-per-server parameter (``registry.Advertised``) is a
        fastmcp transform whose forwarding refuses them with a bare ``TypeError``.
        """
        arguments = context.message.arguments or {}
        try:
            refuse_nul_anywhere(arguments)
        except InvalidInputFailure as failure:
            raise ToolError(str(failure), log_level=logging.DEBUG) from None
        known = await _tool_fields(context)
        unknown = [name for name in arguments if known and name not in known]
        if unknown:
            detail = "; ".join(f"{name}: {unknown_field(name, known)}" for name in unknown)
            raise ToolError(f"invalid_input: {detail}", log_level=logging.DEBUG)
        try:
            return await call_next(context)
        except ValidationError as exc:
            cause = exc.__cause__
            detail = (
                describe(cause, known)
                if isinstance(cause, PydanticValidationError)
                else "invalid arguments"
            )
            raise ToolError(f"invalid_input: {detail}", log_level=logging.DEBUG) from None
        except PydanticValidationError as exc:
            detail = describe(exc, known)
            raise ToolError(f"invalid_input: {detail}", log_level=logging.DEBUG) from None
