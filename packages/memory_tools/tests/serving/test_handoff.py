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

from memory_tools.serving import handoff
from memory_tools.serving.handoff import ConnectionDealer, handed_connections


@contextmanager
def dealing(slots: int, alive: set[int] | None = None) -> Generator[ConnectionDealer]:
    """A dealer on a loopback listener, accepting until the block ends."""
    listener = socket.create_server(("127.0.0.1", 0))
    dealer = ConnectionDealer(listener, slots)
    dealer.start(alive=lambda slot: alive is None or slot in alive)
    try:
        yield dealer
    finally:
        dealer.stop()
        dealer.close()


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
    for connection in [c for slot in taken for c in slot]:
        connection.close()
    for client in clients:
        client.close()


def test_a_dead_child_is_skipped_until_it_runs_again() -> None:
    alive = {0, 2}
    with dealing(3, alive) as dealer:
        clients = [socket.create_connection(("127.0.0.1", _port(dealer))) for _ in range(6)]
        _until(lambda: sum(dealer.dealt) == 6)
        assert dealer.dealt[1] == 0 and dealer.dealt[0] + dealer.dealt[2] == 6
        alive.add(1)  # restarted
        clients += [socket.create_connection(("127.0.0.1", _port(dealer))) for _ in range(3)]
        _until(lambda: sum(dealer.dealt) == 9)
        assert dealer.dealt[1] == 1
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
        slots = [dealer.deal(served) for _ in range(100)]
        assert None not in slots
        assert slots[-20:] == [1] * 20, "the full queue is still dealt to"
        assert 0 < dealer.dealt[0] < 20 and dealer.dealt[0] + dealer.dealt[1] == 100


def test_a_connection_no_child_takes_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handoff, "DEAL_TIMEOUT_SECONDS", 0.2)
    with small_queues(2, {0, 1}) as (dealer, served):
        dealt = [dealer.deal(served), dealer.deal(served)]
        while dealt[-1] is not None and len(dealt) < 100:
            dealt.append(dealer.deal(served))
        assert dealt[:2] == [0, 1]
        # Every queue full: after the wait, dropped (the caller closes it), not queued.
        assert dealt[-1] is None and 2 < len(dealt) < 100
        assert sum(dealer.dealt) == len(dealt) - 1


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


async def test_a_child_whose_parent_is_gone_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hand-off at its end: the child stops watching it and stops itself (SIGTERM)."""
    signalled: list[int] = []

    def kill(_pid: int, signum: int) -> None:
        signalled.append(signum)

    monkeypatch.setattr(os, "kill", kill)
    parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    child = handed_connections(child_end.detach())
    server = await asyncio.get_running_loop().create_server(asyncio.Protocol, sock=child)
    parent_end.close()
    deadline = time.monotonic() + 5
    while not signalled:
        assert time.monotonic() < deadline, "the child did not notice"
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)  # and does not spin on the end: called once
    assert len(signalled) == 1
    server.close()
    await server.wait_closed()
