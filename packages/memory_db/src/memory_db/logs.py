"""Structured logging (structlog) with a redaction step that runs before any renderer.

Never logged: image bytes, base64 payloads, signed URLs (their query strings), API keys and
secrets, and raw owner identities (replaced by a short stable digest, so log lines about one
owner can still be correlated without naming them).

**Event names** follow one scheme, ``EVENT_NAME``: snake_case ``<subject>_<what happened>``,
the subject first and the outcome last (``asset_saved``, ``worker_job_failed``,
``signed_read_denied``, ``embedded_postgres_started``); details go in fields, never in the name.
A warning or error written while handling an exception passes ``exc_info`` (or uses
``log.exception``) so the cause is in the record. ``tests/logs`` checks both in the source.

**One pipeline.** Every line on stderr goes through the same processors and renderer: our
structlog events, the standard library's loggers (uvicorn, the MCP SDK, asyncpg ...), fastmcp's
loggers (their own rich console handler is removed), and Python warnings. With
``MEMORY_LOG_FORMAT=json`` stderr carries JSON lines only. libvips' internal messages (GLib
warnings via the ``pyvips`` logger: "read gave 2 warnings", "not a known file format" ...)
describe inputs we already refuse or accept with a clear answer, so they are logged at debug.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import sys
from collections.abc import Mapping, MutableMapping
from typing import Any, Literal

import structlog

REDACTED = "[redacted]"
EVENT_NAME = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+")
# Frameworks that install their own console handlers or stop propagation; their records are
# handed to the root handler instead, so they are rendered (and redacted) like ours.
_ADOPTED_LOGGERS = ("fastmcp", "mcp", "uvicorn", "uvicorn.error", "uvicorn.access", "docket")
# libvips' GLib messages, routed by pyvips to this logger.
_LIBVIPS_LOGGER = "pyvips"

# Keys whose value is a secret whatever it looks like.
_SECRET_KEYS = re.compile(
    r"(^|_)(api_?key|key_secret|secret|password|passwd|token|authorization|auth|cookie|"
    r"credentials?|signature|sig|access_key_id|secret_access_key|jina_api_keys?)$",
    re.IGNORECASE,
)
# Keys whose value is an owner identity or an e-mail address.
_IDENTITY_KEYS = re.compile(
    r"(^|_)(owner|owner_identity|identity|actor|actor_identity|grantee|email|created_by|"
    r"updated_by|vault_owner)$",
    re.IGNORECASE,
)
# Keys whose value is image data.
_BINARY_KEYS = re.compile(r"(^|_)(bytes_?data|body|image|image_?base64|data|payload)$", re.I)

_API_KEY_RE = re.compile(r"\bmk_[A-Za-z0-9_-]{20,}")
_EMAIL_RE = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
_DATA_URL_RE = re.compile(r"data:[^;,\s]*;base64,[A-Za-z0-9+/=\s]+", re.IGNORECASE)
_LONG_BASE64_RE = re.compile(r"[A-Za-z0-9+/_-]{120,}={0,2}")
_BEARER_RE = re.compile(r"(?i)\bbearer\s+\S+")
# Credentials in a URL's authority (``https://user:password@host``).
_URL_USERINFO_RE = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s/?#@\"']+@")
# A URL with a query string: signed links carry their authority in the query.
_URL_WITH_QUERY_RE = re.compile(r"(https?://[^\s?#\"']+)\?[^\s#\"']*", re.IGNORECASE)


def identity_digest(identity: str) -> str:
    """A short, stable, non-reversible stand-in for an owner identity in logs."""
    digest = hashlib.sha256(identity.strip().lower().encode("utf-8")).hexdigest()
    return f"id:{digest[:12]}"


def redact_text(text: str) -> str:
    """Mask secrets, base64 blobs, URL credentials and queries, and e-mail addresses in text."""
    text = _DATA_URL_RE.sub("data:[redacted]", text)
    text = _BEARER_RE.sub("Bearer " + REDACTED, text)
    text = _API_KEY_RE.sub("mk_" + REDACTED, text)
    text = _URL_USERINFO_RE.sub(lambda m: m.group(1) + REDACTED + "@", text)
    text = _URL_WITH_QUERY_RE.sub(lambda m: m.group(1) + "?" + REDACTED, text)
    text = _LONG_BASE64_RE.sub("[redacted base64]", text)
    return _EMAIL_RE.sub(lambda m: identity_digest(m.group(0)), text)


def _redact_value(key: str, value: Any, depth: int = 0) -> Any:
    if depth > 6:
        return REDACTED
    if isinstance(value, bytes | bytearray | memoryview):
        return f"[{len(value)} bytes]"
    if _SECRET_KEYS.search(key):
        return REDACTED
    if _IDENTITY_KEYS.search(key) and isinstance(value, str):
        return identity_digest(value)
    if _BINARY_KEYS.search(key) and isinstance(value, str) and len(value) > 64:
        return f"[{len(value)} chars redacted]"
    if isinstance(value, str):
        return redact_text(value)
    if hasattr(value, "get_secret_value"):  # pydantic SecretStr / SecretBytes
        return REDACTED
    if isinstance(value, Mapping):
        return {str(k): _redact_value(str(k), v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_redact_value(key, item, depth + 1) for item in value]
    return value


def redact_event(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Structlog processor: redact every field of the event in place."""
    for key in list(event_dict):
        event_dict[key] = _redact_value(key, event_dict[key])
    return event_dict


