"""``OpenAIDescriber``: an OpenAI-compatible chat-completions client for vision models.

One request per image: the fixed system prompt, the image as a ``data:`` URL and the page
context as a quoted data block (:mod:`memory_db.describing.prompt`). The same discipline as
the Jina client: retries 429, 5xx, timeouts and connection failures with capped exponential
backoff and jitter (honouring ``Retry-After``), rotates to the next key of the pool on rate
limits, rests a key the provider rejects (401) for ``key_cooldown`` seconds and then tries it
again (a key revoked by mistake and restored, or a provider's passing auth fault, must not stop
describing until a restart); while every key rests, a request is ``ProviderUnavailable`` so the
worker retries its job like an outage. Other 4xx are permanent. The answer body is
read up to ``max_answer_bytes`` and refused past it, before anything parses it. Logs model,
status, latency, request id and token counts; never the image, the page text or the answer.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio
import httpx

from memory_db.describing.prompt import chat_messages
from memory_db.describing.types import DescribeAnswer, DescribeRequest
from memory_db.embedding.jina import RETRYABLE_STATUSES, retry_after_seconds
from memory_db.embedding.types import Usage
from memory_db.errors import ProviderContractError, ProviderRejected, ProviderUnavailable
from memory_db.logs import get_logger

log = get_logger(__name__)

# A chat-completions answer for one schema-bounded object is a few KB; 256 KiB leaves room
# for verbose providers and still bounds what is held and parsed.
DEFAULT_MAX_ANSWER_BYTES = 262_144
# How long a key the provider refused (401) rests before it is tried again
# (ASSET_DESCRIBE_KEY_COOLDOWN_SECONDS).
DEFAULT_KEY_COOLDOWN_SECONDS = 300.0


class _TooLarge(Exception):
    pass


def _answer_text(body: Any) -> str:
    """``choices[0].message.content`` as text (a string, or a list of text parts)."""
    if not isinstance(body, dict):
        raise ValueError("the answer is not a JSON object")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ValueError("the answer has no choices")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise ValueError("the first choice has no message")
    content = message.get("content")
    if content is None:
        return ""  # a refusal or an empty answer: the gate refuses it as not JSON
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            part["text"]
            for part in content
            if isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
        ]
        return "".join(parts)
    raise ValueError("the message content is neither text nor a list of parts")


def _usage(body: dict[str, Any]) -> Usage:
    raw = body.get("usage")
    if not isinstance(raw, dict):
        return Usage()

    def number(name: str) -> int:
        value = raw.get(name)
        return value if isinstance(value, int) and value >= 0 else 0

    prompt = number("prompt_tokens")
    total = number("total_tokens") or prompt + number("completion_tokens")
    return Usage(total_tokens=total, prompt_tokens=prompt)


class OpenAIDescriber:
    """Describes images with a vision model behind an OpenAI-compatible API."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_keys: Sequence[str] = (),
        timeout: float = 60.0,
        max_attempts: int = 4,
        backoff_base: float = 1.0,
        backoff_cap: float = 30.0,
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
        max_tokens: int = 1200,
        client: httpx.AsyncClient | None = None,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
        rng: Callable[[], float] = random.random,
        key_cooldown: float = DEFAULT_KEY_COOLDOWN_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not model:
            raise ValueError("OpenAIDescriber needs a model name")
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self._keys = list(api_keys)
        # A rejected key's index -> the clock reading after which it is tried again.
        self._resting_keys: dict[int, float] = {}
        self._key_cooldown = key_cooldown
        self._clock = clock
        self._next_key = 0
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._model = model
        self._max_attempts = max_attempts
        self._backoff_base = backoff_base
        self._backoff_cap = backoff_cap
        self._max_answer_bytes = max_answer_bytes
        self._max_tokens = max_tokens
        self._owns_client = client is None
        self._client = client or httpx.AsyncClient(
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0))
        )
        self._sleep = sleep
        self._rng = rng

    @property
    def model(self) -> str:
        """The model name sent with every request."""
        return self._model

    async def close(self) -> None:
        """Close the HTTP client if this describer created it."""
        if self._owns_client:
            await self._client.aclose()

    def _headers(self) -> tuple[int | None, dict[str, str]]:
        if not self._keys:
            return None, {}  # a local server without authentication
        now = self._clock()
        for index, until in list(self._resting_keys.items()):
            if until <= now:
                del self._resting_keys[index]
                log.info("describe_key_retried", key_index=index)
        live = [i for i in range(len(self._keys)) if i not in self._resting_keys]
        if not live:
            wait = max(0.0, min(self._resting_keys.values()) - now)
            raise ProviderUnavailable(
                "authentication",
                "every configured describe API key was rejected; "
                f"the first is tried again in {wait:.0f} s",
            )
        index = live[self._next_key % len(live)]
        return index, {"Authorization": f"Bearer {self._keys[index]}"}

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self._backoff_cap)
        ceiling = min(self._backoff_cap, self._backoff_base * (2 ** (attempt - 1)))
        return ceiling / 2 + self._rng() * ceiling / 2  # "equal jitter"

    async def _read_capped(self, response: httpx.Response) -> bytes:
        declared = response.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > self._max_answer_bytes:
            raise _TooLarge
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > self._max_answer_bytes:
                raise _TooLarge
            chunks.append(chunk)
        return b"".join(chunks)

    async def describe(self, request: DescribeRequest) -> DescribeAnswer:
        """The model's answer text for ``request`` (the caller gates it)."""
        body = {
            "model": self._model,
            "messages": chat_messages(request),
            "temperature": 0,
            "max_tokens": self._max_tokens,
        }
        last_problem = "no attempt made"
        attempt = 0
        while attempt < self._max_attempts:
            attempt += 1
            key_index, headers = self._headers()
            started = time.monotonic()
            try:
                async with self._client.stream(
                    "POST", self._url, json=body, headers=headers
                ) as response:
                    status = response.status_code
                    # An error's body is not read: its status says enough, and it is unbounded.
                    raw = await self._read_capped(response) if status == 200 else b""
            except _TooLarge:
                raise ProviderContractError(
                    "answer_too_large",
                    f"the describe answer is larger than {self._max_answer_bytes} bytes",
                ) from None
            except httpx.TimeoutException:
                last_problem = "timeout"
                log.warning(
                    "describe_request_retried", reason="timeout", attempt=attempt, exc_info=True
                )
                if attempt < self._max_attempts:
                    await self._sleep(self._backoff(attempt, None))
                continue
            except httpx.TransportError as exc:
                last_problem = f"connection failed ({type(exc).__name__})"
                log.warning(
                    "describe_request_retried", reason="connection", attempt=attempt, exc_info=True
                )
                if attempt < self._max_attempts:
                    await self._sleep(self._backoff(attempt, None))
                continue
            latency_ms = round((time.monotonic() - started) * 1000, 1)
            request_id = response.headers.get("x-request-id")
            if status == 200:
                return self._accept(raw, latency_ms, request_id)
            log.warning(
                "describe_request_failed",
                status=status,
                attempt=attempt,
                model=self._model,
                latency_ms=latency_ms,
                request_id=request_id,
            )
            if status == 401 and key_index is not None:
                # This key is refused now; the next one may not be, and this one may be again
                # after the cool-down. Not counted as an attempt.
                self._resting_keys[key_index] = self._clock() + self._key_cooldown
                log.warning("describe_key_rested", key_index=key_index, seconds=self._key_cooldown)
                attempt -= 1
                continue
            if status == 401:
                raise ProviderRejected("authentication", "the describe endpoint needs an API key")
            if status == 402:
                raise ProviderRejected(
                    "insufficient_balance", "the describe account has no balance"
                )
            if status == 403:
                raise ProviderRejected("forbidden", "the describe endpoint refused this key")
            if status in RETRYABLE_STATUSES:
                last_problem = f"HTTP {status}"
                if status == 429:
                    self._next_key += 1  # rate limits are per key: spread the load
                if attempt < self._max_attempts:
                    wait = self._backoff(
                        attempt,
                        retry_after_seconds(response.headers.get("retry-after"), time.time()),
                    )
                    await self._sleep(wait)
                continue
            raise ProviderRejected(
                "invalid_request", f"the describe endpoint answered HTTP {status}"
            )
        raise ProviderUnavailable(
            "unavailable",
            f"the describe endpoint did not answer after {self._max_attempts} attempts "
            f"({last_problem})",
        )

    def _accept(self, raw: bytes, latency_ms: float, request_id: str | None) -> DescribeAnswer:
        try:
            body = json.loads(raw)
            text = _answer_text(body)
        except ValueError as exc:
            raise ProviderContractError("malformed_response", str(exc)) from exc
        usage = _usage(body)
        log.info(
            "describe_answered",
            model=self._model,
            latency_ms=latency_ms,
            request_id=request_id,
            total_tokens=usage.total_tokens,
            answer_chars=len(text),
        )
        return DescribeAnswer(text=text, model=self._model, usage=usage, request_id=request_id)


__all__ = ["DEFAULT_MAX_ANSWER_BYTES", "OpenAIDescriber"]
