"""Caller-facing failures with stable codes.

Hierarchy::

    ToolFailure(code, message)
    ├── Unauthenticated      unauthenticated   no key, unknown key, revoked key
    ├── Forbidden            forbidden         the caller may see the target but not do this
    ├── NotFoundFailure      not_found         absent, or not the caller's to know about
    ├── ConflictFailure      conflict          a name is taken, a state forbids the change
    ├── InvalidInputFailure  invalid_input     a value the caller can correct
    └── FeatureDisabled      feature_disabled  switched off by configuration

``translate`` maps memory-db errors onto these at the workflow boundary.
"""

from __future__ import annotations

from memory_db import Conflict, InvalidInput, MemoryDbError, NotFound

CODES = (
    "unauthenticated",
    "forbidden",
    "not_found",
    "conflict",
    "invalid_input",
    "feature_disabled",
    "internal",
)


class ToolFailure(Exception):
    """A failure the caller can act on; ``code`` is stable, ``message`` is human-readable."""

    code = "internal"

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(f"{self.code}: {message}")


class Unauthenticated(ToolFailure):
    """No valid API key."""

    code = "unauthenticated"


class Forbidden(ToolFailure):
    """The caller lacks a scope or a permission."""

    code = "forbidden"


class NotFoundFailure(ToolFailure):
    """Nothing by that id or name exists for this caller."""

    code = "not_found"


class ConflictFailure(ToolFailure):
    """The change collides with existing state."""

    code = "conflict"


class InvalidInputFailure(ToolFailure):
    """An input value is not acceptable."""

    code = "invalid_input"


class FeatureDisabled(ToolFailure):
    """The feature is switched off by configuration."""

    code = "feature_disabled"


def translate(exc: MemoryDbError) -> ToolFailure:
    """The caller-facing failure for a memory-db error."""
    if isinstance(exc, NotFound):
        return NotFoundFailure(f"{exc.kind} not found")
    if isinstance(exc, Conflict):
        return ConflictFailure(str(exc))
    if isinstance(exc, InvalidInput):
        return InvalidInputFailure(str(exc))
    return ToolFailure("the request could not be completed")
