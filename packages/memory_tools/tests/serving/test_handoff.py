"""``--processes``' connection hand-off: the parent deals connections, a child serves them.

Real sockets on loopback and a real asyncio server on the child's side, in one process (the
"children" are servers on each slot's descriptor). The whole ``serve --processes 2`` is tested
end to end in ``tests/e2e/test_server_processes.py``.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Callable, Generator
from contextlib import contextmanager

import pytest
from structlog.testing import capture_logs

from memory_tools.serving import handoff
from memory_tools.serving.handoff import ConnectionDealer, handed_connections


@contextmanager
def dealing(slots: int, pids: list[int | None] | None = None) -> Generator[ConnectionDealer]:
    """A dealer on a loopback listener, accepting until the block ends.

    ``pids``: each slot's running child (None: not running); by default every slot's is this
    process. A slot is ready once its "child" here calls :func:`ready`.
    """
    listener = socket.create_server(("127.0.0.1", 0))
    dealer = ConnectionDealer(listener, slots)
    running = pids if pids is not None else [os.getpid()] * slots
    dealer.start(running=lambda slot: running[slot])
    try:
        yield dealer
    finally:
        dealer.stop()
        dealer.close()


def ready(dealer: ConnectionDealer, slot: int) -> None:
    """The slot's child says it takes connections, as asyncio's start of serving makes it."""
    child = handed_connections(os.dup(dealer.child_fd(slot)))
    child.listen()
    child.close()


def _port(dealer: ConnectionDealer) -> int:
    return int(dealer.listener.getsockname()[1])


def _received(dealer: ConnectionDealer, slot: int) -> list[socket.socket]:
    """Every connection waiting in ``slot``'s queue, as the child's socket accepts them."""
    child = handed_connections(os.dup(dealer.child_fd(slot)))
    child.setblocking(False)
    taken: list[socket.socket] = []
    try:
        while True:
            try:
                connection, _peer = child.accept()
            except BlockingIOError:
                return taken
            taken.append(connection)
    finally:
        child.close()


def _until(predicate: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_connections_opened_at_once_are_dealt_in_turn() -> None:
    with dealing(3) as dealer:
        clients = [socket.create_connection(("127.0.0.1", _port(dealer))) for _ in range(9)]
        _until(lambda: sum(dealer.dealt) == 9)
        taken = [_received(dealer, slot) for slot in range(3)]
    # The kernel's choice (SO_REUSEPORT) split 16 connections 5/11 between two children.
    assert dealer.dealt == [3, 3, 3]
    assert [len(connections) for connections in taken] == [3, 3, 3]
    # What a child gets is the client's own connection: its peer is the client.
    ends = {c.getsockname() for c in clients}
    assert {c.getpeername() for slot in taken for c in slot} == ends
    # Never inherited by a process the child starts (tesseract, PostgreSQL).
    assert not any(c.get_inheritable() for slot in taken for c in slot)
    for connection in [c for slot in taken for c in slot]:
        connection.close()
    for client in clients:
        client.close()


def test_connections_go_to_the_children_that_said_they_are_ready() -> None:
    pids: list[int | None] = [os.getpid(), os.getpid(), os.getpid()]
    with dealing(3, pids) as dealer:
        port = _port(dealer)
        clients: list[socket.socket] = []

        def connect(count: int) -> list[int]:
            before = list(dealer.dealt)
            clients.extend(socket.create_connection(("127.0.0.1", port)) for _ in range(count))
            _until(lambda: sum(dealer.dealt) == sum(before) + count)
            return [now - then for now, then in zip(dealer.dealt, before, strict=True)]

        ready(dealer, 0)
        ready(dealer, 2)
        # Slot 1's child is starting: its share goes to the others, evenly.
        assert connect(6) == [3, 0, 3]
        ready(dealer, 1)
        assert connect(6) == [2, 2, 2]
        # Slot 1's child died and another was started in its place (a new pid): until that
        # one says it is ready, slot 1 is skipped. Before, a replacement still starting held
        # every other new connection for seconds.
        pids[1] = 2**31 - 1
        assert connect(4) == [2, 0, 2]
        pids[1] = None  # not running at all
        assert connect(2) == [1, 0, 1]
        for slot in range(3):
            for connection in _received(dealer, slot):
                connection.close()
    for client in clients:
        client.close()


def test_while_no_child_is_ready_the_connections_wait_in_every_queue() -> None:
    with dealing(2) as dealer:
        clients = [socket.create_connection(("127.0.0.1", _port(dealer))) for _ in range(4)]
        _until(lambda: sum(dealer.dealt) == 4)
        assert dealer.dealt == [2, 2]
        taken = [_received(dealer, 0), _received(dealer, 1)]  # the children, once started
    assert [len(t) for t in taken] == [2, 2]
    for connection in taken[0] + taken[1]:
        connection.close()
    for client in clients:
        client.close()


@contextmanager
def small_queues(slots: int, small: set[int]) -> Generator[tuple[ConnectionDealer, socket.socket]]:
    """A dealer (not accepting) whose ``small`` slots fill after a few connections, and one
    accepted connection to deal again and again (each hand-off is a copy of it)."""
    listener = socket.create_server(("127.0.0.1", 0))
    dealer = ConnectionDealer(listener, slots)
    for slot in small:
        end = dealer._pairs[slot][0]  # pyright: ignore[reportPrivateUsage]
        end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    client = socket.create_connection(("127.0.0.1", _port(dealer)))
    served, _ = listener.accept()
    try:
        yield dealer, served
    finally:
        for slot in range(slots):
            for connection in _received(dealer, slot):
                connection.close()
        served.close()
        client.close()
        dealer.stop()
        dealer.close()


def test_a_child_whose_queue_is_full_is_skipped() -> None:
    """A stuck child (alive, never accepting) stops getting connections once its queue fills."""
    with small_queues(2, {0}) as (dealer, served):
        ready(dealer, 0)
        ready(dealer, 1)
        slots = [dealer.offer(served) for _ in range(100)]
        assert None not in slots
        assert slots[-20:] == [1] * 20, "the full queue is still dealt to"
        assert 0 < dealer.dealt[0] < 20 and dealer.dealt[0] + dealer.dealt[1] == 100


def test_every_queue_full_a_connection_is_offered_again_then_dropped() -> None:
    with small_queues(2, {0, 1}) as (dealer, served):
        dealt = [dealer.offer(served)]
        while dealt[-1] is not None and len(dealt) < 100:
            dealt.append(dealer.offer(served))
        assert dealt[:2] == [0, 1]
        # Every queue full: not taken now (the dealer keeps it and offers it again).
        assert dealt[-1] is None and 2 < len(dealt) < 100
        assert sum(dealer.dealt) == len(dealt) - 1
        for connection in _received(dealer, 0):  # that child takes what it was handed
            connection.close()
        assert dealer.offer(served) == 0  # room again


def test_connections_no_child_takes_wait_side_by_side_then_are_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each waits its own 5 s (here 0.5), not one after another; then its client sees the end."""
    monkeypatch.setattr(handoff, "DEAL_TIMEOUT_SECONDS", 0.5)
    listener = socket.create_server(("127.0.0.1", 0))
    dealer = ConnectionDealer(listener, 1)
    full = dealer._pairs[0][0]  # pyright: ignore[reportPrivateUsage]
    full.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    filler = socket.create_connection(("127.0.0.1", _port(dealer)))
    served, _ = listener.accept()
    while dealer.offer(served) is not None:  # the one child's queue, full
        pass
    dealer.start(running=lambda _slot: os.getpid())
    clients = [socket.create_connection(("127.0.0.1", _port(dealer))) for _ in range(4)]
    try:
        waiting = dealer._waiting  # pyright: ignore[reportPrivateUsage]
        # All four wait at once. Before, one connection was offered for 5 s while the next
        # waited in the backlog: the fourth was closed after 20 s.
        _until(lambda: len(waiting) == 4)
        for client in clients:
            client.settimeout(10)
            assert client.recv(1) == b""  # closed by the dealer, never served
        _until(lambda: len(waiting) == 0)
    finally:
        for client in clients:
            client.close()
        for connection in _received(dealer, 0):
            connection.close()
        served.close()
        filler.close()
        dealer.stop()
        dealer.close()


