"""``JinaEmbedder``: the typed multimodal Jina client, httpx and async.

The HTTP side is the providers' shared :class:`~memory_db.provider_http.ProviderHttpClient`:
it retries 429, 524, other 5xx, timeouts and connection failures with capped exponential
backoff and jitter (honouring ``Retry-After``), rotating to the next key of the pool on rate
limits and dropping a key that the provider rejects (401: its cool-down is infinite). This
module keeps Jina's side: the request, the status table and the answer's validation.
Validation errors, exhausted balance (403 ``AUTHZ_INSUFFICIENT_BALANCE``) and unsupported media
are permanent. Logs model, task, batch size, latency and the provider's request id; never
inputs, image bytes or URLs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Unpack

from memory_db.embedding.jina_wire import input_item, parse_response, request_body
from memory_db.embedding.types import (
    EmbedResult,
    EmbedValue,
    FusedInput,
    Task,
    TextInput,
    Usage,
    check_task,
)
from memory_db.embedding.validation import combine, validate_embeddings
from memory_db.errors import ProviderContractError, ProviderRejected
from memory_db.logs import get_logger
from memory_db.provider_http import (
    RETRYABLE_STATUSES,
    KeyRing,
    ProviderAnswer,
    ProviderEvents,
    ProviderHttpClient,
    TransportDefaults,
    TransportOptions,
)

log = get_logger(__name__)

JINA_MODEL = "jina-embeddings-v5-omni-small"
FusedMode = Literal["native", "combine"]
_TRANSPORT_DEFAULTS = TransportDefaults(
    timeout=30.0, max_attempts=5, backoff_base=0.5, backoff_cap=20.0
)

# Literal names: the runbooks grep for them (docs/runbooks/provider-outage.md).
_EVENTS = ProviderEvents(
    key_retried="jina_key_retried",
    key_rested="jina_key_rested",
    request_retried="jina_request_retried",
    request_failed="jina_request_failed",
)


def _error_code(content: bytes) -> tuple[str, str]:
    """The ``code`` and (the start of) the ``detail`` of a Jina error body."""
    try:
        body = json.loads(content)
    except ValueError:
        return "", ""
    if not isinstance(body, dict):
        return "", ""
    return str(body.get("code") or ""), str(body.get("detail") or "")[:200]


def _failure_fields(answer: ProviderAnswer) -> Mapping[str, Any]:
    return {"code": _error_code(answer.content)[0]}


def _keys_exhausted(wait: float) -> ProviderRejected:
    # A refused Jina key never comes back (its cool-down is infinite): permanent.
    return ProviderRejected("authentication", "every configured Jina API key was rejected")


def _status_error(answer: ProviderAnswer) -> ProviderRejected | None:
    """Jina's status table: the permanent refusals; ``None`` is retried."""
    status = answer.status
    code, detail = _error_code(answer.content)
    if status == 403 and "BALANCE" in code.upper():
        return ProviderRejected("insufficient_balance", "the Jina account has no balance left")
    if status == 403:
        return ProviderRejected("forbidden", detail or "the provider refused this key")
    if status == 415 or "unsupported" in detail.lower():
        return ProviderRejected("unsupported_media", detail or "unsupported media")
    if status in RETRYABLE_STATUSES:
        return None
    return ProviderRejected("invalid_request", f"HTTP {status}: {detail or 'rejected'}")


