"""Caller-facing failures with stable codes.

Hierarchy::

    ToolFailure(code, message)
    ├── Unauthenticated      unauthenticated   no key, unknown key, revoked key
    ├── Forbidden            forbidden         the caller may see the target but not do this
    ├── NotFoundFailure      not_found         absent, or not the caller's to know about
    ├── ConflictFailure      conflict          a name is taken, a state forbids the change
    ├── InvalidInputFailure  invalid_input     a value the caller can correct
    ├── FeatureDisabled      feature_disabled  switched off by configuration
    ├── UnsafeUrl            unsafe_url        a URL, redirect or response the fetch policy refuses
    ├── FetchFailed          fetch_failed      a public source answered with an error or not at all
    ├── NotHtml              not_html          a page fetched for its images is not an HTML page
    ├── InvalidImage         invalid_image     bytes that are not an acceptable image
    ├── QuotaExceeded        quota_exceeded    the owner's storage quota would be exceeded
    ├── Unavailable          unavailable       the database cannot be reached now; retry shortly
    ├── Busy                 busy              the server is saturated now; retry shortly
    ├── EmbeddingUnavailable embedding_unavailable  the embedding provider cannot answer now
    └── EmbeddingFailed      embedding_failed  the embedding provider refused the query

``CODES`` lists every code, ``internal`` (the root's) last; the server instructions name them
all (tests/unit/test_error_codes.py checks both against every subclass).

``translate`` maps memory-db errors onto these at the workflow boundary; ``map_failures`` is the
one boundary every entry point (MCP tools, HTTP routes) wraps around a workflow call.
"""

from __future__ import annotations

from collections.abc import Generator
from contextlib import contextmanager

from memory_db import (
    Conflict,
    DatabaseUnavailable,
    InvalidInput,
    MemoryDbError,
    NotFound,
    get_logger,
)
from memory_db.database import is_connection_failure, is_unstorable_text

log = get_logger(__name__)

CODES = (
    "unauthenticated",
    "forbidden",
    "not_found",
    "conflict",
    "invalid_input",
    "feature_disabled",
    "unsafe_url",
    "fetch_failed",
    "not_html",
    "invalid_image",
    "quota_exceeded",
    "unavailable",
    "busy",
    "embedding_unavailable",
    "embedding_failed",
    "internal",
)


# Seconds an HTTP client should wait before retrying a retryable refusal (``Retry-After``).
RETRY_AFTER_SECONDS = {"unavailable": 5, "busy": 1}


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


class UnsafeUrl(ToolFailure):
    """The fetch policy refuses the URL, a redirect, the destination or the response."""

    code = "unsafe_url"


class FetchFailed(ToolFailure):
    """A permitted source could not deliver the image (HTTP error, refused connection)."""

    code = "fetch_failed"


class NotHtml(ToolFailure):
    """A page fetched for its images answered with something else (an image, JSON, a PDF)."""

    code = "not_html"


class InvalidImage(ToolFailure):
    """The bytes are not a JPEG, PNG, WebP or GIF image we can safely decode."""

    code = "invalid_image"


class QuotaExceeded(ToolFailure):
    """Saving would take the owner's storage past its quota."""

    code = "quota_exceeded"


class Unavailable(ToolFailure):
    """The database or the object store cannot be reached now; the same call can be retried."""

    code = "unavailable"


class Busy(ToolFailure):
    """The server is saturated: the call waited its turn too long and did nothing; retry it."""

    code = "busy"


class EmbeddingUnavailable(ToolFailure):
    """The embedding provider could not answer now (rate limit, timeout); retry later."""

    code = "embedding_unavailable"


class EmbeddingFailed(ToolFailure):
    """The embedding provider refused the query (retrying will not help)."""

    code = "embedding_failed"


# The HTTP status of a failure answered by a plain route (uploads, the web app), by its code;
# a code not listed is 400, and ``internal`` 500.
HTTP_STATUS = {
    "unauthenticated": 401,
    "forbidden": 403,
    "not_found": 404,
    "conflict": 409,
    "invalid_input": 422,
    "invalid_image": 422,
    "unsafe_url": 422,
    "fetch_failed": 502,
    "quota_exceeded": 507,
    "feature_disabled": 503,
    "unavailable": 503,
    "busy": 503,
    "embedding_unavailable": 503,
    "embedding_failed": 502,
}


def http_status(failure: ToolFailure) -> int:
    """The HTTP status a plain route answers ``failure`` with."""
    return HTTP_STATUS.get(failure.code, 500 if failure.code == "internal" else 400)


def translate(exc: MemoryDbError) -> ToolFailure:
    """The caller-facing failure for a memory-db error."""
    if isinstance(exc, NotFound):
        return NotFoundFailure(f"{exc.kind} not found")
    if isinstance(exc, Conflict):
        return ConflictFailure(str(exc))
    if isinstance(exc, InvalidInput):
        return InvalidInputFailure(str(exc))
    if isinstance(exc, DatabaseUnavailable):
        return _unavailable()
    # Answered as ``internal``: logged here, because callers raise the answer ``from None``
    # and ``map_failures`` then sees a ToolFailure with no cause to log.
    log.error("unexpected_failure", error=type(exc).__name__, exc_info=exc)
    return ToolFailure("the request could not be completed; the server's log has why")


def _unavailable() -> Unavailable:
    return Unavailable("the database is unavailable; retry in a few seconds")


@contextmanager
def map_failures() -> Generator[None]:
    """Translate what escapes a workflow into a ``ToolFailure``, the same for every entry point.

    A lost or refused database connection becomes ``Unavailable`` (retryable), whether it
    surfaced through a unit of work (``DatabaseUnavailable``) or straight from the driver. A
    value whose characters the database cannot store (a NUL that escaped validation) is
    ``InvalidInputFailure``: the caller's to correct, not an internal error. Anything else is
    logged with its traceback and answered as ``internal``, the documented code, with no
    detail (the framework would otherwise answer a bare "Error calling tool").
    """
    try:
        yield
    except DatabaseUnavailable as exc:
        raise _unavailable() from exc
    except Exception as exc:
        if is_connection_failure(exc):
            raise _unavailable() from exc
        if is_unstorable_text(exc):
            raise InvalidInputFailure(
                "a value contains a character the database cannot store (NUL)"
            ) from exc
        if isinstance(exc, ToolFailure):
            raise
        if isinstance(exc, (NotFound, Conflict, InvalidInput)):
            raise translate(exc) from exc  # a repository's answer no workflow translated
        log.error("unexpected_failure", error=type(exc).__name__, exc_info=True)
        raise ToolFailure("the request could not be completed; the server's log has why") from exc
