"""One HTTP client for the model providers: a key ring, a retry policy and one send.

The split is httpx's between transport and client. :class:`ProviderHttpClient` is the transport
side, the same for every provider: which key goes with a request (:class:`KeyRing`: the next
live key, rotated on 429 because rate limits are per key, a key the provider refused with 401
resting for a cool-down), when a request is tried again (:class:`RetryPolicy`: 429, 5xx,
timeouts and connection failures, capped exponential backoff with "equal jitter", honouring
``Retry-After``) and what "gave up" means (:class:`~memory_db.errors.ProviderUnavailable`). A
provider (``describing/openai.py``, ``embedding/jina.py``) keeps the client side: its request
body, its answer parser and its *status table*, the one function that names the permanent
error of a failed answer (or ``None`` for a transient one, which is retried).

Logs name the provider (``<name>_request_retried``, ``<name>_request_failed``,
``<name>_key_rested``, ``<name>_key_retried``) with status, attempt, latency and the provider's
request id; never a key, a request body or an answer.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import anyio
import httpx

from memory_db.errors import (
    EmbeddingError,
    ProviderContractError,
    ProviderUnavailable,
)
from memory_db.logs import get_logger

log = get_logger(__name__)

# Rate limits, server errors and Cloudflare's 524 (the origin took too long): worth a retry.
RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504, 524})


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


class TransportOptions(TypedDict, total=False):
    """What every provider's constructor takes for its HTTP side; the provider sets defaults.

    ``timeout`` bounds each request (connect at most 10 s of it); ``max_attempts`` counts
    requests, a refused key's excepted; ``backoff_base`` and ``backoff_cap`` shape the wait
    between attempts; ``client``, ``sleep`` and ``rng`` are for tests (a client of their own,
    recorded waits, fixed jitter).
    """

    timeout: float
    max_attempts: int
    backoff_base: float
    backoff_cap: float
    client: httpx.AsyncClient | None
    sleep: Callable[[float], Awaitable[None]]
    rng: Callable[[], float]


@dataclass(frozen=True, slots=True)
class TransportDefaults:
    """A provider's defaults for the numbers of :class:`TransportOptions`."""

    timeout: float
    max_attempts: int
    backoff_base: float
    backoff_cap: float


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How many requests one call may make and how long it waits between them."""

    max_attempts: int
    backoff_base: float
    backoff_cap: float
    sleep: Callable[[float], Awaitable[None]] = anyio.sleep
    rng: Callable[[], float] = random.random

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")

    def backoff(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait after failed ``attempt`` (1-based): ``Retry-After`` or equal jitter."""
        if retry_after is not None:
            return min(retry_after, self.backoff_cap)
        ceiling = min(self.backoff_cap, self.backoff_base * (2 ** (attempt - 1)))
        return ceiling / 2 + self.rng() * ceiling / 2  # "equal jitter"

    async def wait_after(self, attempt: int, retry_after: float | None = None) -> None:
        """Wait before the next attempt; not after the last one."""
        if attempt < self.max_attempts:
            await self.sleep(self.backoff(attempt, retry_after))


@dataclass(frozen=True, slots=True)
class ProviderEvents:
    """The log events of one provider, written out as literals where the provider is declared.

    An operator greps for the whole name (``jina_request_failed``, docs/runbooks): names built
    at run time could not be found in the code, so each provider spells out its own.
    """

    key_retried: str
    key_rested: str
    request_retried: str
    request_failed: str


