"""Generated image context (docs/generated-context.md): its view and the whitelist.

A vision model's answer reaches storage only through the gate of
:mod:`memory_db.describing.gating` (one JSON document, the schema, bound to the SHA-256 of the
rendition it describes). From a stored context only ``caption``, ``visibleText`` and
``subjects`` reach search: they become the asset's ``generated_text``, which the full-text
document reads at its lowest weight and the fused text reads after the caller's own words
(:func:`memory_tools.ingest.plan.fused_text`). ``setting``, ``kind``, ``language`` and the
safety flags are kept for people to read and never indexed. A caller's title and description
are never replaced. The describe job and a person's review live in
:mod:`memory_tools.jobs.describe`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from memory_db import AssetRecord
from memory_db.describing import ImageContext, PageContext
from memory_db.errors import ContextRefused
from memory_db.logs import get_logger
from memory_db.repositories import ContextRecord
from memory_tools.wire import WireModel

log = get_logger(__name__)


class GeneratedContextView(WireModel):
    """An image's generated context: what a vision model said, gated and bound to its bytes."""

    source: Literal["generated"] = Field(
        default="generated", description="Always generated: no person wrote these words."
    )
    caption: str
    visible_text: str = Field(description="Text the model read in the image, verbatim.")
    subjects: list[str]
    setting: str = Field(description="Shown to people; never indexed.")
    kind: str = Field(
        description="photo, screenshot, chart, diagram, document, illustration or meme."
    )
    language: str | None
    safety: dict[str, bool] = Field(description="Content flags; never indexed.")
    model: str = Field(description="The vision model that generated it.")
    generated_at: datetime
    source_sha256: str = Field(description="SHA-256 of the rendition it was generated from.")
    review: str = Field(description="unreviewed, or accepted by a person.")
    reviewed_at: datetime | None


def generated_words(context: ImageContext) -> str | None:
    """The whitelisted words of a context: caption, visible text and subjects, nothing else."""
    parts = [context.caption, context.visible_text, ", ".join(context.subjects)]
    text = "\n".join(part.strip() for part in parts if part.strip())
    return text or None


def page_context(asset: AssetRecord) -> PageContext:
    """What the page around an image said about it (quoted to the model, never obeyed)."""
    ref = asset.source_ref

    def text(value: object) -> str | None:
        return value if isinstance(value, str) and value.strip() else None

    return PageContext(
        title=text(ref.get("pageTitle")),
        alt_text=text(asset.alt_text) or text(ref.get("altText")),
        caption=text(ref.get("caption")),
    )


def context_view(record: ContextRecord | None) -> GeneratedContextView | None:
    """The view of a stored context; ``None`` when there is none or it is stale.

    A stale context (the asset's bytes differ from the ones it describes) is never shown or
    used. What is read is validated against the schema again: nothing off-schema is returned.
    """
    if record is None or not record.current:
        return None
    try:
        context = ImageContext.from_json(record.context)
    except ContextRefused:
        log.warning("stored_context_invalid", asset_id=record.asset_id, exc_info=True)
        return None
    return GeneratedContextView(
        caption=context.caption,
        visible_text=context.visible_text,
        subjects=list(context.subjects),
        setting=context.setting,
        kind=context.kind,
        language=context.language,
        safety=dict(context.safety),
        model=record.model,
        generated_at=record.generated_at,
        source_sha256=record.source_sha256,
        review=record.review,
        reviewed_at=record.reviewed_at,
    )


__all__ = [
    "GeneratedContextView",
    "context_view",
    "generated_words",
    "page_context",
]
