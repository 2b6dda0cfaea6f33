"""What a search score means, per embedding model: the evidence floor and the good-match line.

A search result needs **evidence**: a word match in its text, or a cosine similarity above the
model's evidence floor for that kind of query. Below the floor a score says nothing (for
``local-hash-v1`` a text query against an image-only vector is exactly 0.0, and hash collisions
between unrelated words stay under 0.18), so such assets are not returned at all.

The **good-match** line is where a score starts to mean "this is it". When no result reaches it
(and none matched by words), the search says ``noGoodMatch``. Both numbers are documented in
``docs/embeddings.md`` with where they come from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from memory_db.embedding.jina import JINA_MODEL
from memory_db.embedding.local import LOCAL_MODEL

QueryKind = Literal["text", "image", "fused"]


@dataclass(frozen=True, slots=True)
class MatchThresholds:
    """Cosine similarities: results at or below ``evidence`` are dropped; ``good`` is a match."""

    evidence: float
    good: float


# local-hash-v1, measured (docs/embeddings.md): a text query scores 0.8 x the text-block
# similarity against a fused vector; unrelated titles reach at most 0.22 text-block similarity
# (0.18 as a score), one or two words of a title at least 0.47 (0.38). An image query against
# its own re-encoded, resized or cropped variants scores 0.87-0.97, against the best
# distractor 0.52-0.81; a fused query carries 0.6 of that against image-only vectors.
_LOCAL = {
    "text": MatchThresholds(evidence=0.2, good=0.3),
    "image": MatchThresholds(evidence=0.0, good=0.85),
    "fused": MatchThresholds(evidence=0.0, good=0.5),
}
# jina-embeddings-v5-omni-small: Jina's model page publishes a noise floor of 0.300 (and
# recommended cut-offs from 0.697, balanced, to 0.878 at a false-positive rate of 1e-4), all
# measured on its text tower. A learned model's positive similarity is evidence; below the
# noise floor it is indistinguishable from an unrelated pair.
_JINA = MatchThresholds(evidence=0.0, good=0.300)
# Any other model (test fakes): every positive similarity is evidence and a match.
_UNKNOWN = MatchThresholds(evidence=0.0, good=0.0)


def match_thresholds(model: str, kind: QueryKind) -> MatchThresholds:
    """The evidence floor and good-match line of ``model`` for a ``kind`` of query."""
    if model == LOCAL_MODEL:
        return _LOCAL[kind]
    if model == JINA_MODEL:
        return _JINA
    return _UNKNOWN


def understands_meaning(model: str) -> bool:
    """Whether ``model`` embeds meaning (a learned model), not only words, colours and layout.

    ``local-hash-v1`` is the one that does not: it hashes words and pixel statistics
    (docs/embeddings.md#the-local-embedder-local-hash-v1), so "lunar" does not find "moon".
    """
    return model != LOCAL_MODEL
