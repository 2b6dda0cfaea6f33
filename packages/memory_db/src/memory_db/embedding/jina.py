"""``JinaEmbedder``: the typed multimodal Jina client, httpx and async.

Retries 429, 524, other 5xx, timeouts and connection failures with capped exponential backoff
and jitter (honouring ``Retry-After``), rotating to the next key of the pool on rate limits and
dropping a key that the provider rejects (401). Validation errors, exhausted balance (403
``AUTHZ_INSUFFICIENT_BALANCE``) and unsupported media are permanent. Logs model, task, batch
size, latency and the provider's request id; never inputs, image bytes or URLs.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

import anyio
import httpx

from memory_db.embedding.jina_wire import input_item, parse_response, request_body
from memory_db.embedding.types import (
    TASKS,
    EmbedResult,
    EmbedValue,
    FusedInput,
    Task,
    TextInput,
    Usage,
)
from memory_db.embedding.validation import combine, validate_embeddings
from memory_db.errors import ProviderContractError, ProviderRejected, ProviderUnavailable
from memory_db.logs import get_logger

log = get_logger(__name__)

JINA_MODEL = "jina-embeddings-v5-omni-small"
RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504, 524})
FusedMode = Literal["native", "combine"]


def retry_after_seconds(header: str | None, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta seconds or an HTTP date)."""
    if not header:
        return None
    header = header.strip()
    if header.isdigit():
        return float(header)
    try:
        when = email.utils.parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now)


def _error_code(response: httpx.Response) -> tuple[str, str]:
    try:
        body = response.json()
    except ValueError:
        return "", ""
    if not isinstance(body, dict):
        return "", ""
    return str(body.get("code") or ""), str(body.get("detail") or "")[:200]


class JinaEmbedder:
    """Embeds text, images and fused groups with Jina's embeddings API."""

    def __init__(
        self,
        *,
        api_keys: Sequence[str],
        base_url: str = "https://api.jina.ai/v1",
        model: str = JINA_MODEL,
        dimensions: int = 1024,
        timeout: float = 30.0,
        max_attempts: int = 5,
        backoff_base: float = 0.5,
        backoff_cap: float = 20.0,
        fused_mode: FusedMode = "combine",
        fused_image_weight: float = 0.5,
        client: httpx.AsyncClient | None = None,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
        rng: Callable[[], float] = random.random,
    ) -> None:
        if not api_keys:
            raise ValueError("JinaEmbedder needs at least one API key")
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self._keys = list(api_keys)
        self._dead_keys: set[int] = set()
        self._next_key = 0
        self._url = base_url.rstrip("/") + "/embeddings"
        self._model = model
        self._dimensions = dimensions
        self._max_attempts = max_attempts
        self._backoff_base = backoff_base
        self._backoff_cap = backoff_cap
        self._fused_mode: FusedMode = fused_mode
        self._fused_image_weight = fused_image_weight
        self._owns_client = client is None
        self._client = client or httpx.AsyncClient(
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0))
        )
        self._sleep = sleep
        self._rng = rng

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
        if self._owns_client:
            await self._client.aclose()

    async def embed(self, values: Sequence[EmbedValue], task: Task) -> EmbedResult:
        """One validated, normalised vector per value, in order."""
        if task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}")
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

    def _key(self) -> tuple[int, str]:
        live = [i for i in range(len(self._keys)) if i not in self._dead_keys]
        if not live:
            raise ProviderRejected("authentication", "every configured Jina API key was rejected")
        index = live[self._next_key % len(live)]
        return index, self._keys[index]

    def _rotate(self) -> None:
        self._next_key += 1

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self._backoff_cap)
        ceiling = min(self._backoff_cap, self._backoff_base * (2 ** (attempt - 1)))
        return ceiling / 2 + self._rng() * ceiling / 2  # "equal jitter"

    async def _call(
        self, items: list[dict[str, Any]], task: Task
    ) -> tuple[list[list[float]], Usage, str | None]:
        body = request_body(items, model=self._model, task=task, dimensions=self._dimensions)
        last_problem = "no attempt made"
        attempt = 0
        while attempt < self._max_attempts:
            attempt += 1
            key_index, key = self._key()
            started = time.monotonic()
            try:
                response = await self._client.post(
                    self._url, json=body, headers={"Authorization": f"Bearer {key}"}
                )
            except httpx.TimeoutException:
                last_problem = "timeout"
                log.warning(
                    "jina_request_retried",
                    reason="timeout",
                    attempt=attempt,
                    task=task,
                    exc_info=True,
                )
                if attempt < self._max_attempts:
                    await self._sleep(self._backoff(attempt, None))
                continue
            except httpx.TransportError as exc:
                last_problem = f"connection failed ({type(exc).__name__})"
                log.warning(
                    "jina_request_retried",
                    reason="connection",
                    attempt=attempt,
                    task=task,
                    exc_info=True,
                )
                if attempt < self._max_attempts:
                    await self._sleep(self._backoff(attempt, None))
                continue
            latency_ms = round((time.monotonic() - started) * 1000, 1)
            request_id = response.headers.get("x-request-id")
            status = response.status_code
            if status == 200:
                return self._accept(response, len(items), task, latency_ms, request_id)
            code, detail = _error_code(response)
            log.warning(
                "jina_request_failed",
                status=status,
                code=code,
                attempt=attempt,
                task=task,
                latency_ms=latency_ms,
                request_id=request_id,
            )
            if status == 401:
                # This key is bad; the next one may not be. Not counted as an attempt.
                self._dead_keys.add(key_index)
                attempt -= 1
                continue
            if status == 403 and "BALANCE" in code.upper():
                raise ProviderRejected(
                    "insufficient_balance", "the Jina account has no balance left"
                )
            if status == 403:
                raise ProviderRejected("forbidden", detail or "the provider refused this key")
            if status == 415 or "unsupported" in detail.lower():
                raise ProviderRejected("unsupported_media", detail or "unsupported media")
            if status in RETRYABLE_STATUSES:
                last_problem = f"HTTP {status}"
                if status == 429:
                    self._rotate()  # rate limits are per key: spread the load
                if attempt < self._max_attempts:
                    wait = self._backoff(
                        attempt,
                        retry_after_seconds(response.headers.get("retry-after"), time.time()),
                    )
                    await self._sleep(wait)
                continue
            raise ProviderRejected("invalid_request", f"HTTP {status}: {detail or 'rejected'}")
        raise ProviderUnavailable(
            "unavailable",
            f"Jina did not answer after {self._max_attempts} attempts ({last_problem})",
        )

    def _accept(
        self,
        response: httpx.Response,
        expected: int,
        task: Task,
        latency_ms: float,
        request_id: str | None,
    ) -> tuple[list[list[float]], Usage, str | None]:
        try:
            raw, usage = parse_response(response.json())
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
            latency_ms=latency_ms,
            request_id=request_id,
            total_tokens=used.total_tokens,
        )
        return vectors, used, request_id


__all__ = ["JINA_MODEL", "RETRYABLE_STATUSES", "FusedMode", "JinaEmbedder", "retry_after_seconds"]
