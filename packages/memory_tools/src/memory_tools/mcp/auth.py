"""Bearer-token authentication for MCP over HTTP: the token is an API key from ``mem_api_keys``.

A refused request to the MCP endpoint gets 401 with ``WWW-Authenticate: Bearer`` (RFC 6750:
no ``error`` attribute when no bearer credentials were sent, ``error="invalid_token"`` when the
key is unknown or revoked) and a JSON-RPC error body whose message starts with the stable code
``unauthenticated`` and says what to do, so MCP clients show the reason instead of a bare 401.
A paused key gets the same answer with its own message and ``"reason": "key_paused"`` in the
error's data (the check runs only on the way to a refusal).
fastmcp's own answer (an empty body, or advice to "re-register" an OAuth client) does not apply:
there is no OAuth here.
"""

from __future__ import annotations

from typing import Any

from fastmcp.server.auth import AccessToken, TokenVerifier
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Receive, Scope, Send

from memory_db import Database, DatabaseUnavailable, get_logger
from memory_tools.access import PAUSED_KEY_MESSAGE
from memory_tools.errors import Unauthenticated
from memory_tools.mcp.refusals import send_jsonrpc_error

log = get_logger(__name__)

MCP_PATH = "/mcp"
# JSON-RPC leaves -32000..-32099 to the server; MCP servers commonly answer auth with -32001.
JSONRPC_UNAUTHENTICATED = -32001
# client_id of a request whose key could not be checked because the database is down.
UNVERIFIED_CLIENT = "unverified:database-unavailable"

MISSING_KEY = Unauthenticated(
    "an API key is required: send the header `Authorization: Bearer <key>`; "
    "create a key with `memory-server admin create-key --owner <you>`"
)
UNKNOWN_KEY = Unauthenticated(
    "the API key is unknown or revoked: check the key you send as "
    "`Authorization: Bearer <key>`, or create a new one with `memory-server admin create-key`"
)

PAUSED_KEY = Unauthenticated(PAUSED_KEY_MESSAGE)


class ApiKeyVerifier(TokenVerifier):
    """Accepts ``Authorization: Bearer <key>`` for active keys; anything else is a 401."""

    def __init__(
        self, database: Database, base_url: str | None = None, *, mcp_path: str = MCP_PATH
    ) -> None:
        super().__init__(base_url=base_url)
        self._database = database
        self._endpoint_path = mcp_path

    async def verify_token(self, token: str) -> AccessToken | None:
        """Resolve the key through this process's key cache, as the tool will again.

        On a warm cache neither check sends anything, and this one takes no connection; on a
        cold one this check reads the key (one statement, no transaction) and the tool's check
        finds it cached. A revocation clears every process's cache before it returns
        (docs/design.md#key-cache).
        """
        if not token.strip():
            return None
        if (record := self._database.cached_api_key(token)) is not None:
            return AccessToken(token=token, client_id=record.id, scopes=list(record.scopes))
        try:
            async with self._database.single_statements() as uow:
                record = await uow.api_keys.use(token)
        except DatabaseUnavailable:
            # The key cannot be checked now. Let the request in with no scopes instead of
            # answering a bare HTTP 500: every tool authenticates again in its own transaction,
            # which fails the same way, so the caller gets the retryable `unavailable` tool
            # error, and no tool runs for an unchecked key.
            log.warning("api_key_check_unavailable", exc_info=True)
            return AccessToken(token=token, client_id=UNVERIFIED_CLIENT, scopes=[])
        if record is None:
            return None
        return AccessToken(token=token, client_id=record.id, scopes=list(record.scopes))

    def get_middleware(self) -> list[Any]:
        """The bearer middleware of fastmcp, then ours to explain refusals on the MCP endpoint."""
        return [
            *super().get_middleware(),
            Middleware(
                ExplainUnauthenticated, mcp_path=self._endpoint_path, database=self._database
            ),
        ]


def _bearer_token(scope: Scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name.lower() == b"authorization" and value[:7].lower() == b"bearer ":
            return value[7:].decode("latin-1").strip()
    return None


class ExplainUnauthenticated:
    """ASGI middleware: a request to the MCP endpoint without a valid key gets a readable 401.

    It runs after fastmcp's ``AuthenticationMiddleware``, which has resolved the key (or not)
    into ``scope["user"]``; other routes (signed objects, uploads, health) check their own
    credentials and pass through untouched.
    """

    def __init__(
        self, app: ASGIApp, mcp_path: str = MCP_PATH, database: Database | None = None
    ) -> None:
        self.app = app
        self.mcp_path = mcp_path.rstrip("/")
        self.database = database  # to tell a paused key why; None: every key is "unknown"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer 401 on the MCP endpoint unless ``AuthenticationMiddleware`` found a user."""
        if (
            scope["type"] != "http"
            or scope["path"].rstrip("/") != self.mcp_path
            or getattr(scope.get("user"), "is_authenticated", False)
        ):
            await self.app(scope, receive, send)
            return
        data: dict[str, str] = {}
        if token := _bearer_token(scope):
            paused = await self._is_paused(token)
            failure = PAUSED_KEY if paused else UNKNOWN_KEY
            if paused:
                data["reason"] = "key_paused"
            challenge = f'Bearer error="invalid_token", error_description="{failure.message}"'
        else:
            failure = MISSING_KEY
            challenge = "Bearer"  # RFC 6750, section 3.1: no error attribute without credentials
        await send_jsonrpc_error(
            send,
            401,
            {
                "code": JSONRPC_UNAUTHENTICATED,
                "message": str(failure),
                "data": {"code": failure.code, "message": failure.message, **data},
            },
            [(b"www-authenticate", challenge.encode()), (b"cache-control", b"no-store")],
        )

    async def _is_paused(self, token: str) -> bool:
        """Whether ``token`` is a paused key; False when that cannot be read now."""
        if self.database is None:
            return False
        try:
            async with self.database.single_statements() as uow:
                return await uow.api_keys.is_paused(token)
        except DatabaseUnavailable:
            return False
