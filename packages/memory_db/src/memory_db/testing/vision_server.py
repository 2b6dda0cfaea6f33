"""A real HTTP server on 127.0.0.1 speaking OpenAI's chat-completions protocol for vision models.

It checks requests like a provider (model, ``messages`` with a system message and a user
message holding one ``image_url`` part as a ``data:`` URL), answers with ``choices`` and
``usage``, and errors with ``{"error": {...}}``. The answer's content comes from ``answer``
(called with what the request carried), so a test plays the model; scripted faults apply to
the next requests. Tests read back what each request carried: the key, the system prompt,
the text parts and the image's SHA-256 (never the image itself).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from memory_db.testing.http_server import JsonHandler, LocalHttpServer

MODEL = "test-vision-1"


@dataclass
class VisionFault:
    """One scripted answer: an HTTP error, or an oversized or malformed success."""

    status: int = 200
    retry_after: str | None = None
    oversize_bytes: int = 0  # pad a 200 answer to at least this many bytes
    malformed: bool = False


@dataclass
class VisionSeen:
    """What one request carried."""

    key: str
    status: int
    system: str = ""
    texts: list[str] = field(default_factory=list)
    image_sha256: str | None = None
    media_type: str | None = None


def _default_answer(seen: VisionSeen) -> str:
    return json.dumps(
        {
            "caption": "An image.",
            "visibleText": "",
            "subjects": [],
            "setting": "",
            "kind": "photo",
            "language": None,
            "safety": {"adult": False, "violence": False, "medical": False, "personalData": False},
        }
    )


@dataclass
class VisionState:
    """Shared between the server thread and the test."""

    keys: set[str]
    answer: Callable[[VisionSeen], str] = _default_answer
    faults: list[VisionFault] = field(default_factory=list)
    seen: list[VisionSeen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _parse_messages(body: Any, seen: VisionSeen) -> list[str]:
    problems: list[str] = []
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list) or not messages:
        return ["messages must be a non-empty list"]
    for message in messages:
        if not isinstance(message, dict) or message.get("role") not in ("system", "user"):
            problems.append("each message needs role system or user")
            continue
        content = message.get("content")
        if message["role"] == "system":
            if not isinstance(content, str):
                problems.append("the system message content must be text")
            else:
                seen.system += content
            continue
        parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
        for part in parts:
            if not isinstance(part, dict):
                problems.append("content parts must be objects")
                continue
            item: dict[str, Any] = part
            text = item.get("text")
            image = item.get("image_url")
            if item.get("type") == "text" and isinstance(text, str):
                seen.texts.append(text)
            elif item.get("type") == "image_url" and isinstance(image, dict):
                url = image.get("url", "")
                head, _, data = str(url).partition(",")
                if not head.startswith("data:") or not head.endswith(";base64"):
                    problems.append("image_url must be a base64 data URL")
                    continue
                try:
                    raw = base64.b64decode(data, validate=True)
                except (binascii.Error, ValueError):
                    problems.append("image_url data is not base64")
                    continue
                seen.image_sha256 = hashlib.sha256(raw).hexdigest()
                seen.media_type = head.removeprefix("data:").removesuffix(";base64")
            else:
                problems.append("unknown content part")
    if seen.image_sha256 is None:
        problems.append("no image part")
    return problems


class _Handler(JsonHandler):
    state: VisionState

    def _error(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        body = {"error": {"message": message, "type": "invalid_request_error", "code": status}}
        self.send_payload(status, json.dumps(body).encode(), headers)

    def do_POST(self) -> None:
        """``POST /v1/chat/completions``."""
        state = self.state
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._error(404, "no such endpoint")
            return
        key = self.bearer_key()
        try:
            body = self.read_json()
        except ValueError:
            self._error(400, "body is not JSON")
            return
        with state.lock:
            fault = state.faults.pop(0) if state.faults else None
        authorised = not state.keys or key in state.keys
        status = 401 if not authorised else (fault.status if fault else 200)
        seen = VisionSeen(key=key, status=status)
        problems = _parse_messages(body, seen)
        with state.lock:
            state.seen.append(seen)
        if not authorised:
            self._error(401, "invalid API key")
            return
        if fault and fault.status != 200:
            headers = {"Retry-After": fault.retry_after} if fault.retry_after else None
            self._error(fault.status, "scripted", headers)
            return
        if body.get("model") != MODEL:
            problems.append("unknown model")
        if problems:
            seen.status = 400
            self._error(400, "; ".join(problems))
            return
        if fault and fault.malformed:
            self.send_payload(200, b'{"choices": "nope"}')
            return
        content = state.answer(seen)
        words = len(" ".join([seen.system, *seen.texts]).split())
        answer: dict[str, Any] = {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "model": MODEL,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": words + 850,
                "completion_tokens": len(content.split()),
                "total_tokens": words + 850 + len(content.split()),
            },
        }
        if fault and fault.oversize_bytes:
            answer["padding"] = "x" * fault.oversize_bytes
        self.send_payload(200, json.dumps(answer).encode())


class VisionTestServer(LocalHttpServer):
    """Start with ``start()``; ``base_url`` ends in ``/v1`` like OpenAI's API."""

    def __init__(self, keys: set[str] | None = None) -> None:
        self.state = VisionState(keys=set(keys or ()))
        super().__init__(type("Handler", (_Handler,), {"state": self.state}))
