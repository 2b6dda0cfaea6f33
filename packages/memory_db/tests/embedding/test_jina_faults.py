"""JinaEmbedder against a real HTTP server speaking the Jina protocol, one scripted fault each."""

from __future__ import annotations

import math
from typing import Any

import pytest

from memory_db.embedding import FusedInput, ImageInput, JinaEmbedder, TextInput, combine
from memory_db.errors import ProviderContractError, ProviderRejected, ProviderUnavailable
from memory_db.testing.jina_server import Fault, JinaTestServer

KEYS = ["jina_key_one", "jina_key_two", "jina_key_three"]
VALUES = [TextInput("a red bicycle"), ImageInput(url="https://example.com/x.png")]


def _embedder(jina: JinaTestServer, sleeps: Any, **options: Any) -> JinaEmbedder:
    return JinaEmbedder(
        api_keys=options.pop("keys", KEYS),
        base_url=jina.base_url,
        sleep=sleeps,
        rng=lambda: 0.5,
        **options,
    )


async def test_success_shapes_usage_and_request_id(jina: JinaTestServer, sleeps: Any) -> None:
    embedder = _embedder(jina, sleeps)
    result = await embedder.embed([*VALUES, ImageInput(data=b"\x89PNG fake")], "retrieval.passage")
    await embedder.close()
    assert len(result.embeddings) == 3 and all(len(v) == 1024 for v in result.embeddings)
    assert result.model == "jina-embeddings-v5-omni-small" and result.dimensions == 1024
    assert result.usage.image_tokens == 2000 and result.usage.prompt_tokens == 3
    assert result.usage.total_tokens == 2003
    assert result.request_id
    (seen,) = jina.state.seen
    assert seen.task == "retrieval.passage" and seen.kinds == ["text", "image", "image"]
    assert sleeps.delays == []


async def test_429_honours_retry_after_and_rotates_the_key(
    jina: JinaTestServer, sleeps: Any
) -> None:
    jina.state.faults.append(Fault(status=429, retry_after="3"))
    embedder = _embedder(jina, sleeps)
    result = await embedder.embed(VALUES, "retrieval.query")
    assert len(result.embeddings) == 2
    assert [s.status for s in jina.state.seen] == [429, 200]
    assert jina.state.seen[0].key != jina.state.seen[1].key
    assert sleeps.delays == [3.0]


async def test_retry_after_is_capped(jina: JinaTestServer, sleeps: Any) -> None:
    jina.state.faults.append(Fault(status=429, retry_after="3600"))
    await _embedder(jina, sleeps, backoff_cap=7.0).embed(VALUES, "retrieval.query")
    assert sleeps.delays == [7.0]


@pytest.mark.parametrize("status", [524, 500, 502, 503])
async def test_transient_errors_are_retried_with_backoff(
    jina: JinaTestServer, sleeps: Any, status: int
) -> None:
    jina.state.faults.extend([Fault(status=status), Fault(status=status)])
    result = await _embedder(jina, sleeps, backoff_base=0.5).embed(VALUES, "retrieval.query")
    assert len(result.embeddings) == 2
    assert [s.status for s in jina.state.seen] == [status, status, 200]
    # equal jitter with rng=0.5: 3/4 of the ceiling 0.5·2^(n-1)
    assert sleeps.delays == [0.375, 0.75]


async def test_gives_up_after_max_attempts(jina: JinaTestServer, sleeps: Any) -> None:
    jina.state.faults.extend(Fault(status=500) for _ in range(10))
    with pytest.raises(ProviderUnavailable) as caught:
        await _embedder(jina, sleeps, max_attempts=4, backoff_base=1, backoff_cap=3).embed(
            VALUES, "retrieval.query"
        )
    assert caught.value.retryable and "after 4 attempts (HTTP 500)" in str(caught.value)
    assert len(jina.state.seen) == 4
    assert sleeps.delays == [0.75, 1.5, 2.25]  # capped at 3 before jitter


async def test_timeout_is_retried(jina: JinaTestServer, sleeps: Any) -> None:
    jina.state.faults.append(Fault(delay=1.5))
    result = await _embedder(jina, sleeps, timeout=0.5).embed(VALUES, "retrieval.query")
    assert len(result.embeddings) == 2
    assert len(jina.state.seen) == 2 and len(sleeps.delays) == 1


async def test_timeouts_exhaust_into_unavailable(jina: JinaTestServer, sleeps: Any) -> None:
    jina.state.faults.extend([Fault(delay=1.0), Fault(delay=1.0)])
    with pytest.raises(ProviderUnavailable, match="timeout"):
        await _embedder(jina, sleeps, timeout=0.3, max_attempts=2).embed(VALUES, "retrieval.query")


