"""Ingest pipeline throughput and peak memory: ours (pyvips) against Pillow at its best.

One corpus of large generated photographs (baseline and progressive JPEG, PNG, WebP, GIF; up
to 40 MP) goes through each pipeline in its own process: sniff, check the header's pixel count,
decode, orient, make a 2,048-px WebP preview, hash. Pillow uses draft mode (JPEG DCT scaling)
and ``thumbnail`` (reducing gap), its fastest path to a preview. Each process reports images per
second per format and its peak resident memory above its own baseline (after imports and after
loading the corpus into memory), so the two are measured the same way in the same run.

Targets: at least 1.5x Pillow's throughput over the corpus, peak memory no higher, and no
format where we are slower.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

EDGE = 2048
MAX_PIXELS = 40_000_000
CORPUS = [  # (name, format, width, height, options)
    ("jpeg-12mp-a", "jpeg", 4000, 3000, {"Q": 88}),
    ("jpeg-12mp-b", "jpeg", 3000, 4000, {"Q": 80}),
    ("jpeg-40mp", "jpeg", 7300, 5475, {"Q": 85}),
    ("progressive-12mp", "jpeg-progressive", 4000, 3000, {"Q": 85, "interlace": True}),
    ("progressive-40mp", "jpeg-progressive", 7300, 5475, {"Q": 85, "interlace": True}),
    ("png-4mp", "png", 2400, 1600, {"compression": 6}),
    ("png-12mp", "png", 4000, 3000, {"compression": 6}),
    ("webp-12mp", "webp", 4000, 3000, {"Q": 80}),
    ("webp-24mp", "webp", 6000, 4000, {"Q": 80}),
    ("gif-4mp", "gif", 2400, 1600, {}),
]


def _photo(width: int, height: int) -> Any:
    """A photograph-like picture: a real photo scaled up, with fine grain (not flat colour)."""
    import numpy as np
    import pyvips
    import skimage.data

    photo = np.ascontiguousarray(skimage.data.astronaut())
    base = pyvips.Image.new_from_array(photo, interpretation="srgb")
    scaled = base.resize(width / base.width, vscale=height / base.height)
    grain = pyvips.Image.gaussnoise(width, height, sigma=6, mean=0)
    return (scaled + grain).cast("uchar").copy(interpretation="srgb")


def make_corpus(directory: Path) -> list[tuple[str, str, Path]]:
    """Write the corpus files (generated once per run)."""
    files = []
    for name, kind, width, height, options in CORPUS:
        image = _photo(width, height)
        saver = {
            "jpeg": "jpegsave",
            "jpeg-progressive": "jpegsave",
            "png": "pngsave",
            "webp": "webpsave",
            "gif": "gifsave",
        }[kind]
        path = directory / f"{name}.{ {'jpeg-progressive': 'jpg', 'jpeg': 'jpg'}.get(kind, kind) }"
        getattr(image, saver)(str(path), **options)
        files.append((name, kind, path))
    return files


# --- the two pipelines (run inside the measuring process) -----------------------------------


def ours(data: bytes) -> tuple[int, int, int]:
    from memory_tools.ingest.images import inspect_image_sync

    result = inspect_image_sync(data, max_pixels=MAX_PIXELS, preview_edge=EDGE)
    return result.width, result.height, len(result.preview)


def pillow(data: bytes) -> tuple[int, int, int]:
    from PIL import Image, ImageOps

    from memory_tools.ingest.images import PREVIEW_EFFORT, PREVIEW_QUALITY

    Image.MAX_IMAGE_PIXELS = MAX_PIXELS
    with Image.open(io.BytesIO(data)) as opened:
        if opened.format not in ("JPEG", "PNG", "WEBP", "GIF"):
            raise ValueError("unsupported")
        width, height = opened.size
        if width * height > MAX_PIXELS:
            raise ValueError("too many pixels")
        opened.draft("RGB", (EDGE, EDGE))  # JPEG: decode at 1/2, 1/4 or 1/8 scale
        image = ImageOps.exif_transpose(opened)
        image.thumbnail((EDGE, EDGE))
        if image.mode not in ("RGB", "RGBA"):
            image = image.convert("RGBA" if "transparency" in image.info else "RGB")
        out = io.BytesIO()
        # The same encoder settings as ours (libwebp quality and effort), so only the
        # pipelines differ.
        image.save(out, "WEBP", quality=PREVIEW_QUALITY, method=PREVIEW_EFFORT)
    hashlib.sha256(data).hexdigest()
    return width, height, out.tell()


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def measure(pipeline: str, files: list[str], rounds: int) -> dict[str, Any]:
    """Run one pipeline over the corpus in this process; per-file seconds and peak memory."""
    if pipeline == "ours":
        import pyvips

        pyvips.cache_set_max(0)  # no cached results between rounds
        run = ours
    else:
        run = pillow
    corpus = [(Path(f).stem, Path(f).read_bytes()) for f in files]
    for _name, data in corpus:  # steady state, as in a long-running server: every loader and
        run(data)  # encoder initialised and the allocator warmed before anything is timed
    baseline = _status_kib("VmRSS")
    with contextlib.suppress(OSError):  # reset the peak (VmHWM) to now, where Linux allows
        Path("/proc/self/clear_refs").write_text("5")
    seconds: dict[str, float] = {}
    for name, data in corpus:
        start = time.perf_counter()
        for _ in range(rounds):
            run(data)
        seconds[name] = (time.perf_counter() - start) / rounds
    return {"seconds": seconds, "peak_kib": _status_kib("VmHWM") - baseline}


def _tiny() -> bytes:
    import pyvips

    return pyvips.Image.black(8, 8).jpegsave_buffer()


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="decodes per image per process")
    parser.add_argument(
        "--repeats", type=int, default=3, help="process pairs, interleaved; medians are reported"
    )
    parser.add_argument("--measure", choices=["ours", "pillow"])
    parser.add_argument("files", nargs="*")
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.files, args.rounds)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        corpus = make_corpus(Path(tmp))
        paths = [str(path) for _name, _kind, path in corpus]
        runs: dict[str, list[dict[str, Any]]] = {"pillow": [], "ours": []}
        # Pillow and ours alternate, so a slow spell of the machine hits both alike.
        for _repeat in range(args.repeats):
            for pipeline in ("pillow", "ours"):
                out = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--measure",
                        pipeline,
                        "--rounds",
                        str(args.rounds),
                        *paths,
                    ],
                    check=True,
                    capture_output=True,
                    text=True,
                )
                runs[pipeline].append(json.loads(out.stdout.strip().splitlines()[-1]))
        results = {
            pipeline: {
                "seconds": {
                    name: _median([run["seconds"][name] for run in measured])
                    for name in measured[0]["seconds"]
                },
                "peak_kib": max(run["peak_kib"] for run in measured),
            }
            for pipeline, measured in runs.items()
        }
        kinds = {name: kind for name, kind, _path in corpus}
        sizes = {name: path.stat().st_size for name, _kind, path in corpus}
    print(
        f"{len(corpus)} images, {args.rounds} rounds per process, {args.repeats} interleaved "
        "process pairs; median seconds per image (lower is better); peak = highest of the runs"
    )
    print(f"{'image':<20}{'MiB':>7}{'Pillow':>10}{'ours':>10}{'speed-up':>10}")
    by_kind: dict[str, list[float]] = {}
    for name in results["ours"]["seconds"]:
        theirs = results["pillow"]["seconds"][name]
        mine = results["ours"]["seconds"][name]
        by_kind.setdefault(kinds[name], []).append(theirs / mine)
        print(
            f"{name:<20}{sizes[name] / 2**20:>7.1f}{theirs:>10.3f}{mine:>10.3f}{theirs / mine:>9.2f}x"
        )
    total_theirs = sum(results["pillow"]["seconds"].values())
    total_mine = sum(results["ours"]["seconds"].values())
    n = len(results["ours"]["seconds"])
    print(
        f"throughput: Pillow {n / total_theirs:.2f} img/s, ours {n / total_mine:.2f} img/s "
        f"= {total_theirs / total_mine:.2f}x (target >= 1.5x)"
    )
    slowest = min(min(ratios) for ratios in by_kind.values())
    print(f"slowest format ratio: {slowest:.2f}x (target >= 1.0x: no format slower)")
    for kind, ratios in sorted(by_kind.items()):
        print(f"  {kind:<18}{min(ratios):.2f}x .. {max(ratios):.2f}x")
    peak_theirs = results["pillow"]["peak_kib"] / 1024
    peak_mine = results["ours"]["peak_kib"] / 1024
    print(
        f"peak memory above baseline: Pillow {peak_theirs:.0f} MiB, ours {peak_mine:.0f} MiB "
        f"= {peak_mine / max(peak_theirs, 1e-9):.2f}x of Pillow (target <= 1.0x)"
    )


if __name__ == "__main__":
    main()
