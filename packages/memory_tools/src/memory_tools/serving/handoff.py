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
to the next child that is ready, then closes its own copy. The child serves
:class:`HandedConnections`, a socket whose ``accept`` receives the next handed connection:
asyncio and uvicorn serve it as they would a listening socket, and the connection itself (its
bytes, its peer address) is the client's, untouched. When asyncio starts serving it, the child
says so on the pair (its pid): only from then on is it dealt connections, so a child that is
still starting (a replacement after a crash takes seconds) does not hold half of them waiting.
A child whose queue on the pair is full (stuck: alive, not taking connections) is skipped.
The parent keeps each slot's child end open for its whole life: connections already handed to
a child that died wait in the pair's buffer for the child started in its place.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable

from memory_db import get_logger

log = get_logger(__name__)

# How long a connection may wait for a child to take it before the dealer closes it (every
# child's queue full: all stuck; or none ready for that long).
DEAL_TIMEOUT_SECONDS = 5.0
# How often a dealer with nothing to accept checks that it should stop.
ACCEPT_POLL_SECONDS = 0.5
# How often connections that no child took yet are offered again.
RETRY_SECONDS = 0.01
# At most this many accepted connections wait in the parent; more wait in the listen backlog.
MAX_WAITING = 1024
# One byte travels with each descriptor; the child reads exactly one per connection.
_TOKEN = b"c"
# What a child sends when it starts taking connections: a tag and its pid.
_READY = struct.Struct("!cI")
_READY_TAG = b"r"
# The child's receive: the descriptor marked close-on-exec as it arrives, where the system can.
_CLOEXEC = getattr(socket, "MSG_CMSG_CLOEXEC", 0)


class ConnectionDealer:
    """The parent's side: accept on ``listener`` and deal each connection to a ready child.

    ``slots`` server slots, each a Unix socket pair: the child's end is inherited by the child
    (:meth:`child_fd`), the parent's end sends connections and hears the child say it is ready.
    :meth:`start` takes ``running(slot)``: the pid of the slot's running child, or None. The
    slots whose child of that pid said it is ready are dealt connections; the others only when
    every ready one's queue is full or none is ready (the connections then wait for the
    children starting).
    """

    def __init__(self, listener: socket.socket, slots: int) -> None:
        self.listener = listener
        self._pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(slots)]
        for parent_end, _child_end in self._pairs:
            parent_end.setblocking(False)  # a full queue is skipped, never waited on
        self._heard = [b""] * slots  # a partial readiness message per slot
        self._ready_pid: list[int | None] = [None] * slots
        self._next = 0
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._running: Callable[[int], int | None] = lambda _slot: None
        self._waiting: deque[tuple[socket.socket, float]] = deque()
        self._last_complaint = 0.0
        self.dealt = [0] * slots  # connections handed to each slot (for the log and tests)

    def child_fd(self, slot: int) -> int:
        """The descriptor the child of ``slot`` inherits and serves (``--handoff-fd``)."""
        return self._pairs[slot][1].fileno()

    def start(self, running: Callable[[int], int | None]) -> None:
        """Accept and deal in a thread of the parent until :meth:`stop`."""
        self._running = running
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
        while self._waiting:
            self._waiting.popleft()[0].close()

    def close(self) -> None:
        """Close every slot's pair (after the children are gone)."""
        for parent_end, child_end in self._pairs:
            parent_end.close()
            child_end.close()

    def ready(self) -> list[int]:
        """The slots whose running child said it takes connections (messages read first)."""
        ready: list[int] = []
        for slot, (parent_end, _child_end) in enumerate(self._pairs):
            with contextlib.suppress(BlockingIOError, InterruptedError):
                while chunk := parent_end.recv(_READY.size * 8):
                    self._heard[slot] += chunk
            while len(self._heard[slot]) >= _READY.size:
                tag, pid = _READY.unpack_from(self._heard[slot])
                self._heard[slot] = self._heard[slot][_READY.size :]
                if tag == _READY_TAG:
                    self._ready_pid[slot] = pid
            pid = self._running(slot)
            if pid is not None and pid == self._ready_pid[slot]:
                ready.append(slot)
        return ready

    def offer(self, connection: socket.socket) -> int | None:
        """Hand ``connection`` to the next ready slot that takes it now; the slot, or None.

        In turn from the slot after the last one dealt to, so a slot that is skipped leaves its
        share to all the others. None: every queue is full; the caller offers it again later.
        """
        count = len(self._pairs)
        ready = set(self.ready())
        order = [(self._next + k) % count for k in range(count)]
        # Ready children first; then the others (starting, or restarting after a crash), whose
        # queues hold the connection until they serve it.
        for slot in [s for s in order if s in ready] + [s for s in order if s not in ready]:
            try:
                socket.send_fds(self._pairs[slot][0], [_TOKEN], [connection.fileno()])
            except (BlockingIOError, InterruptedError):
                continue  # this child's queue is full (a child that is stuck): the next one
            except OSError as exc:
                if self._may_complain():
                    log.warning(
                        "connection_handoff_failed", slot=slot, errno=exc.errno, exc_info=True
                    )
                continue
            self.dealt[slot] += 1
            self._next = (slot + 1) % count
            return slot
        return None

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self._turn()
            except Exception:  # never leave the port without anyone accepting
                log.exception("connection_dealer_failed")
                time.sleep(0.1)

    def _turn(self) -> None:
        """Accept what arrived (waiting briefly), then offer every waiting connection again."""
        if len(self._waiting) < MAX_WAITING:
            self.listener.settimeout(RETRY_SECONDS if self._waiting else ACCEPT_POLL_SECONDS)
            try:
                connection, _address = self.listener.accept()
                self._waiting.append((connection, time.monotonic()))
            except TimeoutError:
                pass
            except OSError as exc:
                if self._stopping.is_set():
                    return
                # EMFILE and the like: the connection stays in the backlog for the next try.
                if self._may_complain():
                    log.warning("connection_accept_failed", errno=exc.errno, exc_info=True)
                time.sleep(0.1)
        else:
            time.sleep(RETRY_SECONDS)
        now = time.monotonic()
        for _ in range(len(self._waiting)):
            connection, since = self._waiting.popleft()
            if self.offer(connection) is not None:
                connection.close()  # the child has its own copy
            elif now - since > DEAL_TIMEOUT_SECONDS:
                connection.close()
                log.warning("connection_dropped", reason="no server process took it in time")
            else:
                self._waiting.append((connection, since))

    def _may_complain(self) -> bool:
        # At most one line a second: a lasting condition (no descriptors left) would otherwise
        # write one per attempt.
        now = time.monotonic()
        if now - self._last_complaint < 1.0:
            return False
        self._last_complaint = now
        return True


