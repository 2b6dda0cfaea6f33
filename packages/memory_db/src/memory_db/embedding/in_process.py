"""``InProcessEmbedder``: the ``embed`` of every embedder that computes vectors on this machine."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from memory_db.embedding.types import EmbedResult, EmbedValue, Task, Usage, check_task
from memory_db.embedding.validation import validate_embeddings
from memory_db.priority import run_cpu


class InProcessEmbedder(ABC):
    """An embedder whose vectors are computed here (the local hash model, an ONNX CLIP model).

    Subclasses give the blocking computation and its metering; ``embed`` runs the computation
    in a worker thread (it would block the event loop), validates what it made, and meters it.
    """

    @property
    @abstractmethod
    def model(self) -> str:
        """The model name recorded with every vector."""

    @property
    @abstractmethod
    def dimensions(self) -> int:
        """The length of every vector."""

    @abstractmethod
    def embed_blocking(self, values: Sequence[EmbedValue]) -> list[list[float]]:
        """One vector per value, in order, computed in the calling thread."""

    @abstractmethod
    def _usage(self, values: Sequence[EmbedValue]) -> Usage:
        """What embedding ``values`` counts as, in the ledger's tokens."""

    async def embed(self, values: Sequence[EmbedValue], task: Task) -> EmbedResult:
        """Embed in a worker thread; both tasks give the same vectors."""
        check_task(task)
        batch = list(values)
        if not batch:
            return EmbedResult([], self.model, self.dimensions, Usage(), None)
        # Niced when the worker embeds (memory_db.priority); a search's query is not.
        vectors = await run_cpu(lambda: self.embed_blocking(batch))
        checked = validate_embeddings(vectors, expected=len(batch), dimensions=self.dimensions)
        return EmbedResult(checked, self.model, self.dimensions, self._usage(batch), None)
