"""The local embedder's speed on a 2,048-px preview, against decoding that preview (same run).

Target: embedding takes well under the time to decode the preview in full (the embedder asks
libvips to shrink on load, so it never materialises all 4 million pixels).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np
import pyvips

from memory_db.embedding import ImageInput, TextInput
from memory_db.embedding.local import embed_value

ROUNDS = 15


def _preview() -> bytes:
    import skimage.data

    photo = np.ascontiguousarray(skimage.data.astronaut())
    image = pyvips.Image.new_from_array(photo, interpretation="srgb").resize(4.0)  # 2048 px
    assert max(image.width, image.height) == 2048
    return image.write_to_buffer(".webp", Q=85)


def _median_seconds(action: Any) -> float:
    times = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    preview = _preview()
    decode = _median_seconds(lambda: pyvips.Image.new_from_buffer(preview, "").copy_memory())
    embed_image = _median_seconds(lambda: embed_value(ImageInput(data=preview)))
    text = "Astronaut portrait in a white space suit with the flag and the shuttle model " * 4
    embed_text = _median_seconds(lambda: embed_value(TextInput(text)))
    print(f"2048-px WebP preview ({len(preview) / 1024:.0f} KiB), median of {ROUNDS}")
    print(f"{'full decode':<28}{decode * 1000:>9.1f} ms")
    print(
        f"{'local embed (image)':<28}{embed_image * 1000:>9.1f} ms   {embed_image / decode:.2f}x of decode"
    )
    print(f"{'local embed (80-word text)':<28}{embed_text * 1000:>9.2f} ms")


if __name__ == "__main__":
    main()
