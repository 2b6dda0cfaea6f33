"""Fixtures: the Jina protocol server on 127.0.0.1 and a recording sleep."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from memory_db.testing.jina_server import JinaTestServer

KEYS = ["jina_key_one", "jina_key_two", "jina_key_three"]


@pytest.fixture
def jina() -> Iterator[JinaTestServer]:
    server = JinaTestServer(set(KEYS)).start()
    try:
        yield server
    finally:
        server.stop()


class RecordingSleep:
    """Records backoff delays instead of waiting them out."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@pytest.fixture
def sleeps() -> RecordingSleep:
    return RecordingSleep()