class HandedConnections(socket.socket):
    """The child's side: a "listening" socket whose ``accept`` returns the next handed connection.

    Given to uvicorn as its socket. asyncio calls :meth:`listen` once, when it starts serving,
    and :meth:`accept` when the pair is readable, as for a listening socket; what it gets is
    the client's own TCP connection and peer address.
    """

    def listen(self, backlog: int = 0, /) -> None:
        """Tell the parent this child takes connections now (asyncio's call: serving starts)."""
        log.info("server_process_ready", pid=os.getpid())
        # Five bytes on a pair that carries nothing else this way: never a full buffer.
        self.sendall(_READY.pack(_READY_TAG, os.getpid()))

    def accept(self) -> tuple[socket.socket, object]:
        """The next connection the parent handed over (``BlockingIOError``: none yet)."""
        data, fds, flags, _address = socket.recv_fds(self, len(_TOKEN), 1, _CLOEXEC)
        if not data:
            self._parent_gone()
            raise ConnectionAbortedError("the parent closed the connection hand-off")
        if not fds or flags & socket.MSG_CTRUNC:
            for fd in fds:
                os.close(fd)
            # The system refused this process the descriptor (no descriptors left): the
            # client's connection is closed, and nothing else can be done for it here.
            log.error("connection_lost_in_handoff", reason="no descriptor received")
            raise ConnectionAbortedError("a hand-off without a connection")
        os.set_inheritable(fds[0], False)  # where MSG_CMSG_CLOEXEC does not exist
        connection = socket.socket(fileno=fds[0])
        try:
            peer = connection.getpeername()
        except OSError:
            connection.close()  # the client left while the connection was handed over
            raise ConnectionAbortedError("the client closed the connection") from None
        return connection, peer

    def _parent_gone(self) -> None:
        # The pair is at its end for good (the parent died): stop watching it, or it would
        # read as ready forever. The child then stops as every child of a dead parent does, by
        # ``processes.exit_when_orphaned`` within a second. Not a second SIGTERM from here: one
        # that lands during the graceful shutdown the first began would raise wherever it
        # falls, and can leave the database pool's close waiting forever.
        with contextlib.suppress(RuntimeError):
            asyncio.get_running_loop().remove_reader(self.fileno())
        log.warning("connection_handoff_closed", reason="the parent process is gone")


def handed_connections(fd: int) -> HandedConnections:
    """The child's socket for the hand-off descriptor ``fd`` it inherited."""
    return HandedConnections(socket.AF_UNIX, socket.SOCK_STREAM, fileno=fd)


__all__ = ["ConnectionDealer", "HandedConnections", "handed_connections"]
