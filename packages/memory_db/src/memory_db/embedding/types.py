"""What an embedder takes and returns (docs/design.md#embedders): typed values, a task, batches."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

Task = Literal["retrieval.query", "retrieval.passage"]
TASKS: tuple[Task, ...] = ("retrieval.query", "retrieval.passage")


def check_task(task: str) -> None:
    """Refuse a task that is not one of ``TASKS`` (a programming error, not a caller's)."""
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}")


@dataclass(frozen=True, slots=True)
class TextInput:
    """Text to embed."""

    text: str


@dataclass(frozen=True, slots=True)
class ImageInput:
    """An image as bytes (sent as base64) or as a short-lived URL: exactly one of them."""

    data: bytes | None = None
    url: str | None = None

    def __post_init__(self) -> None:
        if (self.data is None) == (self.url is None):
            raise ValueError("an image input needs exactly one of data or url")

    def __repr__(self) -> str:  # never print image bytes or signed URLs
        return f"ImageInput({'bytes' if self.data is not None else 'url'})"


@dataclass(frozen=True, slots=True)
class FusedInput:
    """Ordered text and image parts embedded as one vector."""

    parts: tuple[TextInput | ImageInput, ...]

    def __post_init__(self) -> None:
        if not self.parts:
            raise ValueError("a fused input needs at least one part")

    @property
    def text(self) -> str:
        """The text parts joined, in order."""
        return "\n".join(p.text for p in self.parts if isinstance(p, TextInput))

    @property
    def images(self) -> tuple[ImageInput, ...]:
        """The image parts, in order."""
        return tuple(p for p in self.parts if isinstance(p, ImageInput))


EmbedValue = TextInput | ImageInput | FusedInput


@dataclass(frozen=True, slots=True)
class Usage:
    """Provider token usage of one call (docs/design.md#ledgers)."""

    total_tokens: int = 0
    prompt_tokens: int = 0
    image_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.total_tokens + other.total_tokens,
            self.prompt_tokens + other.prompt_tokens,
            self.image_tokens + other.image_tokens,
        )


@dataclass(frozen=True, slots=True)
class EmbedResult:
    """One vector per input value, in input order, with what it cost."""

    embeddings: list[list[float]]
    model: str
    dimensions: int
    usage: Usage = field(default_factory=Usage)
    request_id: str | None = None


@runtime_checkable
class Embedder(Protocol):
    """Embeds batches of text, image and fused values for an explicit task."""

    @property
    def model(self) -> str:
        """The model name recorded with every vector (vectors of different models never mix)."""
        ...

    @property
    def dimensions(self) -> int:
        """The length of every vector."""
        ...

    async def embed(self, values: Sequence[EmbedValue], task: Task) -> EmbedResult:
        """Embed ``values`` (one vector each, same order) for ``task``."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


@runtime_checkable
class FusesByCombining(Protocol):
    """An embedder whose fused vector of an image and a text is a combination of their vectors.

    Then a fused vector needs only the text sent when the image's vector (same model, task
    ``retrieval.passage``) is already known: the worker reuses an asset's visual vector instead
    of paying for the image twice (docs/embeddings.md#what-is-sent).
    """

    @property
    def combines_fused(self) -> bool:
        """Whether fused values are made by :meth:`combine_fused` (else sent as one group)."""
        ...

    def combine_fused(self, image: Sequence[float], text: Sequence[float]) -> list[float]:
        """The fused vector of an image vector and a text vector, as ``embed`` would make it."""
        ...
