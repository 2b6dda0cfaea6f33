"""A scripted HTTP(S) server on 127.0.0.1 for fetch tests.

Each path answers with a :class:`Reply`: a status, headers, a body sent with or without
``Content-Length``, optionally dripped slowly. Requests are recorded so tests can assert what
was (not) asked for.
"""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Generator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Reply:
    """One scripted answer."""

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    send_length: bool = True
    drip_seconds: float = 0.0  # pause between 1-byte writes when > 0


@dataclass
class WebServer:
    """The running server: its port, its routes and the paths requested so far."""

    port: int
    routes: dict[str, Reply]
    requested: list[str] = field(default_factory=list)
    request_headers: list[dict[str, str]] = field(default_factory=list)

    def url(self, path: str, *, host: str = "127.0.0.1", scheme: str = "http") -> str:
        """An absolute URL for ``path`` on this server under the given host name."""
        return f"{scheme}://{host}:{self.port}{path}"


def _handler(server: WebServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            server.requested.append(self.path)
            server.request_headers.append({k.lower(): v for k, v in self.headers.items()})
            path = self.path.split("?", 1)[0]
            reply = server.routes.get(path, Reply(status=404, body=b"missing"))
            self.send_response(reply.status)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            if reply.send_length:
                self.send_header("Content-Length", str(len(reply.body)))
            self.send_header("Connection", "close")
            self.end_headers()
            try:
                if reply.drip_seconds > 0:
                    for index in range(len(reply.body)):
                        self.wfile.write(reply.body[index : index + 1])
                        self.wfile.flush()
                        time.sleep(reply.drip_seconds)
                else:
                    self.wfile.write(reply.body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up on purpose (size or time limits)

        def log_message(self, format: str, *args: object) -> None:
            return

    return Handler


@contextmanager
def serve_web(
    routes: dict[str, Reply] | None = None, *, tls: ssl.SSLContext | None = None
) -> Generator[WebServer]:
    """Run a scripted server on 127.0.0.1 for the duration of the block."""
    state = WebServer(port=0, routes=dict(routes or {}))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    httpd.daemon_threads = True
    if tls is not None:
        httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
    state.port = httpd.server_address[1]
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="web-server", daemon=True
    )
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)
