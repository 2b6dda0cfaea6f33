"""A TCP forwarder on 127.0.0.1 that a test can cut and restore: an outage of a real peer.

Put it between a client and a real server (an S3 peer, the Jina-protocol server) and the
client sees what it would see when the endpoint goes away: live connections dropped, new ones
refused (nothing listens on the port), and after ``restore()`` the same address answering
again. ``cut_before(b"PUT ", nth=2)`` cuts at an exact point of a flow: the ``nth`` request
whose first bytes match is never forwarded, so the requests before it completed and the ones
after it fail, e.g. a save whose original was stored but whose preview was not.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from dataclasses import dataclass, field

from memory_db.testing.s3_peers import free_port


@dataclass
class _Trigger:
    prefix: bytes
    nth: int
    seen: int = 0


@dataclass
class OutageProxy:
    """Forwards ``127.0.0.1:port`` to ``upstream_host:upstream_port`` until cut."""

    upstream_host: str
    upstream_port: int
    port: int = field(default_factory=free_port)
    cuts: int = field(default=0, init=False)  # how many times it was cut
    _listener: socket.socket | None = field(default=None, init=False)
    _connections: set[socket.socket] = field(default_factory=set, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _trigger: _Trigger | None = field(default=None, init=False)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:port``: the address clients are given instead of the upstream's."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def up(self) -> bool:
        """Whether the proxy listens (the endpoint is reachable)."""
        return self._listener is not None

    def start(self) -> OutageProxy:
        """Listen and forward."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    restore = start

    def cut(self) -> None:
        """Stop listening and drop every live connection: new connections are refused."""
        with self._lock:
            listener, self._listener = self._listener, None
            connections, self._connections = self._connections, set()
            self._trigger = None
            self.cuts += 1
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()

    def cut_before(self, prefix: bytes, *, nth: int = 1) -> None:
        """Cut when the ``nth`` client write starting with ``prefix`` arrives (not forwarded)."""
        with self._lock:
            self._trigger = _Trigger(prefix, nth)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _address = listener.accept()
            except OSError:
                return  # cut
            try:
                upstream = socket.create_connection((self.upstream_host, self.upstream_port))
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:
                    client.close()
                    upstream.close()
                    return
                self._connections.update((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _should_cut(self, chunk: bytes) -> bool:
        with self._lock:
            trigger = self._trigger
            if trigger is None or not chunk.startswith(trigger.prefix):
                return False
            trigger.seen += 1
            return trigger.seen >= trigger.nth

    def _pump(self, source: socket.socket, sink: socket.socket, from_client: bool) -> None:
        try:
            while chunk := source.recv(65536):
                if from_client and self._should_cut(chunk):
                    self.cut()
                    return
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            with self._lock:
                self._connections.difference_update((source, sink))
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)
                end.close()
