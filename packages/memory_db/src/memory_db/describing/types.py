"""What a describer takes and returns (docs/generated-context.md): an image, page text, text."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from memory_db.embedding.types import Usage

# Each piece of page context is cut to this many characters before it is sent: it is a hint,
# and an unbounded one would let a page fill the model's context.
PAGE_TEXT_MAX_CHARS = 500


@dataclass(frozen=True, slots=True)
class PageContext:
    """Text the page around an image gave about it: untrusted data, never instructions."""

    title: str | None = None
    alt_text: str | None = None
    caption: str | None = None

    def as_data(self) -> dict[str, str]:
        """The non-empty fields, each cut to ``PAGE_TEXT_MAX_CHARS``, under stable names."""
        fields = {"title": self.title, "altText": self.alt_text, "caption": self.caption}
        return {
            name: value.strip()[:PAGE_TEXT_MAX_CHARS]
            for name, value in fields.items()
            if value and value.strip()
        }


@dataclass(frozen=True, slots=True)
class DescribeRequest:
    """One image (a sanitised rendition's bytes) and what its page said about it."""

    image: bytes
    media_type: str
    page: PageContext = field(default_factory=PageContext)

    def __repr__(self) -> str:  # never print image bytes
        return f"DescribeRequest({self.media_type}, {len(self.image)} bytes)"


@dataclass(frozen=True, slots=True)
class DescribeAnswer:
    """The model's raw text answer (ungated) and what it cost."""

    text: str
    model: str
    usage: Usage = field(default_factory=Usage)
    request_id: str | None = None


@runtime_checkable
class Describer(Protocol):
    """Asks a vision model for one JSON object describing an image."""

    @property
    def model(self) -> str:
        """The model name recorded with every generated context."""
        ...

    async def describe(self, request: DescribeRequest) -> DescribeAnswer:
        """The model's answer for ``request``; provider errors as ``EmbeddingError`` subclasses."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...
