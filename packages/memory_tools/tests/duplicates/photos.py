"""Real photographs (scikit-image's) and their re-encodes, crops and thumbnails, as upload bytes.

With the local embedder a PNG and a JPEG re-encode of one photo are about 0.001 apart (cosine
distance) and two different photos 0.4 or more (measured: chelsea/coffee 0.489,
chelsea/astronaut 0.419), so the tests' pairs are far from the threshold either way.
"""

from __future__ import annotations

import base64
import functools
from typing import Any

import numpy as np
import pyvips


@functools.cache
def _array(name: str) -> np.ndarray[Any, Any]:
    import skimage.data

    image = np.asarray(getattr(skimage.data, name)())
    if image.ndim == 2:
        image = np.stack([image] * 3, axis=-1)
    return np.ascontiguousarray(image[..., :3].astype(np.uint8))


def photo(name: str, fmt: str = ".png", *, crop: float = 0.0, **options: Any) -> bytes:
    """``name``, 160 pixels wide, encoded as ``fmt``; ``crop``: the share cut from each edge."""
    # 160 pixels wide: small enough for the tests' ASSET_MAX_BYTES as a PNG.
    image = pyvips.Image.new_from_array(_array(name), interpretation="srgb").resize(
        160 / len(_array(name)[0])
    )
    if crop:
        dx, dy = int(image.width * crop), int(image.height * crop)
        image = image.crop(dx, dy, image.width - 2 * dx, image.height - 2 * dy)
    return image.write_to_buffer(fmt, **options)


def b64(data: bytes) -> str:
    """Base64 for ``imageBase64``."""
    return base64.b64encode(data).decode()
