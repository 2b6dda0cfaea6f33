"""1-bit codes of vectors for the scan strategy: signs of a fixed ±1 projection (SimHash).

Bit ``i`` of a vector's code is set when the vector's dot product with row ``i`` of a fixed
projection matrix (entries +1 or -1) is positive. Each bit of two codes differs with probability
``angle / pi``, so the Hamming distance between codes estimates the angle between the vectors
whatever their distribution. The signs of the elements themselves (pgvector's
``binary_quantize``) do not: the local embedder's text vectors are 94 % zeros, and their sign
bits ranked so badly that a scan re-scoring the 200 best codes of 4,800 found 89 % of the true
top 10 (docs/vector-index.md); with these codes it found all of them.

The matrix is SHA-256 in counter mode over :data:`CODE_SCHEME`, so every machine and every
library version derives the same one: codes written by one process always match the codes of
queries made by another. A different scheme needs a new label and rewritten codes (a
migration), never a silent change here.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence

import numpy as np

CODE_SCHEME = "simhash-sha256-v1"


@functools.lru_cache(maxsize=8)
def _projection(dimensions: int) -> np.ndarray:
    """``dimensions`` x ``dimensions`` matrix of +1/-1 (float32), derived from the scheme label."""
    needed = (dimensions * dimensions + 7) // 8
    label = CODE_SCHEME.encode("ascii")
    stream = b"".join(
        hashlib.sha256(label + counter.to_bytes(8, "big")).digest()
        for counter in range((needed + 31) // 32)
    )
    bits = np.unpackbits(np.frombuffer(stream[:needed], dtype=np.uint8))[: dimensions * dimensions]
    matrix = bits.reshape(dimensions, dimensions).astype(np.float32) * 2 - 1
    matrix.setflags(write=False)
    return matrix


_CHUNK = 10_000  # rows per matrix product: bounded memory for bulk loads of any size
# Up to this many rows the product is numpy's own loop (einsum), not BLAS. OpenBLAS splits a
# product over its threads, and a server computes one query's code now and then: each time the
# sleeping threads are woken, and on two busy cores one 1 x 1024 code took a median of 7 ms
# (p90 19 ms, worst 28 ms) instead of 0.4 ms, the largest piece of our own time in a search
# call (docs/performance.md). Bulk loads keep BLAS, which is faster there.
_SMALL_BATCH = 64


def vector_codes(
    vectors: Sequence[Sequence[float]] | Sequence[np.ndarray] | np.ndarray, dimensions: int
) -> list[str]:
    """The code of each vector as a ``bit(dimensions)`` literal (``"0110..."``)."""
    matrix = np.asarray(vectors, dtype=np.float32).reshape(-1, dimensions)
    codes: list[str] = []
    for start in range(0, matrix.shape[0], _CHUNK):
        chunk = matrix[start : start + _CHUNK]
        projection = _projection(dimensions)
        if chunk.shape[0] <= _SMALL_BATCH:
            products = np.einsum("ij,kj->ik", chunk, projection)
        else:
            products = chunk @ projection.T
        packed = ((products > 0).astype(np.uint8) + ord("0")).tobytes()
        codes.extend(
            packed[row * dimensions : (row + 1) * dimensions].decode("ascii")
            for row in range(chunk.shape[0])
        )
    return codes
