"""Web sessions: an API key exchanged for a browser session that acts as that key.

The web app is a caller like any other: a session resolves to the same :class:`Caller` an API
key does (its key's identity and scopes), so every page runs the same workflows under the same
authorisation as the MCP tools. A session dies when it expires, when the browser signs out, and
when its key is revoked (and stops while its key is paused): refused on the very next request,
whichever process serves it (a live session is read from the process's cache, which each of
those changes clears in every process before it returns; docs/design.md#key-cache).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from memory_db import UnitOfWork
from memory_tools.access import Caller, authenticate
from memory_tools.errors import Unauthenticated


@dataclass(frozen=True, slots=True)
class SessionCaller:
    """The caller behind a live session, with what the web app needs to protect changes."""

    caller: Caller
    session_id: str
    key_label: str | None
    csrf_token: str
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class NewSession:
    """A session just started: its cookie secret (shown once) and when it ends."""

    secret: str
    session_id: str
    caller: Caller
    lifetime: timedelta


async def sign_in(uow: UnitOfWork, api_key: str, lifetime: timedelta) -> NewSession:
    """Check ``api_key`` like any tool call does, then start a session acting as it.

    An unknown or revoked key raises ``Unauthenticated`` and starts nothing.
    """
    caller = await authenticate(uow, api_key.strip())
    session_id, secret = await uow.web_sessions.create(caller.key_id, lifetime=lifetime)
    return NewSession(secret, session_id, caller, lifetime)


async def session_caller(uow: UnitOfWork, secret: str | None) -> SessionCaller:
    """The caller of a live session; ``Unauthenticated`` for none, unknown, expired or revoked."""
    if not secret:
        raise Unauthenticated("sign in to continue")
    found = await uow.web_sessions.use(secret)
    if found is None:
        raise Unauthenticated(
            "your session has ended (signed out, expired, or its key paused or revoked)"
        )
    key = found.key
    return SessionCaller(
        caller=Caller(key.owner_identity, key.id, frozenset(key.scopes)),
        session_id=found.id,
        key_label=key.label,
        csrf_token=found.csrf_token,
        expires_at=found.expires_at,
    )


async def sign_out(uow: UnitOfWork, secret: str | None) -> bool:
    """End the session of ``secret``; whether there was one."""
    if not secret:
        return False
    return await uow.web_sessions.end(secret)
