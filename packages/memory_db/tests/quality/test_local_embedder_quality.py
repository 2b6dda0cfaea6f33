"""The local embedder's retrieval quality, measured on real photographs (scikit-image's)."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
import pyvips

from memory_db.embedding import FusedInput, ImageInput, LocalEmbedder, TextInput

PHOTOS = [
    "astronaut",
    "camera",
    "chelsea",
    "coffee",
    "rocket",
    "hubble_deep_field",
    "immunohistochemistry",
    "retina",
    "moon",
    "coins",
    "clock",
    "brick",
    "grass",
    "gravel",
    "cell",
    "page",
    "text",
    "logo",
    "checkerboard",
    "horse",
    "microaneurysms",
]


@functools.cache
def _array(name: str) -> np.ndarray[Any, Any]:
    import skimage.data

    image = np.asarray(getattr(skimage.data, name)())
    if image.dtype == bool:
        image = image.astype(np.uint8) * 255
    if image.ndim == 2:
        image = np.stack([image] * 3, axis=-1)
    return np.ascontiguousarray(image[..., :3].astype(np.uint8))


def _encode(array: np.ndarray[Any, Any], fmt: str = ".png", **options: Any) -> bytes:
    image = pyvips.Image.new_from_array(array, interpretation="srgb")
    return image.write_to_buffer(fmt, **options)


def _variants(array: np.ndarray[Any, Any]) -> list[bytes]:
    height, width = array.shape[:2]
    dy, dx = max(1, height * 8 // 100), max(1, width * 8 // 100)
    image = pyvips.Image.new_from_array(array, interpretation="srgb")
    return [
        _encode(array, ".jpg", Q=60),  # re-encoded, lossy
        image.resize(0.5).write_to_buffer(".webp", Q=80),  # resized and re-encoded
        _encode(np.ascontiguousarray(array[dy : height - dy, dx : width - dx])),  # 8 % crop
    ]


@functools.cache
def _derived(name: str) -> tuple[bytes, ...]:
    """A photo, its mirror image and a half-size crop of another region: three distractors."""
    array = _array(name)
    height, width = array.shape[:2]
    return (
        _encode(array),
        _encode(np.ascontiguousarray(array[:, ::-1])),
        _encode(np.ascontiguousarray(array[height // 4 : 3 * height // 4, : width // 2])),
    )


def _distractors(name: str) -> list[bytes]:
    return [item for other in PHOTOS if other != name for item in _derived(other)]


async def _vectors(embedder: LocalEmbedder, images: list[bytes]) -> np.ndarray[Any, Any]:
    result = await embedder.embed([ImageInput(data=i) for i in images], "retrieval.passage")
    return np.array(result.embeddings)


@pytest.mark.parametrize("name", ["astronaut", "chelsea", "coffee", "rocket", "camera", "coins"])
async def test_image_retrieves_itself_and_its_variants_first(name: str) -> None:
    embedder = LocalEmbedder()
    original = _encode(_array(name))
    own = [original, *_variants(_array(name))]
    distractors = _distractors(name)
    assert len(distractors) >= 40
    gallery = await _vectors(embedder, own + distractors)
    query = (await embedder.embed([ImageInput(data=original)], "retrieval.query")).embeddings[0]
    scores = gallery @ np.array(query)
    ranking = list(np.argsort(-scores))
    top = set(ranking[: len(own)])
    print(
        f"{name}: worst own {min(scores[: len(own)]):.3f} best distractor {max(scores[len(own) :]):.3f}"
    )
    assert top == set(range(len(own))), (
        f"{name}: own items ranked {sorted(ranking.index(i) for i in range(len(own)))}, "
        f"best distractor score {max(scores[len(own) :]):.3f}, worst own {min(scores[: len(own)]):.3f}"
    )


async def test_text_query_finds_the_asset_whose_fused_text_matches() -> None:
    embedder = LocalEmbedder()
    titles = {
        "astronaut": "Astronaut portrait in a white space suit with the flag",
        "chelsea": "Ginger tabby cat called Chelsea resting",
        "coffee": "Cup of coffee with latte art on a saucer",
        "rocket": "Rocket on the launch pad before lift-off",
        "coins": "Old coins from a museum collection",
        "moon": "Craters on the surface of the Moon",
        "clock": "Wall clock showing the time",
        "page": "Scanned page of a printed book",
    }
    names = list(titles)
    documents = [
        FusedInput((ImageInput(data=_encode(_array(n))), TextInput(titles[n]))) for n in names
    ]
    docs = np.array((await embedder.embed(documents, "retrieval.passage")).embeddings)
    queries = {
        "space suit astronaut": "astronaut",
        "tabby cat": "chelsea",
        "latte coffee cup": "coffee",
        "launch pad rocket": "rocket",
        "museum coins": "coins",
        "lunar craters": "moon",
        "what time does the clock show": "clock",
    }
    for query, expected in queries.items():
        vector = np.array(
            (await embedder.embed([TextInput(query)], "retrieval.query")).embeddings[0]
        )
        best = names[int(np.argmax(docs @ vector))]
        assert best == expected, f"{query!r} found {best}"


async def test_blocks_relate_sensibly() -> None:
    embedder = LocalEmbedder()
    image = _encode(_array("rocket"))
    visual, text, fused = (
        await embedder.embed(
            [
                ImageInput(data=image),
                TextInput("rocket launch"),
                FusedInput((ImageInput(data=image), TextInput("rocket launch"))),
            ],
            "retrieval.passage",
        )
    ).embeddings
    v, t, f = np.array(visual), np.array(text), np.array(fused)
    assert abs(float(v @ t)) < 1e-9  # image-only and text-only never overlap
    assert float(f @ v) == pytest.approx(0.6, abs=1e-6)
    assert float(f @ t) == pytest.approx(0.8, abs=1e-6)
