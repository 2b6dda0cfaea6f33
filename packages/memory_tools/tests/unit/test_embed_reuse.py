"""The request a batch sends (memory_tools.jobs.embed_reuse): pure planning, no provider."""

from __future__ import annotations

from collections.abc import Sequence

from memory_db.embedding import FusedInput, ImageInput, TextInput, Usage
from memory_tools.jobs.embed_reuse import Known, Need, plan_request

PNG = ImageInput(data=b"png")


def _combine(image: Sequence[float], text: Sequence[float]) -> list[float]:
    return [a + b for a, b in zip(image, text, strict=True)]


def _fused(text: str) -> FusedInput:
    return FusedInput(parts=(TextInput(text), PNG))


def test_one_image_per_object_and_owner_and_tokens_go_to_who_sent_them() -> None:
    needs = [
        Need("alice", "obj1", "visual", PNG),
        Need("alice", "obj1", "fused", _fused("harbour")),
        Need("alice", "obj1", "visual", PNG),  # a second save of the same bytes
        Need("bob", "obj1", "visual", PNG),  # another owner: never shared
    ]
    plan = plan_request(needs, Known(), _combine)
    assert plan.values == [PNG, TextInput("harbour"), PNG]
    vectors = plan.vectors([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]])
    assert vectors == [[1.0, 0.0], [1.0, 1.0], [1.0, 0.0], [2.0, 2.0]]
    usages = plan.usages(Usage(total_tokens=2004, prompt_tokens=4, image_tokens=2000))
    assert [u["image_tokens"] for u in usages] == [1000, 0, 0, 1000]
    assert [u["prompt_tokens"] for u in usages] == [0, 4, 0, 0]
    assert [u["total_tokens"] for u in usages] == [1000, 4, 0, 1000]
    assert plan.shared == 2


def test_stored_vectors_are_copied_and_native_mode_keeps_the_group() -> None:
    known = Known(
        visual={("alice", "obj1"): [1.0, 0.0]},
        fused={("alice", "obj1", "harbour"): [0.5, 0.5]},
    )
    needs = [
        Need("alice", "obj1", "visual", PNG),
        Need("alice", "obj1", "fused", _fused("harbour")),  # same text: copied
        Need("alice", "obj1", "fused", _fused("a boat")),  # new text: only the text
    ]
    plan = plan_request(needs, known, _combine)
    assert plan.values == [TextInput("a boat")] and plan.copied == 2
    assert plan.vectors([[0.0, 1.0]]) == [[1.0, 0.0], [0.5, 0.5], [1.0, 1.0]]
    assert plan.usages(Usage(3, 3, 0)) == [
        {"total_tokens": 0, "prompt_tokens": 0, "image_tokens": 0},
        {"total_tokens": 0, "prompt_tokens": 0, "image_tokens": 0},
        {"total_tokens": 3, "prompt_tokens": 3, "image_tokens": 0},
    ]
    native = plan_request(needs[2:], Known(), None)
    assert native.values == [_fused("a boat")]
    baseline = plan_request(needs, known, _combine, reuse=False)
    assert baseline.values == [PNG, _fused("harbour"), _fused("a boat")]
