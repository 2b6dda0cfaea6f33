"""Search relevance through the whole tool path, on real photographs (scikit-image's, tests only).

Each photo is saved with a title and alt text, beside its mirror image (a hard distractor with
no text). Edited variants of a photo (re-encoded, resized, cropped) must find that photo first;
text queries on titles and alt text must find the described photo first; pending and deleted
assets are never returned.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import pyvips
from fastmcp import Client

from memory_tools import MemoryServices, build_memory_server
from memory_tools.serving.job_worker import job_worker

from ..pictures import b64
from ..tool_calls import call as _call

PHOTOS = {
    "astronaut": ("Astronaut portrait", "a woman in an orange spacesuit in front of a flag"),
    "chelsea": ("Chelsea the cat", "a tabby cat lying on a blanket"),
    "coffee": ("Morning coffee", "a cup of coffee on a saucer"),
    "rocket": ("Rocket launch pad", "a rocket standing on its launch tower"),
    "coins": ("Old coins", "rows of ancient coins on a dark background"),
    "clock": ("Wall clock", "a round clock face with hands"),
    "moon": ("Lunar surface", "craters on the moon"),
    "horse": ("Horse silhouette", "a black horse drawn on white"),
    "hubble_deep_field": ("Deep field galaxies", "thousands of distant galaxies"),
    "immunohistochemistry": ("Tissue stain", "a microscope slide of stained tissue"),
}
TEXT_QUERIES = {
    "astronaut": "spacesuit",
    "chelsea": "tabby cat",
    "coffee": "cup of coffee",
    "rocket": "rocket launch",
    "coins": "ancient coins",
    "clock": "clock face",
    "moon": "moon craters",
    "horse": "black horse",
    "hubble_deep_field": "galaxies",
    "immunohistochemistry": "microscope slide",
}


@functools.cache
def _image(name: str) -> pyvips.Image:
    import skimage.data

    array = np.asarray(getattr(skimage.data, name)())
    if array.dtype == bool:
        array = array.astype(np.uint8) * 255
    if array.ndim == 2:
        array = np.stack([array] * 3, axis=-1)
    array = np.ascontiguousarray(array[..., :3].astype(np.uint8))
    return pyvips.Image.new_from_array(array, interpretation="srgb")


def _jpeg(image: pyvips.Image, quality: int = 85) -> bytes:
    return image.write_to_buffer(".jpg", Q=quality)


def _variants(name: str) -> dict[str, bytes]:
    image = _image(name)
    dx, dy = image.width * 8 // 100, image.height * 8 // 100
    return {
        "re-encoded": _jpeg(image, 40),
        "resized": image.resize(0.5).write_to_buffer(".webp", Q=75),
        "cropped": _jpeg(image.crop(dx, dy, image.width - 2 * dx, image.height - 2 * dy)),
    }


@pytest.fixture
def roomy(saving: MemoryServices) -> MemoryServices:
    settings = saving.settings.model_copy(update={"asset_max_bytes": 4_000_000})
    return replace(saving, settings=settings)


async def test_variants_and_descriptions_find_the_right_photo_first(
    roomy: MemoryServices, alice: Any
) -> None:
    services = replace(roomy, default_api_key=alice.key)
    ids: dict[str, str] = {}
    async with Client(build_memory_server(services)) as client:
        for name, (title, alt) in PHOTOS.items():
            saved = await _call(
                client,
                "image_asset_save",
                {"imageBase64": b64(_jpeg(_image(name))), "title": title, "altText": alt},
            )
            ids[name] = saved["assetId"]
            await _call(
                client,
                "image_asset_save",
                {"imageBase64": b64(_jpeg(_image(name).fliphor())), "title": "Untitled"},
            )
        deleted = await _call(
            client, "image_asset_save", {"imageBase64": b64(_jpeg(_image("camera")))}
        )
        await job_worker(services).drain()
        await _call(client, "image_asset_delete", {"assetId": deleted["assetId"]})
        pending = await _call(
            client, "image_asset_save", {"imageBase64": b64(_jpeg(_image("page")))}
        )

        misses: list[str] = []
        for name in PHOTOS:
            for kind, data in _variants(name).items():
                answer = await _call(client, "image_asset_search", {"imageBase64": b64(data)})
                first = answer["results"][0]["assetId"]
                if first != ids[name]:
                    misses.append(f"{name} {kind}")
        for name, words in TEXT_QUERIES.items():
            answer = await _call(client, "image_asset_search", {"query": words})
            if answer["results"][0]["assetId"] != ids[name]:
                misses.append(f"text {words!r}")
        gone = await _call(
            client, "image_asset_search", {"imageBase64": b64(_jpeg(_image("camera")))}
        )
        waiting = await _call(
            client, "image_asset_search", {"imageBase64": b64(_jpeg(_image("page")))}
        )
    assert misses == []
    assert deleted["assetId"] not in {r["assetId"] for r in gone["results"]}
    assert pending["assetId"] not in {r["assetId"] for r in waiting["results"]}
