"""Fixtures: the Jina protocol server on 127.0.0.1, a recording sleep, a tiny clip model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

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


@pytest.fixture(scope="module")
def clip_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tiny, randomly initialised clip model directory for a test module."""
    from memory_db.testing.clip_model import write_tiny_model

    return write_tiny_model(tmp_path_factory.mktemp("models") / "tiny-clip")
