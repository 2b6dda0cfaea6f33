"""SIGTERM ends a command even when it lands while asyncio runs a callback."""

from __future__ import annotations

import asyncio

import pytest

from memory_tools.serving import Terminated


def test_terminated_raised_in_an_asyncio_callback_ends_the_loop() -> None:
    # The SIGTERM handler raises Terminated wherever the main thread is. Seen in CI: it landed
    # in a socket's connection_lost callback, asyncio logged and dropped it, and the worker
    # went on running. Here a callback raises it while the main task sleeps.
    def signal_arrives() -> None:
        raise Terminated

    async def command() -> None:
        asyncio.get_running_loop().call_soon(signal_arrives)
        await asyncio.sleep(2)

    with pytest.raises(Terminated):
        asyncio.run(command())
