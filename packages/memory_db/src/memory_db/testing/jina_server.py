"""A real HTTP server on 127.0.0.1 that speaks the Jina embeddings protocol, with scripted faults.

It validates requests like the provider (model, task, ``input`` items of ``{"text"}``,
``{"image"}`` or ``{"content"}``, ``dimensions``, ``normalized``), answers with
``data[].embedding`` and ``usage``, and errors with ``{code, detail}``. Tests queue faults that
apply to the next requests and read back what each request carried (key, size, task).
"""

from __future__ import annotations

import functools
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from memory_db.embedding.fake import hashed_vector
from memory_db.testing.http_server import JsonHandler, LocalHttpServer

MODEL = "jina-embeddings-v5-omni-small"


@dataclass
class Fault:
    """One scripted answer: an HTTP error, a malformed success, or a slow response."""

    status: int = 200
    code: str = ""
    detail: str = ""
    retry_after: str | None = None
    only_key: str | None = None  # apply only to requests made with this key (else pass through)
    wrong_count: bool = False
    wrong_dimensions: bool = False
    nan: bool = False
    unnormalized: bool = False
    delay: float = 0.0


@dataclass
class Seen:
    """What one request carried (never stored: image payloads)."""

    key: str
    task: str
    inputs: int
    kinds: list[str]
    status: int


@dataclass
class JinaState:
    """Shared between the server thread and the test."""

    keys: set[str]
    latency: float = 0.0  # added to every request (benchmarks, crash tests)
    faults: list[Fault] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _kind(item: Any) -> str | None:
    if isinstance(item, str):
        return "text"
    if isinstance(item, dict):
        if set(item) == {"text"} and isinstance(item["text"], str):
            return "text"
        if set(item) == {"image"} and isinstance(item["image"], str):
            return "image"
        content = item.get("content")
        if (
            set(item) == {"content"}
            and isinstance(content, list)
            and content
            and all(_kind(part) in ("text", "image") for part in content)
        ):
            return "content"
    return None


def _tokens(item: Any) -> tuple[int, int]:
    kind = _kind(item)
    if kind == "text":
        text = item if isinstance(item, str) else item["text"]
        return len(text.split()), 0
    if kind == "image":
        return 0, 1000
    prompt = images = 0
    for part in item["content"]:
        p, i = _tokens(part)
        prompt, images = prompt + p, images + i
    return prompt, images


@functools.lru_cache(maxsize=8192)
def _vector_json(seed: str, dimensions: int) -> str:
    return json.dumps(hashed_vector(seed, dimensions))


class _Handler(JsonHandler):
    state: JinaState

    def _error(
        self, status: int, code: str, detail: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_payload(status, json.dumps({"code": code, "detail": detail}).encode(), headers)

    def do_POST(self) -> None:
        """``POST /v1/embeddings``."""
        state = self.state
        if self.path.rstrip("/") != "/v1/embeddings":
            self._error(404, "NOT_FOUND", "no such endpoint")
            return
        key = self.bearer_key()
        try:
            body = self.read_json()
        except ValueError:
            self._error(400, "INVALID_JSON", "body is not JSON")
            return
        inputs = body.get("input") if isinstance(body, dict) else None
        task = body.get("task") if isinstance(body, dict) else None
        kinds = [(_kind(i) or "invalid") for i in inputs] if isinstance(inputs, list) else []
        with state.lock:
            fault = None
            if state.faults and (state.faults[0].only_key in (None, key)):
                fault = state.faults.pop(0)
        status = 401 if key not in state.keys else (fault.status if fault else 200)
        with state.lock:
            state.seen.append(Seen(key, str(task), len(kinds), kinds, status))
        if state.latency:
            time.sleep(state.latency)
        if fault and fault.delay:
            time.sleep(fault.delay)
        if key not in state.keys:
            self._error(401, "AUTHN_INVALID_KEY", "invalid API key")
            return
        if fault and fault.status != 200:
            headers = {"Retry-After": fault.retry_after} if fault.retry_after else None
            self._error(
                fault.status,
                fault.code or f"HTTP_{fault.status}",
                fault.detail or "scripted",
                headers,
            )
            return
        problems = []
        if body.get("model") != MODEL:
            problems.append("unknown model")
        if task not in ("retrieval.query", "retrieval.passage"):
            problems.append("task must be retrieval.query or retrieval.passage")
        if not isinstance(inputs, list) or not inputs or "invalid" in kinds:
            problems.append("input must be a non-empty list of text, image or content items")
        dimensions = body.get("dimensions")
        if not isinstance(dimensions, int) or not 1 <= dimensions <= 1024:
            problems.append("dimensions must be 1-1024")
        if body.get("normalized") is not True:
            problems.append("normalized must be true")
        if problems or not isinstance(inputs, list) or not isinstance(dimensions, int):
            self._error(422, "VALIDATION_ERROR", "; ".join(problems))
            return
        tampered = fault is not None and (
            fault.wrong_dimensions or fault.nan or fault.unnormalized or fault.wrong_count
        )
        prompt = images = 0
        for item in inputs:
            p, i = _tokens(item)
            prompt, images = prompt + p, images + i
        usage = {"total_tokens": prompt + images, "prompt_tokens": prompt, "image_tokens": images}
        if not tampered or fault is None:
            # The common path serialises each vector once per distinct input (cached), so the
            # server's own CPU time stays small and its answer time close to ``latency``.
            entries = [
                f'{{"object":"embedding","index":{index},"embedding":'
                f"{_vector_json(json.dumps(item, sort_keys=True) + str(task), dimensions)}}}"
                for index, item in enumerate(inputs)
            ]
            head = json.dumps({"model": MODEL, "object": "list", "usage": usage})[:-1]
            self.send_payload(200, f'{head},"data":[{",".join(entries)}]}}'.encode())
            return
        data = []
        for index, item in enumerate(inputs):
            vector = hashed_vector(json.dumps(item, sort_keys=True) + str(task), dimensions)
            if fault.wrong_dimensions:
                vector = vector[:-1]
            if fault.nan and index == 0:
                vector[0] = float("nan")
            if fault.unnormalized:
                vector = [x * 2 for x in vector]
            data.append({"object": "embedding", "index": index, "embedding": vector})
        if fault.wrong_count:
            data = data[:-1]
        body_out = {"model": MODEL, "object": "list", "usage": usage, "data": data}
        self.send_payload(200, json.dumps(body_out, allow_nan=True).encode())


class JinaTestServer(LocalHttpServer):
    """Start with ``start()``; ``base_url`` ends in ``/v1`` like the real API."""

    def __init__(self, keys: set[str], *, latency: float = 0.0) -> None:
        self.state = JinaState(keys=set(keys), latency=latency)
        super().__init__(type("Handler", (_Handler,), {"state": self.state}))
