"""``--processes``: the parent accepts each connection and deals it to the server children in turn.

Why: with a ``SO_REUSEPORT`` socket per child, the kernel chose a child by a hash of each
connection's addresses, so 16 clients connecting at once were split 5/11, 6/10 or 7/9 between
two children (six trials). A client keeps its connection (HTTP keep-alive), so the clients of
the fuller child waited about twice as long as the others for as long as they stayed: under
load the search p95 exceeded what fair queueing gives. One socket shared by all children is
worse (the first child to wake accepts every waiting connection). Node's ``cluster`` module
made the same choice for the same reason: the primary accepts and hands connections out round
robin.

How: the parent holds the one listening socket and a Unix socket pair per child slot. A thread
(:class:`ConnectionDealer`) accepts each connection and sends its descriptor (``SCM_RIGHTS``)
to the next child that is alive, skipping one whose queue is full (a child that is stuck),
then closes its own copy. The child serves :class:`HandedConnections`, a socket whose
``accept`` receives the next handed connection: asyncio and uvicorn serve it as they would a
listening socket, and the connection itself (its bytes, its peer address) is the client's,
untouched. The parent keeps each slot's child end open for its whole life: connections handed
to a child that died wait in the pair's buffer for the child started in its place.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Callable

from memory_db import get_logger

log = get_logger(__name__)

# How long the dealer waits for some child to take a connection before it drops it (every
# child's queue full: all stuck, or all restarting at once).
DEAL_TIMEOUT_SECONDS = 5.0
# How often a dealer with nothing to accept checks that it should stop.
ACCEPT_POLL_SECONDS = 0.5
# One byte travels with each descriptor; the child reads exactly one per connection.
_TOKEN = b"c"


class ConnectionDealer:
    """The parent's side: accept on ``listener`` and deal each connection to a child slot.

    ``slots`` server slots, each a Unix socket pair: the child's end is inherited by the child
    (:meth:`child_fd`), the parent's end sends. :meth:`start` takes ``alive(slot)``: whether
    the slot's child is running, so a dead one is skipped while it restarts.
    """

    def __init__(self, listener: socket.socket, slots: int) -> None:
        self.listener = listener
        self._pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(slots)]
        for parent_end, _child_end in self._pairs:
            parent_end.setblocking(False)  # a full queue is skipped, never waited on
        self._next = 0
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._alive: Callable[[int], bool] = lambda _slot: True
        self.dealt = [0] * slots  # connections handed to each slot (for the log and tests)

    def child_fd(self, slot: int) -> int:
        """The descriptor the child of ``slot`` inherits and serves (``--handoff-fd``)."""
        return self._pairs[slot][1].fileno()

    def start(self, alive: Callable[[int], bool]) -> None:
        """Accept and deal in a thread of the parent until :meth:`stop`."""
        self._alive = alive
        self.listener.settimeout(ACCEPT_POLL_SECONDS)
        self._thread = threading.Thread(target=self._run, name="connection-dealer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop accepting (new connections are then refused) and close the listening socket."""
        self._stopping.set()
        with contextlib.suppress(OSError):  # wakes the waiting accept at once (Linux)
            self.listener.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=ACCEPT_POLL_SECONDS * 4)
        self.listener.close()

    def close(self) -> None:
        """Close every slot's pair (after the children are gone)."""
        for parent_end, child_end in self._pairs:
            parent_end.close()
            child_end.close()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                connection, _address = self.listener.accept()
            except TimeoutError:
                continue
            except OSError as exc:
                if self._stopping.is_set():
                    return
                # EMFILE and the like: the connection stays in the backlog for the next try.
                log.warning("connection_accept_failed", error=str(exc))
                time.sleep(0.1)
                continue
            with connection:
                slot = self.deal(connection)
            if slot is None:
                log.warning("connection_dropped", reason="no server process took it")

    def deal(self, connection: socket.socket) -> int | None:
        """Hand ``connection`` to the next live slot that takes it; the slot, or None."""
        count = len(self._pairs)
        order = [(self._next + k) % count for k in range(count)]
        self._next = (self._next + 1) % count
        live = [slot for slot in order if self._alive(slot)] or order
        deadline = time.monotonic() + DEAL_TIMEOUT_SECONDS
        while True:
            for slot in live:
                try:
                    socket.send_fds(self._pairs[slot][0], [_TOKEN], [connection.fileno()])
                except OSError:
                    # This child's queue is full (a child that is stuck), or the system holds
                    # too many descriptors in flight: the next one, then wait a little.
                    continue
                self.dealt[slot] += 1
                return slot
            if self._stopping.is_set() or time.monotonic() > deadline:
                return None
            time.sleep(0.01)


class HandedConnections(socket.socket):
    """The child's side: a "listening" socket whose ``accept`` returns the next handed connection.

    Given to uvicorn as its socket. asyncio calls :meth:`listen` once and :meth:`accept` when
    the pair is readable, as for a listening socket; what it gets is the client's own TCP
    connection and peer address.
    """

    def listen(self, backlog: int = 0, /) -> None:
        """Nothing to do: the parent listens (asyncio's call; there is no queue to size)."""

    def accept(self) -> tuple[socket.socket, object]:
        """The next connection the parent handed over (``BlockingIOError``: none yet)."""
        data, fds, _flags, _address = socket.recv_fds(self, len(_TOKEN), 1)
        if not data:
            self._parent_gone()
            raise ConnectionAbortedError("the parent closed the connection hand-off")
        if not fds:  # never sent without one; nothing to serve
            raise ConnectionAbortedError("a hand-off without a connection")
        os.set_inheritable(fds[0], False)  # never into a subprocess (tesseract, PostgreSQL)
        connection = socket.socket(fileno=fds[0])
        try:
            peer = connection.getpeername()
        except OSError:
            connection.close()  # the client left while the connection was handed over
            raise ConnectionAbortedError("the client closed the connection") from None
        return connection, peer

    def _parent_gone(self) -> None:
        # The pair is at its end for good: stop watching it (it would read as ready forever)
        # and stop, as a child does when its parent dies.
        with contextlib.suppress(RuntimeError):
            asyncio.get_running_loop().remove_reader(self.fileno())
        log.warning("parent_process_gone", reason="connection hand-off closed")
        os.kill(os.getpid(), signal.SIGTERM)


def handed_connections(fd: int) -> HandedConnections:
    """The child's socket for the hand-off descriptor ``fd`` it inherited."""
    return HandedConnections(socket.AF_UNIX, socket.SOCK_STREAM, fileno=fd)


__all__ = ["ConnectionDealer", "HandedConnections", "handed_connections"]
