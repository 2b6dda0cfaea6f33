"""Refusals sent before the MCP server sees a request: a JSON-RPC error as a plain HTTP answer.

The middlewares in front of the MCP endpoint (authentication, the body limit) answer with the
JSON-RPC error shape a client of the endpoint already reads, with ``id`` null: the request was
never parsed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from starlette.types import Send


async def send_jsonrpc_error(
    send: Send, status: int, error: dict[str, Any], headers: Sequence[tuple[bytes, bytes]]
) -> None:
    """Answer with HTTP ``status`` and the JSON-RPC ``error``, plus ``headers``."""
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
