"""``OpenAIDescriber``: an OpenAI-compatible chat-completions client for vision models.

One request per image: the fixed system prompt, the image as a ``data:`` URL and the page
context as a quoted data block (:mod:`memory_db.describing.prompt`). The HTTP side is the
providers' shared :class:`~memory_db.provider_http.ProviderHttpClient`, as for Jina: it retries
429, 5xx, timeouts and connection failures with capped exponential backoff and jitter
(honouring ``Retry-After``), rotates to the next key of the pool on rate limits, rests a key the
provider rejects (401) for ``key_cooldown`` seconds and then tries it again (a key revoked by
mistake and restored, or a provider's passing auth fault, must not stop describing until a
restart); while every key rests, a request is ``ProviderUnavailable`` so the worker retries its
job like an outage. This module keeps the describe endpoint's side: the request, the status
table (other 4xx are permanent) and the answer's parser. The answer body is read up to
``max_answer_bytes`` and refused past it, before anything parses it. Logs model, status,
latency, request id and token counts; never the image, the page text or the answer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any, Unpack

from memory_db.describing.prompt import chat_messages
from memory_db.describing.types import DescribeAnswer, DescribeRequest
from memory_db.embedding.types import Usage
from memory_db.errors import ProviderContractError, ProviderRejected, ProviderUnavailable
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

# A chat-completions answer for one schema-bounded object is a few KB; 256 KiB leaves room
# for verbose providers and still bounds what is held and parsed.
DEFAULT_MAX_ANSWER_BYTES = 262_144
# How long a key the provider refused (401) rests before it is tried again
# (ASSET_DESCRIBE_KEY_COOLDOWN_SECONDS).
DEFAULT_KEY_COOLDOWN_SECONDS = 300.0


_TRANSPORT_DEFAULTS = TransportDefaults(
    timeout=60.0, max_attempts=4, backoff_base=1.0, backoff_cap=30.0
)

# Literal names: the runbooks grep for them (docs/runbooks/provider-outage.md).
_EVENTS = ProviderEvents(
    key_retried="describe_key_retried",
    key_rested="describe_key_rested",
    request_retried="describe_request_retried",
    request_failed="describe_request_failed",
)


def _keys_exhausted(wait: float) -> ProviderUnavailable:
    # Retryable: the worker waits it out like an outage while the keys rest.
    return ProviderUnavailable(
        "authentication",
        f"every configured describe API key was rejected; the first is tried again in {wait:.0f} s",
    )


def _status_error(answer: ProviderAnswer) -> ProviderRejected | None:
    """The describe endpoint's status table: the permanent refusals; ``None`` is retried."""
    status = answer.status
    if status == 401:  # only when no key was sent: a sent key rests instead
        return ProviderRejected("authentication", "the describe endpoint needs an API key")
    if status == 402:
        return ProviderRejected("insufficient_balance", "the describe account has no balance")
    if status == 403:
        return ProviderRejected("forbidden", "the describe endpoint refused this key")
    if status in RETRYABLE_STATUSES:
        return None
    return ProviderRejected("invalid_request", f"the describe endpoint answered HTTP {status}")


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
    """Describes images with a vision model behind an OpenAI-compatible API.

    ``transport`` takes the :class:`~memory_db.provider_http.TransportOptions` (timeout 60 s,
    4 attempts, backoff from 1 s capped at 30 s unless given).
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_keys: Sequence[str] = (),
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
        max_tokens: int = 1200,
        key_cooldown: float = DEFAULT_KEY_COOLDOWN_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        **transport: Unpack[TransportOptions],
    ) -> None:
        if not model:
            raise ValueError("OpenAIDescriber needs a model name")
        self._model = model
        self._max_tokens = max_tokens
        self._http = ProviderHttpClient(
            base_url.rstrip("/") + "/chat/completions",
            name="describe",
            events=_EVENTS,
            who="the describe endpoint",
            keys=KeyRing(
                api_keys,
                events=_EVENTS,
                cooldown=key_cooldown,
                exhausted=_keys_exhausted,
                clock=clock,
            ),
            status_table=_status_error,
            defaults=_TRANSPORT_DEFAULTS,
            options=transport,
            answer_limit=max_answer_bytes,
        )

    @property
    def model(self) -> str:
        """The model name sent with every request."""
        return self._model

    async def close(self) -> None:
        """Close the HTTP client if this describer created it."""
        await self._http.aclose()

    async def describe(self, request: DescribeRequest) -> DescribeAnswer:
        """The model's answer text for ``request`` (the caller gates it)."""
        body = {
            "model": self._model,
            "messages": chat_messages(request),
            "temperature": 0,
            "max_tokens": self._max_tokens,
        }
        answer = await self._http.post(body, model=self._model)
        return self._accept(answer.content, answer.latency_ms, answer.request_id)

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