class KeyRing:
    """A provider's API keys: which one the next request sends, and which ones rest.

    A key the provider refused (401) rests for ``cooldown`` seconds of ``clock`` and is then
    tried again (``math.inf``: never). While every key rests, :meth:`headers` raises what
    ``exhausted(seconds until the first is tried again)`` returns. No keys at all means no
    ``Authorization`` header (a local server without authentication).
    """

    def __init__(
        self,
        keys: Sequence[str],
        *,
        events: ProviderEvents,
        cooldown: float,
        exhausted: Callable[[float], EmbeddingError],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._keys = list(keys)
        self._events = events
        self._cooldown = cooldown
        self._exhausted = exhausted
        self._clock = clock
        # A refused key's index -> the clock reading after which it is tried again.
        self._resting: dict[int, float] = {}
        self._next = 0

    def headers(self) -> tuple[int | None, dict[str, str]]:
        """The index of the key to send (``None``: no keys) and its ``Authorization`` header."""
        if not self._keys:
            return None, {}
        now = self._clock()
        for index, until in list(self._resting.items()):
            if until <= now:
                del self._resting[index]
                log.info(self._events.key_retried, key_index=index)
        live = [i for i in range(len(self._keys)) if i not in self._resting]
        if not live:
            raise self._exhausted(max(0.0, min(self._resting.values()) - now))
        index = live[self._next % len(live)]
        return index, {"Authorization": f"Bearer {self._keys[index]}"}

    def rotate(self) -> None:
        """Send the next live key from now on (rate limits are per key: spread the load)."""
        self._next += 1

    def rest(self, index: int) -> None:
        """The provider refused key ``index``: rest it for the cool-down."""
        self._resting[index] = self._clock() + self._cooldown
        log.warning(self._events.key_rested, key_index=index, seconds=self._cooldown)


@dataclass(frozen=True, slots=True)
class ProviderAnswer:
    """One HTTP answer of a provider, its body read (a failure's only if the provider asks)."""

    status: int
    content: bytes
    headers: httpx.Headers
    latency_ms: float

    @property
    def request_id(self) -> str | None:
        """The provider's id of the request, for its support and our logs."""
        return self.headers.get("x-request-id")


StatusTable = Callable[[ProviderAnswer], EmbeddingError | None]
"""A provider's permanent error for a failed answer, or ``None`` when it is worth a retry."""


class _TooLarge(Exception):
    pass


class ProviderHttpClient:
    """POSTs JSON to one provider endpoint with the key ring and the retry policy.

    ``name`` names the provider in size errors and ``events`` its log events; ``who`` names
    the endpoint in errors ("the describe endpoint did not answer after 4 attempts
    (timeout)"). ``answer_limit`` bounds the bytes of an answer read (``None``: unbounded);
    ``read_failures`` says whether a failed answer's body is read for ``status_table`` (else it
    is left unread: it is unbounded, and its status says enough). ``failure_fields`` adds
    provider fields to the ``request_failed`` log.
    """

    def __init__(
        self,
        url: str,
        *,
        name: str,
        events: ProviderEvents,
        who: str,
        keys: KeyRing,
        status_table: StatusTable,
        defaults: TransportDefaults,
        options: TransportOptions,
        answer_limit: int | None = None,
        read_failures: bool = False,
        failure_fields: Callable[[ProviderAnswer], Mapping[str, Any]] | None = None,
    ) -> None:
        self._url = url
        self._name = name
        self._events = events
        self._who = who
        self._keys = keys
        self._status_table = status_table
        self._answer_limit = answer_limit
        self._read_failures = read_failures
        self._failure_fields = failure_fields
        self.retry = RetryPolicy(
            max_attempts=options.get("max_attempts", defaults.max_attempts),
            backoff_base=options.get("backoff_base", defaults.backoff_base),
            backoff_cap=options.get("backoff_cap", defaults.backoff_cap),
            sleep=options.get("sleep", anyio.sleep),
            rng=options.get("rng", random.random),
        )
        client = options.get("client")
        self._owns_client = client is None
        timeout = options.get("timeout", defaults.timeout)
        self._client = client or httpx.AsyncClient(
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0))
        )

    async def aclose(self) -> None:
        """Close the HTTP client if this one created it."""
        if self._owns_client:
            await self._client.aclose()

    async def post(self, body: Any, **log_fields: Any) -> ProviderAnswer:
        """The provider's 200 answer to ``body``, after the retries; ``log_fields`` go to logs.

        Raises the status table's error for a permanent refusal, ``ProviderContractError``
        (``answer_too_large``) for an answer over the limit, the key ring's error when every
        key rests and ``ProviderUnavailable`` when the attempts are spent.
        """
        retry = self.retry
        last_problem = "no attempt made"
        attempt = 0
        while attempt < retry.max_attempts:
            attempt += 1
            key_index, headers = self._keys.headers()
            try:
                answer = await self._send_once(body, headers)
            except httpx.TimeoutException:
                last_problem = "timeout"
                self._log_retry("timeout", attempt, log_fields)
                await retry.wait_after(attempt)
                continue
            except httpx.TransportError as exc:
                last_problem = f"connection failed ({type(exc).__name__})"
                self._log_retry("connection", attempt, log_fields)
                await retry.wait_after(attempt)
                continue
            if answer.status == 200:
                return answer
            self._log_failure(answer, attempt, log_fields)
            if answer.status == 401 and key_index is not None:
                # This key is refused now; the next one may not be, and this one may be again
                # after the cool-down. Not counted as an attempt.
                self._keys.rest(key_index)
                attempt -= 1
                continue
            refusal = self._status_table(answer)
            if refusal is not None:
                raise refusal
            last_problem = f"HTTP {answer.status}"
            if answer.status == 429:
                self._keys.rotate()
            retry_after = retry_after_seconds(answer.headers.get("retry-after"), time.time())
            await retry.wait_after(attempt, retry_after)
        raise ProviderUnavailable(
            "unavailable",
            f"{self._who} did not answer after {retry.max_attempts} attempts ({last_problem})",
        )

    async def _send_once(self, body: Any, headers: dict[str, str]) -> ProviderAnswer:
        started = time.monotonic()
        try:
            async with self._client.stream(
                "POST", self._url, json=body, headers=headers
            ) as response:
                read = response.status_code == 200 or self._read_failures
                content = await self._read_capped(response) if read else b""
        except _TooLarge:
            raise ProviderContractError(
                "answer_too_large",
                f"the {self._name} answer is larger than {self._answer_limit} bytes",
            ) from None
        latency_ms = round((time.monotonic() - started) * 1000, 1)
        return ProviderAnswer(response.status_code, content, response.headers, latency_ms)

    async def _read_capped(self, response: httpx.Response) -> bytes:
        limit = self._answer_limit
        declared = response.headers.get("content-length")
        if limit is not None and declared and declared.isdigit() and int(declared) > limit:
            raise _TooLarge
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if limit is not None and size > limit:
                raise _TooLarge
            chunks.append(chunk)
        return b"".join(chunks)

    def _log_retry(self, reason: str, attempt: int, fields: Mapping[str, Any]) -> None:
        log.warning(
            self._events.request_retried,
            reason=reason,
            attempt=attempt,
            exc_info=True,
            **fields,
        )

    def _log_failure(self, answer: ProviderAnswer, attempt: int, fields: Mapping[str, Any]) -> None:
        extra = self._failure_fields(answer) if self._failure_fields else {}
        log.warning(
            self._events.request_failed,
            status=answer.status,
            attempt=attempt,
            latency_ms=answer.latency_ms,
            request_id=answer.request_id,
            **extra,
            **fields,
        )


__all__ = [
    "RETRYABLE_STATUSES",
    "KeyRing",
    "ProviderAnswer",
    "ProviderEvents",
    "ProviderHttpClient",
    "RetryPolicy",
    "StatusTable",
    "TransportDefaults",
    "TransportOptions",
    "retry_after_seconds",
]
