"""Bearer-token authentication for MCP over HTTP: the token is an API key from ``mem_api_keys``."""

from __future__ import annotations

from fastmcp.server.auth import AccessToken, TokenVerifier

from memory_db import Database


class ApiKeyVerifier(TokenVerifier):
    """Accepts ``Authorization: Bearer <key>`` for active keys; anything else is a 401."""

    def __init__(self, database: Database, base_url: str | None = None) -> None:
        super().__init__(base_url=base_url)
        self._database = database

    async def verify_token(self, token: str) -> AccessToken | None:
        """Resolve the key; tools re-resolve it per call, so revocation applies at once."""
        async with self._database.unit_of_work() as uow:
            record = await uow.api_keys.resolve(token)
        if record is None:
            return None
        return AccessToken(token=token, client_id=record.id, scopes=list(record.scopes))
