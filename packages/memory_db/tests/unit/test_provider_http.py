"""The shared provider client's parts, on their own: the key ring, the retry policy, one send.

The providers' own tests (``describing/test_openai_describer.py``, ``embedding/test_jina_faults.py``)
drive the same code through a real HTTP server; these pin the rules both rely on.
"""

from __future__ import annotations

import math

import httpx
import pytest

from memory_db.errors import ProviderRejected, ProviderUnavailable
from memory_db.provider_http import (
    KeyRing,
    ProviderAnswer,
    ProviderEvents,
    ProviderHttpClient,
    RetryPolicy,
    TransportDefaults,
    TransportOptions,
    retry_after_seconds,
)

EVENTS = ProviderEvents(
    key_retried="test_key_retried",
    key_rested="test_key_rested",
    request_retried="test_request_retried",
    request_failed="test_request_failed",
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _unavailable(wait: float) -> ProviderUnavailable:
    return ProviderUnavailable("authentication", f"again in {wait:.0f} s")


def test_the_ring_rotates_rests_and_brings_a_key_back() -> None:
    clock = Clock()
    ring = KeyRing(["a", "b"], events=EVENTS, cooldown=30.0, exhausted=_unavailable, clock=clock)
    assert ring.headers() == (0, {"Authorization": "Bearer a"})
    ring.rotate()
    assert ring.headers()[0] == 1
    ring.rest(1)
    assert ring.headers()[0] == 0  # the only live key, whatever the rotation says
    ring.rest(0)
    clock.now += 10
    with pytest.raises(ProviderUnavailable, match="again in 20 s"):
        ring.headers()
    clock.now += 20
    assert ring.headers()[0] in (0, 1)


def test_an_infinite_cool_down_never_brings_a_key_back() -> None:
    clock = Clock()
    ring = KeyRing(
        ["a"],
        events=EVENTS,
        cooldown=math.inf,
        exhausted=lambda _: ProviderRejected("authentication", "gone"),
        clock=clock,
    )
    ring.rest(0)
    clock.now += 1e12
    with pytest.raises(ProviderRejected):
        ring.headers()


def test_no_keys_send_no_authorization() -> None:
    ring = KeyRing([], events=EVENTS, cooldown=1.0, exhausted=_unavailable)
    assert ring.headers() == (None, {})


def test_backoff_is_equal_jitter_capped_and_honours_retry_after() -> None:
    policy = RetryPolicy(max_attempts=5, backoff_base=1.0, backoff_cap=4.0, rng=lambda: 0.5)
    assert [policy.backoff(n, None) for n in (1, 2, 3, 4)] == [0.75, 1.5, 3.0, 3.0]
    assert policy.backoff(1, 2.5) == 2.5
    assert policy.backoff(1, 600.0) == 4.0
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0, backoff_base=1.0, backoff_cap=1.0)


def test_retry_after_reads_seconds_and_dates() -> None:
    assert retry_after_seconds("7", now=0.0) == 7.0
    assert retry_after_seconds("Thu, 01 Jan 1970 00:01:40 GMT", now=40.0) == 60.0
    assert retry_after_seconds("soon", now=0.0) is None
    assert retry_after_seconds(None, now=0.0) is None


async def test_a_transient_status_is_retried_and_a_permanent_one_raised() -> None:
    statuses = [503, 429, 200, 400]
    sent_keys: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent_keys.append(request.headers["authorization"])
        return httpx.Response(statuses.pop(0), json={})

    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    def table(answer: ProviderAnswer) -> ProviderRejected | None:
        return None if answer.status in (429, 503) else ProviderRejected("invalid_request", "no")

    client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    options: TransportOptions = {"client": client, "sleep": sleep, "rng": lambda: 0.5}
    http = ProviderHttpClient(
        "http://provider.test/v1/x",
        name="test",
        events=EVENTS,
        who="the test endpoint",
        keys=KeyRing(["k1", "k2"], events=EVENTS, cooldown=1.0, exhausted=_unavailable),
        status_table=table,
        defaults=TransportDefaults(timeout=5.0, max_attempts=3, backoff_base=1.0, backoff_cap=8.0),
        options=options,
    )
    assert (await http.post({"q": 1})).status == 200
    assert sleeps == [0.75, 1.5]
    assert sent_keys == ["Bearer k1", "Bearer k1", "Bearer k2"]  # rotated after the 429
    with pytest.raises(ProviderRejected):
        await http.post({"q": 2})
    await client.aclose()
