"""``ScriptedDescriber``: the fake shipped for tests (scripted answers and failures, no network)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from memory_db.describing.types import DescribeAnswer, DescribeRequest
from memory_db.embedding.types import Usage
from memory_db.errors import EmbeddingError

Answer = str | dict[str, Any] | EmbeddingError


@dataclass
class ScriptedDescriber:
    """Answers from ``script`` (one entry per call), else from ``by_image`` or ``default``.

    An entry is the raw answer text, a dict (sent as its JSON), or an ``EmbeddingError`` to
    raise. ``by_image`` maps an image's SHA-256 to its answer; ``default`` makes one from the
    request. Every request is kept in ``requests`` so tests can read what was sent.
    """

    script: list[Answer] = field(default_factory=list)
    by_image: dict[str, Answer] = field(default_factory=dict)
    default: Callable[[DescribeRequest], Answer] | None = None
    model_name: str = "scripted-vision-1"
    tokens_per_call: int = 100
    requests: list[DescribeRequest] = field(default_factory=list)

    @property
    def model(self) -> str:
        """The fake model's name."""
        return self.model_name

    async def describe(self, request: DescribeRequest) -> DescribeAnswer:
        """The next scripted answer, the image's own one, or the default one."""
        self.requests.append(request)
        digest = hashlib.sha256(request.image).hexdigest()
        if self.script:
            answer = self.script.pop(0)
        elif digest in self.by_image:
            answer = self.by_image[digest]
        elif self.default is not None:
            answer = self.default(request)
        else:
            raise LookupError("ScriptedDescriber has no answer for this image")
        if isinstance(answer, EmbeddingError):
            raise answer
        text = answer if isinstance(answer, str) else json.dumps(answer)
        usage = Usage(total_tokens=self.tokens_per_call, prompt_tokens=self.tokens_per_call // 2)
        return DescribeAnswer(text=text, model=self.model_name, usage=usage)

    async def close(self) -> None:
        """Nothing to release."""


__all__ = ["ScriptedDescriber"]
