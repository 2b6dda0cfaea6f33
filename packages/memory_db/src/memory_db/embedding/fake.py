"""``ScriptedEmbedder``: the fake shipped for tests (deterministic vectors, scripted failures)."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from memory_db.embedding.types import (
    EmbedResult,
    EmbedValue,
    ImageInput,
    Task,
    TextInput,
    Usage,
    check_task,
)
from memory_db.embedding.validation import validate_embeddings
from memory_db.errors import EmbeddingError


def _describe(value: EmbedValue) -> str:
    if isinstance(value, TextInput):
        return "text:" + value.text
    if isinstance(value, ImageInput):
        source = value.data if value.data is not None else (value.url or "").encode()
        return "image:" + hashlib.sha256(source).hexdigest()
    return "fused:" + "|".join(_describe(part) for part in value.parts)


def hashed_vector(seed: str, dimensions: int) -> list[float]:
    """A deterministic unit vector derived from ``seed``."""
    raw: list[float] = []
    counter = 0
    while len(raw) < dimensions:
        digest = hashlib.sha256(f"{seed}#{counter}".encode()).digest()
        raw.extend((byte - 127.5) / 127.5 for byte in digest)
        counter += 1
    vector = raw[:dimensions]
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector]


@dataclass
class ScriptedEmbedder:
    """Returns hashed unit vectors; ``script`` holds failures or raw outputs for the next calls.

    Each script entry is consumed by one ``embed`` call: an ``EmbeddingError`` is raised, a list
    of vectors is returned as the provider's raw output (and validated like any provider's).
    """

    model_name: str = "fake-embedder"
    dims: int = 1024
    script: list[EmbeddingError | list[list[float]]] = field(default_factory=list)
    calls: list[tuple[Task, int]] = field(default_factory=list)

    @property
    def model(self) -> str:
        """The configured model name."""
        return self.model_name

    @property
    def dimensions(self) -> int:
        """The configured vector length."""
        return self.dims

    async def embed(self, values: Sequence[EmbedValue], task: Task) -> EmbedResult:
        """Follow the script, else hash each value into a vector."""
        check_task(task)
        self.calls.append((task, len(values)))
        raw: list[list[float]]
        if self.script:
            step = self.script.pop(0)
            if isinstance(step, EmbeddingError):
                raise step
            raw = step
        else:
            raw = [hashed_vector(_describe(v), self.dims) for v in values]
        checked = validate_embeddings(raw, expected=len(values), dimensions=self.dims)
        return EmbedResult(checked, self.model_name, self.dims, Usage(len(values), len(values), 0))

    async def close(self) -> None:
        """Nothing to release."""
