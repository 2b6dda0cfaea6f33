"""What one embedding batch sends to the provider, and what it reuses (docs/embeddings.md).

Every image token is paid for, so a batch sends each image at most once:

- an image (by owner, object and model) already embedded as some asset's ``visual`` vector is
  not sent again: a ``visual`` job copies that stored vector (a deduplicated save, a retry
  after the visual part succeeded, a job whose sibling finished in an earlier batch), and a
  ``fused`` job whose text another asset of the same bytes already has copies that vector;
- within one request an image is one input however many jobs need it (the ``visual`` and
  ``fused`` jobs of one save, two saves of the same bytes);
- with an embedder that makes fused vectors by combining (Jina's ``combine`` mode), a
  ``fused`` job sends only its text; its vector is ``combine_fused(image, text)`` with the
  image's vector reused as above. An embedder that embeds the group natively (``native``)
  gets the one grouped input, as before.

Reuse never crosses owners: stored vectors are looked up per owner, and request inputs are
shared only between jobs of the same owner. The planning here is pure; the worker reads the
stored vectors and makes the call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from memory_db.embedding import EmbedValue, FusedInput, ImageInput, TextInput, Usage

# A job's vector from the request's vectors: a stored copy, one input, or image + text combined.
Recipe = Callable[[Sequence[Sequence[float]]], list[float]]


@dataclass(frozen=True, slots=True)
class Need:
    """What one job needs embedded: its owner, object, representation and value."""

    owner_identity: str
    object_id: str
    representation: str
    value: EmbedValue


@dataclass
class Known:
    """Stored vectors of one model, reused instead of re-sent.

    ``visual`` by (owner, object); ``fused`` by (owner, object, fused text): a fused vector is
    a function of the image and the text alone, so another asset of the same bytes and the
    same text has the very vector (only assets whose fused vector is current are listed).
    """

    visual: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    fused: dict[tuple[str, str, str], list[float]] = field(default_factory=dict)


@dataclass
class RequestPlan:
    """The inputs of one provider request and how each job's vector is made from them."""

    values: list[EmbedValue] = field(default_factory=list)
    recipes: list[Recipe] = field(default_factory=list)
    # Per job: inputs it brought to the request (all, text-bearing, image-bearing); a job
    # whose vector comes from inputs another job brought, or from a stored vector, has none.
    inputs: list[int] = field(default_factory=list)
    texts: list[int] = field(default_factory=list)
    images: list[int] = field(default_factory=list)
    copied: int = 0  # jobs finished from a stored vector alone
    shared: int = 0  # inputs a job did not send because another job of the batch did

    def vectors(self, embedded: Sequence[Sequence[float]]) -> list[list[float]]:
        """Each job's vector, given the request's vectors (in ``values`` order)."""
        if len(embedded) != len(self.values):
            raise ValueError("one vector per request input is expected")
        return [recipe(embedded) for recipe in self.recipes]

    def usages(self, usage: Usage) -> list[dict[str, int]]:
        """The request's tokens apportioned to the jobs that brought its inputs.

        Image tokens go to the jobs that brought an image, prompt tokens to those that brought
        text; a job's total is its two shares plus its share (by inputs) of any tokens the
        provider counted as neither.
        """
        prompts = _apportion(usage.prompt_tokens, self.texts)
        images = _apportion(usage.image_tokens, self.images)
        rest = usage.total_tokens - usage.prompt_tokens - usage.image_tokens
        if rest < 0:  # a total below its parts: apportion the total as reported
            totals = _apportion(usage.total_tokens, self.inputs)
        else:
            others = _apportion(rest, self.inputs)
            totals = [p + i + o for p, i, o in zip(prompts, images, others, strict=True)]
        return [
            {"total_tokens": t, "prompt_tokens": p, "image_tokens": i}
            for t, p, i in zip(totals, prompts, images, strict=True)
        ]


def plan_request(
    needs: Sequence[Need],
    known: Known,
    combine: Callable[[Sequence[float], Sequence[float]], list[float]] | None,
    *,
    reuse: bool = True,
) -> RequestPlan:
    """The request for ``needs``; ``combine`` is the embedder's fused combination, if it has one.

    ``reuse=False`` sends every job's value as it is (one input per job): the measurement
    baseline of ``benchmarks/provider_cost.py``.
    """
    plan = RequestPlan()
    positions: dict[tuple[str, ...], int] = {}

    def position(key: tuple[str, ...] | None, value: EmbedValue, job: int) -> int:
        """The input for ``key``, added (and counted for ``job``) if the request lacks it.

        ``key=None``: an input of this job alone.
        """
        found = None if key is None else positions.get(key)
        if found is not None:
            plan.shared += 1
            return found
        if key is not None:
            positions[key] = len(plan.values)
        plan.values.append(value)
        plan.inputs[job] += 1
        plan.texts[job] += isinstance(value, TextInput | FusedInput)
        plan.images[job] += isinstance(value, ImageInput | FusedInput)
        return len(plan.values) - 1

    for job, need in enumerate(needs):
        plan.inputs.append(0)
        plan.texts.append(0)
        plan.images.append(0)
        if not reuse:
            plan.recipes.append(_one(position(None, need.value, job)))
            continue
        image_key = ("image", need.owner_identity, need.object_id)
        stored = known.visual.get((need.owner_identity, need.object_id))
        value = need.value
        if isinstance(value, ImageInput):
            if stored is not None:
                plan.copied += 1
                plan.recipes.append(_copy(stored))
            else:
                plan.recipes.append(_one(position(image_key, value, job)))
            continue
        if isinstance(value, FusedInput):
            same = known.fused.get((need.owner_identity, need.object_id, value.text))
            if same is not None:  # the same bytes with the same text: nothing new to embed
                plan.copied += 1
                plan.recipes.append(_copy(same))
                continue
        if isinstance(value, FusedInput) and combine is not None and len(value.images) == 1:
            text = value.text
            text_at = position(("text", need.owner_identity, text), TextInput(text), job)
            if stored is not None:
                plan.recipes.append(_fuse(combine, stored, None, text_at))
            else:
                image_at = position(image_key, value.images[0], job)
                plan.recipes.append(_fuse(combine, None, image_at, text_at))
            continue
        # A text, or a fused group the embedder embeds as one input (native mode).
        plan.recipes.append(_one(position(None, value, job)))
    return plan


def _one(at: int) -> Recipe:
    return lambda embedded: list(embedded[at])


def _copy(vector: list[float]) -> Recipe:
    return lambda _embedded: list(vector)


def _fuse(
    combine: Callable[[Sequence[float], Sequence[float]], list[float]],
    image: list[float] | None,
    image_at: int | None,
    text_at: int,
) -> Recipe:
    def make(embedded: Sequence[Sequence[float]]) -> list[float]:
        picture = image if image is not None else embedded[image_at or 0]
        return combine(picture, embedded[text_at])

    return make


def _apportion(total: int, weights: Sequence[int]) -> list[int]:
    """``total`` split in proportion to ``weights`` (remainder to the first weighted share)."""
    whole = sum(weights)
    if whole == 0:
        return [0] * len(weights)
    shares = [total * weight // whole for weight in weights]
    first = next(index for index, weight in enumerate(weights) if weight)
    shares[first] += total - sum(shares)
    return shares