class _StderrHandler(logging.Handler):
    """Write each record to ``sys.stderr`` as it is when the record is emitted.

    Not ``logging.StreamHandler(sys.stderr)``, which keeps the stream it was given: a command's
    progress bar (rich) swaps ``sys.stderr`` for a proxy that prints lines above the bar, and a
    handler holding the old stream wrote its lines through the middle of the bar instead.
    """

    def emit(self, record: logging.LogRecord) -> None:
        try:
            stream = sys.stderr
            stream.write(self.format(record) + "\n")
            stream.flush()
        except Exception:
            self.handleError(record)


class _LibvipsToDebug(logging.Filter):
    """Demote libvips' messages to debug, and drop them unless debug logging is on."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger().isEnabledFor(logging.DEBUG)


_PYVIPS_CALL_LOGGERS = tuple(
    f"pyvips.{module}"
    for module in (
        "error",
        "gobject",
        "gvalue",
        "vconnection",
        "vinterpolate",
        "vobject",
        "voperation",
        "vsource",
        "vsourcecustom",
        "vtarget",
        "vtargetcustom",
    )
)


def configure_logging(
    fmt: Literal["auto", "console", "json"] = "auto",
    level: str = "info",
) -> bool:
    """Configure structlog and the standard library to write redacted logs to stderr.

    ``auto`` picks the console renderer when stderr is a terminal and JSON otherwise. Logs go to
    stderr because stdout carries the MCP stdio protocol. Returns ``True`` when the renderer is
    JSON (so a command prints its notices as log events, not plain text).
    """
    use_console = fmt == "console" or (fmt == "auto" and sys.stderr.isatty())
    renderer: Any = (
        structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
        if use_console
        else structlog.processors.JSONRenderer()
    )
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        redact_event,
    ]
    structlog.configure(
        # A line below the level is dropped first: otherwise every processor, the redaction's
        # regular expressions over every field included, ran before the standard library's
        # logger dropped it (about 0.2 ms per search at level warning).
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    )
    handler = _StderrHandler()
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Third-party loggers that may print request lines with query strings or keys.
    # embedded_postgres logs every command line and its output at INFO; alembic each step.
    for noisy in (
        "botocore",
        "aiobotocore",
        "boto3",
        "urllib3",
        "httpx",
        "httpcore",
        "embedded_postgres",
        "alembic",
        # pyvips' Python layer logs every operation's arguments and results at DEBUG, image
        # buffers included (megabytes of repr per call): never wanted, even at debug level.
        # libvips' own messages come through the parent "pyvips" logger and stay.
        *_PYVIPS_CALL_LOGGERS,
    ):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # fastmcp installs a rich console handler when it is first imported (often after this
    # runs, lazily); switched off here, and removed below if it is already in place.
    os.environ.setdefault("FASTMCP_LOG_ENABLED", "false")
    for name in _ADOPTED_LOGGERS:
        adopted = logging.getLogger(name)
        adopted.handlers[:] = []
        adopted.propagate = True
        adopted.setLevel(logging.NOTSET)
    libvips = logging.getLogger(_LIBVIPS_LOGGER)
    libvips.filters[:] = [f for f in libvips.filters if not isinstance(f, _LibvipsToDebug)]
    libvips.addFilter(_LibvipsToDebug())
    logging.captureWarnings(True)
    return not use_console


def get_logger(name: str) -> Any:
    """A structlog logger bound to ``name``."""
    return structlog.get_logger(name)