def test_a_hand_off_without_a_descriptor_is_said_and_skipped() -> None:
    """No descriptor left in the child: the system closes the connection; the log says so."""
    parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    child = handed_connections(child_end.detach())
    try:
        parent_end.send(b"c")  # as the kernel leaves it when it could not install the descriptor
        with capture_logs() as logs, pytest.raises(ConnectionAbortedError):
            child.accept()
        assert [entry["event"] for entry in logs] == ["connection_lost_in_handoff"]
    finally:
        parent_end.close()
        child.close()


async def test_a_child_serves_the_connections_it_is_handed() -> None:
    """asyncio serves the child's socket as a listening one; the bytes are the client's."""
    with dealing(2) as dealer:
        peers: list[object] = []

        class Echo(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                self.transport = transport
                peers.append(transport.get_extra_info("peername"))

            def data_received(self, data: bytes) -> None:
                assert isinstance(self.transport, asyncio.Transport)
                self.transport.write(b"slot says " + data)

        loop = asyncio.get_running_loop()
        servers = [
            await loop.create_server(Echo, sock=handed_connections(os.dup(dealer.child_fd(s))))
            for s in range(2)
        ]
        try:
            answers = []
            for n in range(4):
                reader, writer = await asyncio.open_connection("127.0.0.1", _port(dealer))
                writer.write(f"hello {n}".encode())
                answers.append((await reader.read(100), writer.get_extra_info("sockname")))
                writer.close()
                await writer.wait_closed()
        finally:
            for server in servers:
                server.close()
                await server.wait_closed()
    assert [answer for answer, _ in answers] == [f"slot says hello {n}".encode() for n in range(4)]
    assert peers == [sockname for _, sockname in answers]
    assert dealer.dealt == [2, 2]


async def test_a_child_whose_parent_is_gone_stops_watching_the_hand_off() -> None:
    """The hand-off at its end: said once, then no longer watched (it reads as ready forever).

    The child stops by the orphan watch every child has (``exit_when_orphaned``), once.
    """
    parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    child = handed_connections(child_end.detach())
    with capture_logs() as logs:
        server = await asyncio.get_running_loop().create_server(asyncio.Protocol, sock=child)
        parent_end.close()
        deadline = time.monotonic() + 5
        while not any(entry["event"] == "connection_handoff_closed" for entry in logs):
            assert time.monotonic() < deadline, "the child did not notice"
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # a reader left in place would be called on every turn
        server.close()
        await server.wait_closed()
    closed = [entry for entry in logs if entry["event"] == "connection_handoff_closed"]
    assert len(closed) == 1
