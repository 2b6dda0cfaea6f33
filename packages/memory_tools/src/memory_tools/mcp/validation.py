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


class InvalidInputMiddleware(Middleware):
    """Report schema violations as ``invalid_input: ...`` like every other refusal."""

    def __init__(self) -> None:
        # The argument names of each tool found, by name. A tool's parameters are fixed once
        # its server is built (the per-server ones too), and looking the tool up again on
        # every call (fastmcp's providers, transforms and checks; fastmcp looks it up once
        # more to run it) cost 0.1-0.15 ms of CPU. Only tools found are kept: at most one
        # entry per tool. By name alone: the tools use no versions, per-caller visibility or
        # per-tool auth (a tool hidden from some callers would need the key to say so).
        self._fields: dict[str, frozenset[str]] = {}

    async def _tool_fields(self, context: MiddlewareContext[Any]) -> frozenset[str]:
        """The argument names of the called tool, for suggestions (empty: not found)."""
        name = context.message.name
        known = self._fields.get(name)
        if known is not None or context.fastmcp_context is None:
            return known or frozenset()
        tool = await context.fastmcp_context.fastmcp.get_tool(name)
        if tool is None:
            return frozenset()
        known = self._fields[name] = frozenset(tool.parameters.get("properties", {}))
        return known

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
        known = await self._tool_fields(context)
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