async def test_a_rejected_key_is_dropped_from_the_pool(jina: JinaTestServer, sleeps: Any) -> None:
    jina.state.keys.discard("jina_key_one")
    embedder = _embedder(jina, sleeps)
    await embedder.embed(VALUES, "retrieval.query")
    await embedder.embed(VALUES, "retrieval.query")
    keys = [s.key for s in jina.state.seen]
    assert keys[0] == "jina_key_one" and "jina_key_one" not in keys[1:]
    assert [s.status for s in jina.state.seen].count(200) == 2
    assert sleeps.delays == []  # a bad key is not a reason to wait


async def test_every_key_rejected_is_permanent(jina: JinaTestServer, sleeps: Any) -> None:
    jina.state.keys.clear()
    with pytest.raises(ProviderRejected) as caught:
        await _embedder(jina, sleeps).embed(VALUES, "retrieval.query")
    assert caught.value.code == "authentication" and not caught.value.retryable
    assert len(jina.state.seen) == 3 and sleeps.delays == []


@pytest.mark.parametrize(
    ("fault", "code"),
    [
        (
            Fault(status=403, code="AUTHZ_INSUFFICIENT_BALANCE", detail="no balance"),
            "insufficient_balance",
        ),
        (Fault(status=422, code="VALIDATION_ERROR", detail="bad input"), "invalid_request"),
        (
            Fault(status=400, code="BAD_REQUEST", detail="Unsupported image format"),
            "unsupported_media",
        ),
        (Fault(status=415, code="UNSUPPORTED_MEDIA", detail="svg"), "unsupported_media"),
    ],
)
async def test_permanent_rejections_are_not_retried(
    jina: JinaTestServer, sleeps: Any, fault: Fault, code: str
) -> None:
    jina.state.faults.append(fault)
    with pytest.raises(ProviderRejected) as caught:
        await _embedder(jina, sleeps).embed(VALUES, "retrieval.query")
    assert caught.value.code == code
    assert len(jina.state.seen) == 1 and sleeps.delays == []


@pytest.mark.parametrize(
    ("fault", "code"),
    [
        (Fault(wrong_count=True), "wrong_count"),
        (Fault(wrong_dimensions=True), "wrong_dimensions"),
        (Fault(nan=True), "non_finite"),
        (Fault(unnormalized=True), "not_normalized"),
    ],
)
async def test_malformed_vectors_are_a_permanent_contract_error(
    jina: JinaTestServer, sleeps: Any, fault: Fault, code: str
) -> None:
    jina.state.faults.append(fault)
    with pytest.raises(ProviderContractError) as caught:
        await _embedder(jina, sleeps).embed(VALUES, "retrieval.query")
    assert caught.value.code == code and not caught.value.retryable
    assert len(jina.state.seen) == 1


async def test_server_side_validation_sees_our_request_as_valid(
    jina: JinaTestServer, sleeps: Any
) -> None:
    fused = FusedInput((ImageInput(url="https://example.com/a.png"), TextInput("caption")))
    await _embedder(jina, sleeps, fused_mode="native").embed([fused], "retrieval.passage")
    assert jina.state.seen[-1].kinds == ["content"] and jina.state.seen[-1].status == 200


async def test_fused_fallback_combines_separate_vectors(jina: JinaTestServer, sleeps: Any) -> None:
    image = ImageInput(url="https://example.com/a.png")
    text = TextInput("caption words")
    embedder = _embedder(jina, sleeps, fused_mode="combine", fused_image_weight=0.6)
    (fused,) = (await embedder.embed([FusedInput((image, text))], "retrieval.passage")).embeddings
    assert jina.state.seen[-1].kinds == ["image", "text"]
    separate = (await embedder.embed([image, text], "retrieval.passage")).embeddings
    expected = combine(separate[0], separate[1], 0.6)
    assert max(abs(a - b) for a, b in zip(fused, expected, strict=True)) < 1e-9
    assert math.isclose(math.sqrt(sum(x * x for x in fused)), 1.0, abs_tol=1e-9)


async def test_task_is_never_implicit(jina: JinaTestServer, sleeps: Any) -> None:
    with pytest.raises(ValueError, match="task"):
        await _embedder(jina, sleeps).embed(VALUES, "retrieval")  # type: ignore[arg-type]
    assert jina.state.seen == []


def test_image_inputs_hide_their_payload() -> None:
    assert "secret" not in repr(ImageInput(url="https://x/?sig=secret"))
    with pytest.raises(ValueError, match="exactly one"):
        ImageInput()
    with pytest.raises(ValueError, match="exactly one"):
        ImageInput(data=b"x", url="https://x")