class JinaEmbedder:
    """Embeds text, images and fused groups with Jina's embeddings API."""

    def __init__(
        self,
        *,
        api_keys: Sequence[str],
        base_url: str = "https://api.jina.ai/v1",
        model: str = JINA_MODEL,
        dimensions: int = 1024,
        fused_mode: FusedMode = "combine",
        fused_image_weight: float = 0.5,
        **transport: Unpack[TransportOptions],
    ) -> None:
        if not api_keys:
            raise ValueError("JinaEmbedder needs at least one API key")
        self._model = model
        self._dimensions = dimensions
        self._fused_mode: FusedMode = fused_mode
        self._fused_image_weight = fused_image_weight
        self._http = ProviderHttpClient(
            base_url.rstrip("/") + "/embeddings",
            name="jina",
            events=_EVENTS,
            who="Jina",
            keys=KeyRing(api_keys, events=_EVENTS, cooldown=math.inf, exhausted=_keys_exhausted),
            status_table=_status_error,
            defaults=_TRANSPORT_DEFAULTS,
            options=transport,
            read_failures=True,  # the status table reads Jina's error code and detail
            failure_fields=_failure_fields,
        )

    @property
    def model(self) -> str:
        """The provider model name."""
        return self._model

    @property
    def dimensions(self) -> int:
        """Vector length requested from and checked against the provider."""
        return self._dimensions

    @property
    def combines_fused(self) -> bool:
        """``combine`` mode: a fused vector is ``combine_fused(image, text)`` of two items."""
        return self._fused_mode == "combine"

    def combine_fused(self, image: Sequence[float], text: Sequence[float]) -> list[float]:
        """``normalize(w·image + (1-w)·text)``, exactly what ``embed`` returns in combine mode."""
        return combine(image, text, self._fused_image_weight)

    async def close(self) -> None:
        """Close the HTTP client if this embedder created it."""
        await self._http.aclose()

    async def embed(self, values: Sequence[EmbedValue], task: Task) -> EmbedResult:
        """One validated, normalised vector per value, in order."""
        check_task(task)
        if not values:
            return EmbedResult([], self._model, self._dimensions)
        if self._fused_mode == "native" or not any(isinstance(v, FusedInput) for v in values):
            embeddings, usage, request_id = await self._call([input_item(v) for v in values], task)
            return EmbedResult(embeddings, self._model, self._dimensions, usage, request_id)
        return await self._embed_combining(values, task)

    async def _embed_combining(self, values: Sequence[EmbedValue], task: Task) -> EmbedResult:
        """Fused values as separately embedded image and text, combined (one request)."""
        items: list[dict[str, Any]] = []
        plan: list[tuple[int, ...]] = []  # per value: positions of its image and text vectors
        for value in values:
            if isinstance(value, FusedInput):
                image_positions: list[int] = []
                for image in value.images:
                    image_positions.append(len(items))
                    items.append(input_item(image))
                text = value.text
                text_position = -1
                if text:
                    text_position = len(items)
                    items.append(input_item(TextInput(text)))
                plan.append((text_position, *image_positions))
            else:
                plan.append((len(items),))
                items.append(input_item(value))
        vectors, usage, request_id = await self._call(items, task)
        out: list[list[float]] = []
        for value, positions in zip(values, plan, strict=True):
            if not isinstance(value, FusedInput):
                out.append(vectors[positions[0]])
                continue
            text_position, *image_positions = positions
            image_vector = (
                [
                    sum(c) / len(image_positions)
                    for c in zip(*(vectors[p] for p in image_positions), strict=True)
                ]
                if image_positions
                else None
            )
            text_vector = vectors[text_position] if text_position >= 0 else None
            if image_vector is not None and text_vector is not None:
                out.append(self.combine_fused(image_vector, text_vector))
            elif image_vector is not None:
                out.append(combine(image_vector, image_vector, 1.0))
            elif text_vector is not None:
                out.append(text_vector)
            else:
                raise ProviderContractError(
                    "malformed_response", "a fused value had neither an image nor a text vector"
                )
        return EmbedResult(out, self._model, self._dimensions, usage, request_id)

    async def _call(
        self, items: list[dict[str, Any]], task: Task
    ) -> tuple[list[list[float]], Usage, str | None]:
        body = request_body(items, model=self._model, task=task, dimensions=self._dimensions)
        answer = await self._http.post(body, task=task)
        return self._accept(answer, len(items), task)

    def _accept(
        self, answer: ProviderAnswer, expected: int, task: Task
    ) -> tuple[list[list[float]], Usage, str | None]:
        try:
            raw, usage = parse_response(json.loads(answer.content))
        except ValueError as exc:
            raise ProviderContractError("malformed_response", str(exc)) from exc
        vectors = validate_embeddings(raw, expected=expected, dimensions=self._dimensions)
        used = Usage(
            usage.get("total_tokens", 0),
            usage.get("prompt_tokens", 0),
            usage.get("image_tokens", 0),
        )
        log.info(
            "jina_embedded",
            model=self._model,
            task=task,
            inputs=expected,
            latency_ms=answer.latency_ms,
            request_id=answer.request_id,
            total_tokens=used.total_tokens,
        )
        return vectors, used, answer.request_id


__all__ = ["JINA_MODEL", "FusedMode", "JinaEmbedder"]
