"""1-bit vector codes (SimHash over a fixed ±1 projection): stable, and faithful to angles."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest

from memory_db.vectors import CODE_SCHEME, vector_codes


def _hamming(a: str, b: str) -> int:
    return sum(x != y for x, y in zip(a, b, strict=True))


def test_the_scheme_is_pinned() -> None:
    # Codes in the database were written with this projection; queries must use the same one
    # on every machine and library version. A change here needs a new scheme and a migration.
    unit = np.zeros(1024)
    unit[0] = 1.0
    (code,) = vector_codes([unit], 1024)
    assert CODE_SCHEME == "simhash-sha256-v1"
    assert code[:32] == "01010011110011101010011110111011"
    assert hashlib.sha256(code.encode()).hexdigest() == (
        "55611174be6053602c75a2d73a968c583e993ac9fad68a160edbcef68d9f4857"
    )


def test_codes_are_bit_literals_of_the_dimension_and_batching_changes_nothing() -> None:
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((5, 12))
    codes = vector_codes(vectors, 12)
    assert len(codes) == 5
    assert all(len(code) == 12 and set(code) <= {"0", "1"} for code in codes)
    assert [vector_codes([list(v)], 12)[0] for v in vectors] == codes
    assert vector_codes(vectors * 3.5, 12) == codes  # the scale of a vector does not matter


@pytest.mark.parametrize("angle", [0.1, 0.5, 1.0, math.pi / 2, 2.5])
def test_hamming_distance_estimates_the_angle(angle: float) -> None:
    rng = np.random.default_rng(7)
    found = []
    for _ in range(20):
        a, b = rng.standard_normal((2, 1024))
        a /= np.linalg.norm(a)
        b -= (b @ a) * a
        b /= np.linalg.norm(b)
        c = math.cos(angle) * a + math.sin(angle) * b
        code_a, code_c = vector_codes([a, c], 1024)
        found.append(_hamming(code_a, code_c) / 1024)
    # Each bit differs with probability angle / pi.
    assert float(np.mean(found)) == pytest.approx(angle / math.pi, abs=0.02)


def test_sparse_non_negative_vectors_are_told_apart() -> None:
    # The local embedder's text vectors: mostly zeros, the rest positive. Their element signs
    # are nearly all alike; the projection's signs still rank them by angle.
    rng = np.random.default_rng(3)
    base = np.zeros(1024)
    base[rng.choice(1024, 60, replace=False)] = rng.random(60)
    near = base.copy()
    near[rng.choice(np.flatnonzero(base), 10, replace=False)] = 0.0
    far = np.zeros(1024)
    far[rng.choice(1024, 60, replace=False)] = rng.random(60)
    signs = ["".join("1" if x > 0 else "0" for x in v) for v in (base, near, far)]
    assert _hamming(signs[0], signs[1]) < 20 and _hamming(signs[0], signs[2]) < 130
    code_base, code_near, code_far = vector_codes([base, near, far], 1024)
    cos_near = base @ near / np.linalg.norm(base) / np.linalg.norm(near)
    cos_far = base @ far / np.linalg.norm(base) / np.linalg.norm(far)
    assert cos_near > 0.8 > 0.2 > cos_far
    for code, cosine in ((code_near, cos_near), (code_far, cos_far)):
        assert _hamming(code_base, code) / 1024 == pytest.approx(
            math.acos(cosine) / math.pi, abs=0.05
        )
    assert _hamming(code_base, code_near) < _hamming(code_base, code_far) - 200


def test_small_batches_and_bulk_loads_give_the_same_codes() -> None:
    # Queries and worker batches take numpy's own loop, bulk loads BLAS: the two paths must
    # write codes that match, for dense vectors and for the local embedder's sparse ones.
    rng = np.random.default_rng(11)
    dense = rng.standard_normal((40, 1024))
    sparse = np.zeros((40, 1024))
    for row in sparse:
        row[rng.choice(1024, 60, replace=False)] = rng.random(60)
    vectors = np.vstack([dense, sparse])
    bulk = vector_codes(vectors, 1024)  # 80 rows: one BLAS product
    assert [vector_codes([v], 1024)[0] for v in vectors] == bulk
    assert vector_codes(vectors[:16], 1024) == bulk[:16]
