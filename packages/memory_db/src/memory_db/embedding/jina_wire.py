"""The Jina embeddings wire format, in one small place.

Jina documents text as ``{"text": ...}`` and images as ``{"image": "<url or base64>"}``. The
fused shape ``{"content": [...]}`` is not confirmed by a public API schema, so it is
built only here and only when ``fused_mode="native"``; the default ``"combine"`` embeds the image
and the text separately and combines them (see ``validation.combine``).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

from memory_db.embedding.types import EmbedValue, FusedInput, ImageInput, Task, TextInput
from memory_db.errors import ProviderRejected


def image_item(value: ImageInput) -> dict[str, str]:
    """``{"image": url}`` or ``{"image": base64}``."""
    if value.url is not None:
        return {"image": value.url}
    if value.data is None:
        raise ProviderRejected("empty_input", "an image input needs a URL or bytes")
    return {"image": base64.b64encode(value.data).decode("ascii")}


def text_item(value: TextInput) -> dict[str, str]:
    """``{"text": ...}``."""
    return {"text": value.text}


def fused_item(value: FusedInput) -> dict[str, Any]:
    """``{"content": [{"text": ...}, {"image": ...}]}`` in the caller's order."""
    return {
        "content": [
            text_item(part) if isinstance(part, TextInput) else image_item(part)
            for part in value.parts
        ]
    }


def input_item(value: EmbedValue) -> dict[str, Any]:
    """The wire item of one value."""
    if isinstance(value, TextInput):
        return text_item(value)
    if isinstance(value, ImageInput):
        return image_item(value)
    return fused_item(value)


def request_body(
    items: Sequence[dict[str, Any]], *, model: str, task: Task, dimensions: int
) -> dict[str, Any]:
    """The JSON body of ``POST {base}/embeddings``."""
    return {
        "model": model,
        "task": task,
        "dimensions": dimensions,
        "normalized": True,
        "embedding_type": "float",
        "input": list(items),
    }


def parse_response(body: Any) -> tuple[list[list[float]], dict[str, int]]:
    """Vectors in input order and the usage block; raises ``ValueError`` on a malformed body."""
    if not isinstance(body, dict) or not isinstance(body.get("data"), list):
        raise ValueError("response has no data list")
    rows: list[Any] = body["data"]
    indexed: list[tuple[int, list[float]]] = []
    for position, row in enumerate(rows):
        if not isinstance(row, dict) or not isinstance(row.get("embedding"), list):
            raise ValueError(f"data[{position}] has no embedding list")
        index = row.get("index", position)
        if not isinstance(index, int):
            raise ValueError(f"data[{position}].index is not an integer")
        indexed.append((index, row["embedding"]))
    indexed.sort(key=lambda pair: pair[0])
    usage_raw = body.get("usage") or {}
    usage = {
        key: int(usage_raw.get(key) or 0)
        for key in ("total_tokens", "prompt_tokens", "image_tokens")
        if isinstance(usage_raw, dict)
    }
    return [vector for _index, vector in indexed], usage
