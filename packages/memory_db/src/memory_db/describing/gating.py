"""The gate every generated image context passes before anything is kept.

1. The answer is one JSON document: the whole text, or exactly one fenced ``json`` block and
   nothing around it. Several blocks, prose around a block, or guessing an object's edges from
   the first ``{`` to the last ``}`` are refused (``context_not_json``): prose around JSON is
   where text copied from a page or an image would hide.
2. It validates against ``image-context.schema.json`` (``context_schema``): unknown fields,
   missing ones, wrong types and every over-long string or list are refused.
3. It is bound to the SHA-256 of the rendition it was generated from; once the asset's bytes
   differ it is stale and never used (``context_stale``).

A refusal raises :class:`~memory_db.errors.ContextRefused`; nothing partial is returned.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator

from memory_db.errors import ContextRefused

# An answer longer than this is refused before it is parsed (the schema's bounds allow
# about 7 KB; the margin covers JSON escapes and whitespace).
ANSWER_MAX_CHARS = 16_384

KINDS = ("photo", "screenshot", "chart", "diagram", "document", "illustration", "meme")
SAFETY_FLAGS = ("adult", "violence", "medical", "personalData")

_FENCED = re.compile(r"\A```json[ \t]*\r?\n(?P<body>.*?)\r?\n?```\Z", re.DOTALL | re.IGNORECASE)


@cache
def context_schema() -> dict[str, Any]:
    """The JSON Schema a generated context must follow (shipped with this package)."""
    text = resources.files("memory_db.describing").joinpath("image-context.schema.json")
    schema: dict[str, Any] = json.loads(text.read_text(encoding="utf-8"))
    return schema


@cache
def _validator() -> Draft202012Validator:
    schema = context_schema()
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


@dataclass(frozen=True, slots=True)
class ImageContext:
    """One schema-valid generated context.

    Only ``caption``, ``visible_text`` and ``subjects`` ever reach the search index; the rest
    is kept for people to read.
    """

    caption: str
    visible_text: str
    subjects: tuple[str, ...]
    setting: str
    kind: str
    language: str | None
    safety: dict[str, bool]

    def to_json(self) -> dict[str, Any]:
        """The schema's own shape (camelCase), as stored and returned."""
        return {
            "caption": self.caption,
            "visibleText": self.visible_text,
            "subjects": list(self.subjects),
            "setting": self.setting,
            "kind": self.kind,
            "language": self.language,
            "safety": dict(self.safety),
        }

    @classmethod
    def from_json(cls, value: Any) -> ImageContext:
        """Validate ``value`` against the schema; ``ContextRefused("context_schema")`` if not."""
        errors = sorted(_validator().iter_errors(value), key=lambda e: list(e.absolute_path))
        if errors:
            first = errors[0]
            where = "/".join(str(p) for p in first.absolute_path) or "(document)"
            # The validator's message may quote the offending value: cut it, it is model text.
            raise ContextRefused(
                "context_schema",
                f"{len(errors)} schema violation(s); first at {where}: {first.validator}",
            )
        return cls(
            caption=value["caption"],
            visible_text=value["visibleText"],
            subjects=tuple(value["subjects"]),
            setting=value["setting"],
            kind=value["kind"],
            language=value["language"],
            safety={flag: bool(value["safety"][flag]) for flag in SAFETY_FLAGS},
        )


@dataclass(frozen=True, slots=True)
class BoundContext:
    """A gated context bound to the rendition it was generated from."""

    context: ImageContext
    source_sha256: str
    model: str
    generated_at: datetime

    def require_current(self, current_sha256: str) -> ImageContext:
        """The context if the asset still has the bytes it describes; ``context_stale`` if not."""
        if current_sha256 != self.source_sha256:
            raise ContextRefused(
                "context_stale", "the image's bytes changed since this context was generated"
            )
        return self.context


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError("duplicate key")
        out[key] = value
    return out


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _loads(text: str) -> Any:
    return json.loads(text, object_pairs_hook=_refuse_duplicates, parse_constant=_refuse_constant)


def extract_document(answer: str) -> Any:
    """The one JSON document of ``answer`` (whole text or a single fenced ``json`` block)."""
    if len(answer) > ANSWER_MAX_CHARS:
        raise ContextRefused(
            "context_too_large", f"the answer has more than {ANSWER_MAX_CHARS} characters"
        )
    text = answer.strip()
    if not text:
        raise ContextRefused("context_not_json", "the answer is empty")
    try:
        return _loads(text)
    except (ValueError, RecursionError):
        pass
    match = _FENCED.match(text)
    if match is None:
        raise ContextRefused(
            "context_not_json",
            "the answer is neither one JSON document nor exactly one fenced json block",
        )
    body = match.group("body")
    if "```" in body:
        raise ContextRefused("context_not_json", "the answer has more than one fenced block")
    try:
        return _loads(body)
    except (ValueError, RecursionError):
        raise ContextRefused(
            "context_not_json", "the fenced json block is not one JSON document"
        ) from None


def gate_answer(answer: str) -> ImageContext:
    """``answer`` as a schema-valid :class:`ImageContext`, or ``ContextRefused``."""
    return ImageContext.from_json(extract_document(answer))


def bind(answer: str, *, source_sha256: str, model: str, generated_at: datetime) -> BoundContext:
    """Gate ``answer`` and bind it to the SHA-256 of the rendition the model was shown."""
    if not re.fullmatch(r"[0-9a-f]{64}", source_sha256):
        raise ValueError("source_sha256 must be a lowercase hex SHA-256")
    return BoundContext(gate_answer(answer), source_sha256, model, generated_at)


__all__ = [
    "ANSWER_MAX_CHARS",
    "KINDS",
    "SAFETY_FLAGS",
    "BoundContext",
    "ImageContext",
    "bind",
    "context_schema",
    "extract_document",
    "gate_answer",
]
