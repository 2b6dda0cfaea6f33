"""Ingest pipeline throughput and peak memory: ours (pyvips) against Pillow at its best.

One corpus of large generated photographs (baseline and progressive JPEG, PNG, WebP, GIF; up
to 40 MP) goes through each pipeline in its own process: sniff, check the header's pixel count,
decode, orient, make a 2,048-px WebP preview, hash. Pillow uses draft mode (JPEG DCT scaling)
and ``thumbnail`` (reducing gap), its fastest path to a preview. Both processes are warmed up
over the whole corpus, then timed in turn, one image at a time (who goes first alternates by
round), so every timing of ours has a timing of Pillow's taken within a second of it. Each
reports its peak resident memory above its own baseline (after imports, warm-up and loading the
corpus into memory), so the two are measured the same way in the same run.

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


def serve(pipeline: str, files: list[str]) -> None:
    """Time one pipeline on request: ``run N`` (one image), ``peak``; one JSON reply per line.

    Both pipelines stay alive side by side and the parent asks them in turn, image by image, so
    each pair of timings is taken within a second of each other: this machine's speed drifts by
    a third over seconds to minutes, which per-process averages would mix into the ratios.
    """
    if pipeline == "ours":
        import pyvips

        pyvips.cache_set_max(0)  # no cached results between rounds
        run = ours
    else:
        run = pillow
    corpus = [Path(f).read_bytes() for f in files]
    for data in corpus:  # steady state, as in a long-running server: every loader and
        run(data)  # encoder initialised and the allocator warmed before anything is timed
    baseline = _status_kib("VmRSS")
    with contextlib.suppress(OSError):  # reset the peak (VmHWM) to now, where Linux allows
        Path("/proc/self/clear_refs").write_text("5")
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        command, _, argument = line.strip().partition(" ")
        if command == "run":
            start = time.perf_counter()
            run(corpus[int(argument)])
            print(json.dumps({"seconds": time.perf_counter() - start}), flush=True)
        elif command == "peak":
            print(json.dumps({"peak_kib": _status_kib("VmHWM") - baseline}), flush=True)
        else:
            return


class _Child:
    """One pipeline's measuring process, spoken to one line at a time."""

    def __init__(self, pipeline: str, paths: list[str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve", pipeline, *paths],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.ask(None)  # wait until it is warmed up

    def ask(self, command: str | None) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        if command is not None:
            self.process.stdin.write(command + "\n")
            self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the measuring process stopped (exit {self.process.wait()})")
        return json.loads(line)

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait()


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _spread(ratios: list[float]) -> str:
    """The middle half of the per-pair ratios (quartiles), or min..max for a few pairs."""
    ordered = sorted(ratios)
    if len(ordered) >= 8:
        low, high = ordered[len(ordered) // 4], ordered[(3 * len(ordered)) // 4]
    else:
        low, high = ordered[0], ordered[-1]
    return f"{low:.2f}..{high:.2f}x"


def _measure(
    paths: list[str], baseline: str, processes: int, rounds: int
) -> tuple[dict[str, list[list[float]]], dict[str, int]]:
    """Seconds per round per image for both slots ("pillow", "ours") and their peak memory."""
    times: dict[str, list[list[float]]] = {"pillow": [], "ours": []}
    peaks = {"pillow": 0, "ours": 0}
    # A process keeps a speed of its own too (where its memory landed): two processes of the
    # same pipeline differed by up to 14 % on the 40 MP progressive JPEG, so the rounds are
    # spread over several pairs of processes, and which of the two starts first alternates (in
    # control runs the second one started was the faster).
    for pair in range(processes):
        starting = ("pillow", "ours") if pair % 2 == 0 else ("ours", "pillow")
        children = {
            slot: _Child(baseline if slot == "pillow" else "ours", paths) for slot in starting
        }
        try:
            for round_ in range(rounds):
                # Who goes first alternates, so neither is favoured by what ran just before.
                order = ("pillow", "ours") if round_ % 2 == 0 else ("ours", "pillow")
                for slot in order:
                    times[slot].append([])
                for index in range(len(paths)):
                    for slot in order:
                        times[slot][-1].append(children[slot].ask(f"run {index}")["seconds"])
            for slot, child in children.items():
                peaks[slot] = max(peaks[slot], child.ask("peak")["peak_kib"])
        finally:
            for child in children.values():
                child.close()
    return times, peaks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rounds", type=int, default=3, help="timed pairs per image per pair of processes"
    )
    parser.add_argument(
        "--processes", type=int, default=3, help="pairs of processes, one after the other"
    )
    parser.add_argument(
        "--control",
        action="store_true",
        help="measure ours against a second copy of ours: every ratio should be ~1.00x, and "
        "how far they stray is the harness's own noise",
    )
    parser.add_argument("--serve", choices=["ours", "pillow"])
    parser.add_argument("files", nargs="*")
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.files)
        return
    baseline = "ours" if args.control else "pillow"
    with tempfile.TemporaryDirectory() as tmp:
        corpus = make_corpus(Path(tmp))
        paths = [str(path) for _name, _kind, path in corpus]
        times, peaks = _measure(paths, baseline, args.processes, args.rounds)
        sizes = {name: path.stat().st_size for name, _kind, path in corpus}
    print(
        f"{len(corpus)} images, {args.processes} pairs of processes x {args.rounds} rounds (ours "
        "and Pillow in turn, image by image); median seconds per image, lower is better; "
        "'pairs' = middle half of the per-pair speed-ups; peak = highest of the processes"
    )
    if args.control:
        print("CONTROL RUN: the 'Pillow' column is a second process running ours")
    print(f"{'image':<20}{'MiB':>7}{'Pillow':>10}{'ours':>10}{'speed-up':>10}{'pairs':>16}")
    by_kind: dict[str, list[float]] = {}
    total_theirs = total_mine = 0.0
    for index, (name, kind, _path) in enumerate(corpus):
        theirs_each = [round_[index] for round_ in times["pillow"]]
        mine_each = [round_[index] for round_ in times["ours"]]
        theirs, mine = _median(theirs_each), _median(mine_each)
        total_theirs += theirs
        total_mine += mine
        by_kind.setdefault(kind, []).append(theirs / mine)
        each = [t / m for t, m in zip(theirs_each, mine_each, strict=True)]
        print(
            f"{name:<20}{sizes[name] / 2**20:>7.1f}{theirs:>10.3f}{mine:>10.3f}"
            f"{theirs / mine:>9.2f}x{_spread(each):>16}"
        )
    each = [sum(t) / sum(m) for t, m in zip(times["pillow"], times["ours"], strict=True)]
    n = len(corpus)
    print(
        f"throughput: Pillow {n / total_theirs:.2f} img/s, ours {n / total_mine:.2f} img/s "
        f"= {total_theirs / total_mine:.2f}x (target >= 1.5x; rounds {_spread(each)})"
    )
    slowest = min(min(ratios) for ratios in by_kind.values())
    print(f"slowest format ratio: {slowest:.2f}x (target >= 1.0x: no format slower)")
    for kind, ratios in sorted(by_kind.items()):
        print(f"  {kind:<18}{min(ratios):.2f}x .. {max(ratios):.2f}x")
    peak_theirs = peaks["pillow"] / 1024
    peak_mine = peaks["ours"] / 1024
    print(
        f"peak memory above baseline: Pillow {peak_theirs:.0f} MiB, ours {peak_mine:.0f} MiB "
        f"= {peak_mine / max(peak_theirs, 1e-9):.2f}x of Pillow (target <= 1.0x)"
    )


if __name__ == "__main__":
    main()
