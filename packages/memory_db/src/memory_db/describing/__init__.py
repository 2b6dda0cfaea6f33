"""Describers: generated image context from a vision model, behind a strict gate.

The :class:`Describer` protocol, an OpenAI-compatible HTTP client, a scripted fake, the JSON
Schema the answers follow (``image-context.schema.json``), the prompt that keeps page text
as quoted data, and the gate (whole-document JSON, schema, binding to the image's SHA-256).
"""

from memory_db.describing.factory import build_describer
from memory_db.describing.fake import ScriptedDescriber
from memory_db.describing.gating import (
    ANSWER_MAX_CHARS,
    KINDS,
    SAFETY_FLAGS,
    BoundContext,
    ImageContext,
    bind,
    context_schema,
    extract_document,
    gate_answer,
)
from memory_db.describing.openai import DEFAULT_MAX_ANSWER_BYTES, OpenAIDescriber
from memory_db.describing.prompt import DATA_LABEL, chat_messages, page_data_block, system_prompt
from memory_db.describing.types import (
    PAGE_TEXT_MAX_CHARS,
    DescribeAnswer,
    Describer,
    DescribeRequest,
    PageContext,
)

__all__ = [
    "ANSWER_MAX_CHARS",
    "DATA_LABEL",
    "DEFAULT_MAX_ANSWER_BYTES",
    "KINDS",
    "PAGE_TEXT_MAX_CHARS",
    "SAFETY_FLAGS",
    "BoundContext",
    "DescribeAnswer",
    "DescribeRequest",
    "Describer",
    "ImageContext",
    "OpenAIDescriber",
    "PageContext",
    "ScriptedDescriber",
    "bind",
    "build_describer",
    "chat_messages",
    "context_schema",
    "extract_document",
    "gate_answer",
    "page_data_block",
    "system_prompt",
]
