"""The base of the test servers that play a provider: Jina, a vision model, a model hub.

``jina_server``, ``vision_server`` and ``clip_model.ModelHubServer`` each run a real HTTP
server on 127.0.0.1 (an ephemeral port) in a background thread, so that a client is tested
through its real transport. :class:`LocalHttpServer` starts, addresses and stops it;
:class:`JsonHandler` sends and reads the JSON bodies the providers speak. A provider's module
keeps only its protocol: what it checks, what it answers and which faults it scripts.
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


class JsonHandler(BaseHTTPRequestHandler):
    """A request handler whose answers are JSON, each with an ``x-request-id`` like a provider's."""

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the default stderr access log."""

    def read_json(self) -> Any:
        """The request's JSON body (``None`` when empty); ``ValueError`` when it is not JSON."""
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"null")

    def bearer_key(self) -> str:
        """The API key of the ``Authorization: Bearer`` header (empty when there is none)."""
        return self.headers.get("Authorization", "").removeprefix("Bearer ").strip()

    def send_payload(
        self, status: int, payload: bytes, headers: dict[str, str] | None = None
    ) -> None:
        """Answer ``status`` with ``payload`` as JSON; the request id is the payload's hash."""
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("x-request-id", hashlib.sha256(payload).hexdigest()[:16])
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout and size-cap tests)


class LocalHttpServer:
    """Serves ``handler`` on 127.0.0.1 in a thread; start with ``start()``, end with ``stop()``."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def port(self) -> int:
        """The ephemeral port the server listens on."""
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``, like the providers' APIs."""
        return f"{self.url}/v1"

    def start(self) -> Self:
        """Serve in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Shut down and close the socket."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


__all__ = ["JsonHandler", "LocalHttpServer"]
