"""The clip embedder's CPU throughput, against decoding the same previews (same run).

Two models, both written here with random weights (their speed does not depend on the weights'
values), loaded through the embedder's own code path:

- the tiny test model (a patch convolution, a bag-of-tokens text encoder);
- a ViT-B/32-shaped one: 12 transformer layers of width 768 over the 7x7 patches of a 224-px
  crop, and 12 layers of width 512 over 77 tokens (CLIP ViT-B/32's shapes, ~150 M parameters).

For each: images per second at batch 1 and 16 (decode, resize, crop, normalise, encode,
normalise: the whole ``embed``), texts per second at batch 1 and 16. The baseline is the full
decode of the same 2,048-px WebP preview (the stored preview's default size), measured in the
same run: "1.0x decode" means embedding an image costs as much as decoding it once.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyvips

from memory_db.embedding import ClipEmbedder, ImageInput, TextInput
from memory_db.embedding.clip import preprocess_image
from memory_db.testing.clip_model import write_tiny_model, write_vit_b32_model

TEXT = "an astronaut in a white space suit in front of the flag and a model of the shuttle"


def _previews(count: int) -> list[bytes]:
    import skimage.data

    photo = np.ascontiguousarray(skimage.data.astronaut())
    base = pyvips.Image.new_from_array(photo, interpretation="srgb").resize(4.0)  # 2048 px
    # Distinct bytes per preview (a shifted crop), so nothing is cached between images.
    return [
        base.crop(i, 0, base.width - 16, base.height).write_to_buffer(".webp", Q=85)
        for i in range(count)
    ]


def _median(action: Callable[[], Any], rounds: int) -> float:
    action()  # warm-up: first-run allocations and thread pools
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _report(label: str, embedder: ClipEmbedder, previews: list[bytes], rounds: int, decode: float):
    one = [ImageInput(data=previews[0])]
    sixteen = [ImageInput(data=p) for p in previews[:16]]
    texts = [TextInput(f"{TEXT} {i}") for i in range(16)]
    steps = embedder.loaded.preprocessing
    prep = _median(lambda: preprocess_image(previews[0], steps), rounds)
    b1 = _median(lambda: embedder.embed_blocking(one), rounds)
    b16 = _median(lambda: embedder.embed_blocking(sixteen), max(3, rounds // 4)) / 16
    t1 = _median(lambda: embedder.embed_blocking(texts[:1]), rounds)
    t16 = _median(lambda: embedder.embed_blocking(texts), max(3, rounds // 4)) / 16
    print(f"\n{label} ({embedder.dimensions}-d)")
    print(
        f"  {'decode+resize+crop only':<26}{1 / prep:>9.1f} images/s  {prep / decode:>5.2f}x decode"
    )
    print(f"  {'images, batch 1':<26}{1 / b1:>9.1f} images/s  {b1 / decode:>5.2f}x decode")
    print(f"  {'images, batch 16':<26}{1 / b16:>9.1f} images/s  {b16 / decode:>5.2f}x decode")
    print(f"  {'texts, batch 1':<26}{1 / t1:>9.1f} texts/s")
    print(f"  {'texts, batch 16':<26}{1 / t16:>9.1f} texts/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12, help="timed rounds per figure")
    parser.add_argument(
        "--tiny-only", action="store_true", help="skip the ViT-B/32-shaped model (~600 MB)"
    )
    args = parser.parse_args()
    previews = _previews(16)
    decode = _median(
        lambda: pyvips.Image.new_from_buffer(previews[0], "").copy_memory(), args.rounds
    )
    print(f"2048-px WebP previews ({len(previews[0]) / 1024:.0f} KiB), medians of {args.rounds}")
    print(f"  {'full decode (baseline)':<26}{1 / decode:>9.1f} images/s  ({decode * 1000:.1f} ms)")
    with tempfile.TemporaryDirectory(prefix="clip-bench-") as scratch:
        tiny = ClipEmbedder(write_tiny_model(Path(scratch) / "tiny", side=224, resize=224))
        _report("tiny test model, 224-px crop", tiny, previews, args.rounds, decode)
        if not args.tiny_only:
            started = time.perf_counter()
            directory = write_vit_b32_model(Path(scratch) / "vit-b-32")
            size = sum(p.stat().st_size for p in directory.iterdir()) / 1e6
            written = time.perf_counter() - started
            vit = ClipEmbedder(directory)
            print(f"\n(ViT-B/32-shaped model: {size:.0f} MB written in {written:.1f} s)")
            _report("ViT-B/32-shaped, random weights", vit, previews, args.rounds, decode)


if __name__ == "__main__":
    main()
