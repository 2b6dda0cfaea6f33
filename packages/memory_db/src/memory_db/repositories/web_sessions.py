"""Web sessions: a browser's cookie secret, resolved to the API key it acts as.

The secret is 256 random bits shown once (in the ``Set-Cookie`` header); the table holds only
its SHA-256. A session is alive while it is unexpired *and* its key is neither revoked nor
paused, so revoking the key ends every session made from it at their next request, and pausing
it stops them until it is resumed.

A live session is read from this process's cache when it can be (:meth:`use`): every change
that ends a session (sign-out, the oldest beyond :data:`MAX_SESSIONS_PER_KEY`, its key revoked)
notifies every process (migrations 0021 and 0022) and returns only once each has dropped its
cache, as for keys (docs/design.md#key-cache).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from memory_db.ids import new_id
from memory_db.repositories._base import SessionRepository
from memory_db.repositories.access_changes import AccessCache, mark_access_changed
from memory_db.repositories.identities import key_record, key_usable, touch_keys
from memory_db.repositories.records import ApiKeyRecord
from memory_db.schema import ApiKey, WebSession

# What the cookie carries: a prefix to recognise it, then the random secret.
WEB_SESSION_PREFIX = "wss_"
_MAX_SECRET = 200
# Live sessions one key may have; signing in beyond it ends that key's oldest sessions, so a
# key (any key, even read-only) signing in in a loop cannot grow the table without bound.
MAX_SESSIONS_PER_KEY = 50


@dataclass(frozen=True, slots=True)
class WebSessionRecord:
    """A live session and the key it acts as (the secret itself is never stored)."""

    id: str
    key: ApiKeyRecord
    csrf_token: str
    created_at: datetime
    expires_at: datetime


def hash_session_secret(secret: str) -> str:
    """SHA-256 of a presented session secret (256 random bits: a fast hash is sufficient)."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


class WebSessionCache(AccessCache[WebSessionRecord]):
    """Live sessions by the hash of their secret, each kept no longer than it lives."""


class WebSessionRepository(SessionRepository):
    """Create, resolve and end web sessions.

    ``cache``: this process's :class:`WebSessionCache`, which :meth:`use` reads first.
    """

    def __init__(self, session: AsyncSession, cache: WebSessionCache | None = None) -> None:
        super().__init__(session)
        self._cache = cache

    async def create(self, key_id: str, *, lifetime: timedelta) -> tuple[str, str]:
        """Start a session acting as ``key_id``; return ``(session id, secret)``.

        Expired sessions are deleted on the way (sign-ins are rare, the index makes it cheap),
        and so are the key's oldest beyond ``MAX_SESSIONS_PER_KEY``.
        """
        await self._session.execute(delete(WebSession).where(WebSession.expires_at <= func.now()))
        secret = WEB_SESSION_PREFIX + secrets.token_urlsafe(32)
        now = datetime.now(UTC)
        row = WebSession(
            id=new_id("wses"),
            token_hash=hash_session_secret(secret),
            key_id=key_id,
            csrf_token=secrets.token_urlsafe(32),
            created_at=now,
            last_seen_at=now,
            expires_at=now + lifetime,
        )
        self._session.add(row)
        await self._session.flush()
        newest = (
            select(WebSession.id)
            .where(WebSession.key_id == key_id)
            .order_by(WebSession.created_at.desc(), WebSession.id.desc())
            .limit(MAX_SESSIONS_PER_KEY)
        )
        ended = await self._session.execute(
            delete(WebSession)
            .where(WebSession.key_id == key_id, WebSession.id.not_in(newest.scalar_subquery()))
            .returning(WebSession.id)
        )
        if ended.first() is not None:  # live sessions ended: no process may still hold them
            mark_access_changed(self._session)
        return row.id, secret

    async def resolve(self, secret: str) -> WebSessionRecord | None:
        """The live session whose secret is ``secret``, with its active key; else None.

        None for an unknown, expired or ended session, and for one whose key is revoked.
        """
        if not secret.startswith(WEB_SESSION_PREFIX) or len(secret) > _MAX_SECRET:
            return None
        found = (
            await self._session.execute(
                select(WebSession, ApiKey)
                .join(ApiKey, ApiKey.id == WebSession.key_id)
                .where(
                    WebSession.token_hash == hash_session_secret(secret),
                    WebSession.expires_at > func.now(),
                    key_usable(),
                )
            )
        ).one_or_none()
        if found is None:
            return None
        session, key = found
        return WebSessionRecord(
            id=session.id,
            key=key_record(key),
            csrf_token=session.csrf_token,
            created_at=session.created_at,
            expires_at=session.expires_at,
        )

    async def use(self, secret: str) -> WebSessionRecord | None:
        """:meth:`resolve` and both touches in one statement, or no statement on a cache hit.

        Every request of the web app authenticates this way. With a cache whose watch listens,
        a live session read in the last minute costs no round trip (and is never kept past its
        expiry); the read that refreshes it also records that the session and its key were
        used, so ``last_seen_at`` and the key's ``last_used_at`` lag by at most about two
        minutes.
        """
        if not secret.startswith(WEB_SESSION_PREFIX) or len(secret) > _MAX_SECRET:
            return None
        token_hash = hash_session_secret(secret)
        cache = self._cache
        if cache is not None and (cached := cache.get(token_hash)) is not None:
            return cached
        ticket = None if cache is None else cache.ticket()
        live = (
            (WebSession.token_hash == token_hash)
            & (WebSession.expires_at > func.now())
            & (WebSession.key_id == ApiKey.id)
            & key_usable()
        )
        seen = (
            update(WebSession)
            .where(
                WebSession.token_hash == token_hash,
                WebSession.expires_at > func.now(),
                WebSession.last_seen_at < func.now() - func.make_interval(0, 0, 0, 0, 0, 1),
            )
            .values(last_seen_at=func.now())
            .returning(WebSession.id)
            .cte("seen")
        )
        of_session = select(WebSession.key_id).where(
            WebSession.token_hash == token_hash, WebSession.expires_at > func.now()
        )
        used = (
            touch_keys(ApiKey.id.in_(of_session.scalar_subquery()) & ApiKey.revoked_at.is_(None))
            .returning(ApiKey.id)
            .cte("used")
        )
        found = (
            await self._session.execute(select(WebSession, ApiKey).where(live).add_cte(seen, used))
        ).one_or_none()
        if found is None:
            return None
        session, key = found
        record = WebSessionRecord(
            id=session.id,
            key=key_record(key),
            csrf_token=session.csrf_token,
            created_at=session.created_at,
            expires_at=session.expires_at,
        )
        if cache is not None:
            left = (record.expires_at - datetime.now(UTC)).total_seconds()
            cache.put(ticket, token_hash, record, until=cache.clock() + left)
        return record

    async def touch(self, session_id: str) -> None:
        """Record that the session was used (at most once a minute, to spare writes)."""
        await self._session.execute(
            update(WebSession)
            .where(
                WebSession.id == session_id,
                WebSession.last_seen_at < func.now() - func.make_interval(0, 0, 0, 0, 0, 1),
            )
            .values(last_seen_at=func.now())
        )

    async def end(self, secret: str) -> bool:
        """End the session of ``secret`` (sign-out); whether one was ended."""
        if not secret.startswith(WEB_SESSION_PREFIX) or len(secret) > _MAX_SECRET:
            return False
        ended = await self._session.execute(
            delete(WebSession)
            .where(WebSession.token_hash == hash_session_secret(secret))
            .returning(WebSession.id)
        )
        if ended.first() is None:
            return False
        mark_access_changed(self._session)  # signed out in every process before it returns
        return True
