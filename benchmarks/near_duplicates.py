"""The near-duplicate distance, measured: precision and recall of "cosine distance <= d".

Issue 35, near-duplicates: a saved image names the existing assets whose visual vector lies
within a near-duplicate distance (pgvector's ``<=>``, the cosine distance ``1 - cos``). This
measures which distance separates copies of one photo from different photos, on the photographs
that ship inside scikit-image (no download), the same ones the search relevance tests use.

For each photo, an original (a JPEG at quality 95, as from a camera) and its near-duplicates:
JPEG re-encodes at four qualities, a WebP and a PNG conversion, centre crops of 5-20 % per side
and an off-centre one, thumbnails (half, quarter, 256 px), and a screenshot-like copy (scaled
down on a grey border). Every pair inside one photo's group is IN (a near-duplicate); every
pair of two photos' items is OUT. A horizontally mirrored copy of each photo is neither: it is
a deliberate edit (text reads backwards, a face turns the other way), so a person keeps it,
and the search relevance tests treat it as a distractor, not a copy. Its distances to its own
photo's group are reported as a row of their own; against the other photos it is OUT.

Every item goes through the save path's preview (``inspect_image_sync``: the save's
``inspect_image`` without its decode admission, at ``ASSET_PREVIEW_MAX_EDGE``), and the embedding job's call on that preview
(``embed([ImageInput(preview)], "retrieval.passage")``): the visual vector the job stores,
rounded to 16-bit floats as a ``halfvec`` index holds it. (Eight of these images saved to a
running server over MCP: ``<=>`` between their stored vectors gave these distances to 1e-6.)
The default is the ``local`` provider (``local-hash-v1``); ``--provider clip --model-dir DIR
--model NAME`` measures an installed CLIP model instead.

The chosen distance: the largest multiple of 0.005 at which precision is 1.0 (no different
photo within it), so the highest recall with no false near-duplicate on this set. Everything
is deterministic (no randomness, no timing): the same libvips and embedder give the same table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyvips

from memory_db.embedding import ImageInput
from memory_db.embedding.factory import EmbedderIdentity, build_embedder_for, clip_dimensions
from memory_db.embedding.local import DIMENSIONS as LOCAL_DIMENSIONS
from memory_db.embedding.local import LOCAL_MODEL
from memory_db.embedding.types import Embedder
from memory_db.errors import ConfigurationError
from memory_db.settings import MemorySettings
from memory_tools.ingest.images import inspect_image_sync

# What docs/embeddings.md#near-duplicate-distance gives for local-hash-v1 on the full set: the
# chosen distance, and each sweep row as (distance, near-duplicate pairs found, different-photo
# pairs within) of IN_PAIRS and OUT_PAIRS. `make bench` checks them against the run
# (tests/docs/test_near_duplicate_docs.py checks the docs' table against them).
DOCUMENTED_DISTANCE = 0.01
IN_PAIRS, OUT_PAIRS = 2400, 54910
DOCUMENTED_SWEEP = (
    (0.005, 803, 0),
    (0.01, 860, 0),
    (0.02, 945, 1),
    (0.03, 1019, 1),
    (0.04, 1103, 3),
    (0.05, 1139, 4),
    (0.06, 1180, 5),
    (0.08, 1311, 8),
    (0.10, 1383, 14),
    (0.15, 1646, 24),
    (0.20, 1862, 234),
    (0.25, 2076, 558),
    (0.30, 2270, 1387),
)
# Every photograph scikit-image ships in its package (its other images need a download, or
# are synthetic: a checkerboard, a colour wheel, binary blobs, a phantom, a logo).
PHOTOS = (
    "astronaut",
    "brick",
    "camera",
    "cell",
    "chelsea",
    "clock",
    "coffee",
    "coins",
    "grass",
    "gravel",
    "horse",
    "hubble_deep_field",
    "immunohistochemistry",
    "microaneurysms",
    "moon",
    "motorcycle",
    "page",
    "retina",
    "rocket",
    "text",
)
STEP = 0.005  # the grid the chosen distance is picked on
SWEEP = tuple(row[0] for row in DOCUMENTED_SWEEP)  # the distances the table shows
BATCH = 16
TASK = "retrieval.passage"  # what the embedding job asks for (memory_tools.jobs.worker)


def _photo(name: str) -> pyvips.Image:
    """The photo as 8-bit sRGB (grey photos as three equal bands, as a camera JPEG has)."""
    import skimage.data

    if name == "motorcycle":
        array = np.asarray(skimage.data.stereo_motorcycle()[0])  # the left view
    else:
        array = np.asarray(getattr(skimage.data, name)())
    if array.dtype == bool:
        array = array.astype(np.uint8) * 255
    if array.ndim == 2:
        array = np.stack([array] * 3, axis=-1)
    array = np.ascontiguousarray(array[..., :3].astype(np.uint8))
    return pyvips.Image.new_from_array(array, interpretation="srgb")


def _jpeg(image: pyvips.Image, quality: int) -> bytes:
    return image.write_to_buffer(".jpg", Q=quality)


def _crop(image: pyvips.Image, left: float, top: float, right: float, bottom: float) -> bytes:
    x, y = round(image.width * left), round(image.height * top)
    width = image.width - x - round(image.width * right)
    height = image.height - y - round(image.height * bottom)
    return _jpeg(image.crop(x, y, width, height), 85)


def _thumbnail(image: pyvips.Image, long_edge: int) -> bytes:
    scale = long_edge / max(image.width, image.height)
    return _jpeg(image.resize(scale), 85)


def _screenshot(image: pyvips.Image) -> bytes:
    """Scaled to 80 % and shown on a light grey page: a border of 6 % of the width round it."""
    shown = image.resize(0.8)
    border = round(shown.width * 0.06)
    page = shown.embed(
        border,
        border,
        shown.width + 2 * border,
        shown.height + 2 * border,
        extend="background",
        background=[236, 236, 236],
    )
    return page.write_to_buffer(".png")


Variant = Callable[[pyvips.Image], bytes]
VARIANTS: dict[str, Variant] = {
    "JPEG q90": lambda image: _jpeg(image, 90),
    "JPEG q70": lambda image: _jpeg(image, 70),
    "JPEG q50": lambda image: _jpeg(image, 50),
    "JPEG q30": lambda image: _jpeg(image, 30),
    "WebP q75": lambda image: image.write_to_buffer(".webp", Q=75),
    "PNG": lambda image: image.write_to_buffer(".png"),
    "crop 5 % per side": lambda image: _crop(image, 0.05, 0.05, 0.05, 0.05),
    "crop 10 % per side": lambda image: _crop(image, 0.10, 0.10, 0.10, 0.10),
    "crop 15 % per side": lambda image: _crop(image, 0.15, 0.15, 0.15, 0.15),
    "crop 20 % per side": lambda image: _crop(image, 0.20, 0.20, 0.20, 0.20),
    "crop 20 % left and top": lambda image: _crop(image, 0.20, 0.20, 0.0, 0.0),
    "thumbnail 0.5": lambda image: _thumbnail(image, max(image.width, image.height) // 2),
    "thumbnail 0.25": lambda image: _thumbnail(image, max(image.width, image.height) // 4),
    "thumbnail 256 px": lambda image: _thumbnail(image, 256),
    "screenshot (80 % on a border)": _screenshot,
}
MIRROR = "mirrored"


@dataclass(frozen=True)
class Item:
    """One uploaded image: which photo it shows and how it was made from the original."""

    photo: str
    kind: str  # "original", a VARIANTS key, or MIRROR
    data: bytes


def items(photos: Sequence[str]) -> list[Item]:
    """Each photo's original (JPEG q95), its near-duplicates and its mirrored copy."""
    made: list[Item] = []
    for name in photos:
        original_bytes = _jpeg(_photo(name), 95)
        # Every variant is made from the original as uploaded (its decoded JPEG), like a copy
        # someone re-saves, crops or screenshots after receiving it.
        original = pyvips.Image.new_from_buffer(original_bytes, "").copy_memory()
        made.append(Item(name, "original", original_bytes))
        for kind, make in VARIANTS.items():
            made.append(Item(name, kind, make(original)))
        made.append(Item(name, MIRROR, _jpeg(original.fliphor(), 95)))
    return made


def stored_preview(data: bytes, settings: MemorySettings) -> bytes:
    """The preview a save stores for ``data``: what the embedding job reads and embeds."""
    inspected = inspect_image_sync(
        data,
        max_pixels=settings.asset_max_decoded_pixels,
        preview_edge=settings.asset_preview_max_edge,
    )
    return inspected.preview


async def embed_all(embedder: Embedder, previews: Sequence[bytes]) -> np.ndarray[Any, Any]:
    """The visual vectors of ``previews`` as an index stores them, unit-normalised.

    An index's vectors are ``halfvec`` by default (``memory_db.vectors.ddl``), so each is
    rounded to 16-bit floats first, as PostgreSQL compares them; ``<=>`` ignores length.
    """
    vectors: list[list[float]] = []
    for start in range(0, len(previews), BATCH):
        batch = [ImageInput(data=p) for p in previews[start : start + BATCH]]
        vectors.extend((await embedder.embed(batch, TASK)).embeddings)
    matrix = np.asarray(vectors, dtype=np.float16).astype(np.float64)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


@dataclass(frozen=True)
class Pairs:
    """The cosine distances of every IN pair, every OUT pair and every mirror pair."""

    inside: np.ndarray[Any, Any]
    outside: np.ndarray[Any, Any]
    mirrored: np.ndarray[Any, Any]
    closest_out: tuple[float, str, str]
    farthest_in: tuple[float, str, str]
    by_kind: dict[str, np.ndarray[Any, Any]]  # each variant's distance to its original


def pairs(made: Sequence[Item], vectors: np.ndarray[Any, Any]) -> Pairs:
    """Every unordered pair of items, sorted into IN, OUT and mirrored."""
    # Rounded to 6 places: the last bits of a float sum vary with the BLAS build, and a tie at
    # a grid step must not flip between machines.
    distance = np.round(1.0 - vectors @ vectors.T, 6)
    inside: list[float] = []
    outside: list[float] = []
    mirrored: list[float] = []
    by_kind: dict[str, list[float]] = {}
    closest_out = (2.0, "", "")
    farthest_in = (-1.0, "", "")
    for i, first in enumerate(made):
        for j in range(i + 1, len(made)):
            second = made[j]
            value = float(distance[i, j])
            label_a, label_b = f"{first.photo} {first.kind}", f"{second.photo} {second.kind}"
            if first.photo != second.photo:
                outside.append(value)
                if value < closest_out[0]:
                    closest_out = (value, label_a, label_b)
            elif MIRROR in (first.kind, second.kind):
                mirrored.append(value)
            else:
                inside.append(value)
                if value > farthest_in[0]:
                    farthest_in = (value, label_a, label_b)
                if first.kind == "original":
                    by_kind.setdefault(second.kind, []).append(value)
    return Pairs(
        inside=np.asarray(inside),
        outside=np.asarray(outside),
        mirrored=np.asarray(mirrored),
        closest_out=closest_out,
        farthest_in=farthest_in,
        by_kind={kind: np.asarray(values) for kind, values in by_kind.items()},
    )


@dataclass(frozen=True)
class Score:
    """Precision, recall and F1 of "a pair within ``distance`` is a near-duplicate"."""

    distance: float
    found: int  # IN pairs within the distance
    false: int  # OUT pairs within the distance
    precision: float
    recall: float
    f1: float


def scored(distance: float, found: int, false: int, inside: int) -> Score:
    """The score of ``found`` of ``inside`` near-duplicate pairs and ``false`` others within."""
    precision = found / (found + false) if found + false else 1.0
    recall = found / inside if inside else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return Score(distance, found, false, round(precision, 4), round(recall, 4), round(f1, 4))


def score(measured: Pairs, distance: float) -> Score:
    """The score at ``distance`` (within: ``<=``, as ``embedding <=> query <= distance``)."""
    found = int((measured.inside <= distance).sum())
    false = int((measured.outside <= distance).sum())
    return scored(distance, found, false, len(measured.inside))


def documented_scores() -> list[Score]:
    """The sweep rows the docs give for local-hash-v1 on the full set."""
    return [scored(d, found, false, IN_PAIRS) for d, found, false in DOCUMENTED_SWEEP]


def chosen(measured: Pairs) -> Score:
    """The largest multiple of ``STEP`` with precision 1.0: highest recall, no false pair."""
    best = score(measured, 0.0)
    steps = round(2.0 / STEP)
    for step in range(1, steps + 1):
        candidate = score(measured, round(step * STEP, 3))
        if candidate.false:
            break
        best = candidate
    return best


def _embedder(args: argparse.Namespace) -> tuple[Embedder, MemorySettings]:
    overrides: dict[str, Any] = {}
    if args.model_dir is not None:
        overrides["asset_embed_model_dir"] = args.model_dir
    settings = MemorySettings(**overrides)
    if args.provider == "local":
        identity = EmbedderIdentity("local", LOCAL_MODEL, LOCAL_DIMENSIONS)
    else:
        identity = EmbedderIdentity("clip", args.model, clip_dimensions(args.model, settings))
    return build_embedder_for(identity, settings), settings


def _percent(value: float) -> str:
    return f"{value * 100:.1f} %"


def _report(
    measured: Pairs, best: Score, embedder: Embedder, settings: MemorySettings
) -> dict[str, Any]:
    return {
        "model": embedder.model,
        "preview_edge": settings.asset_preview_max_edge,
        "pairs": {
            "in": len(measured.inside),
            "out": len(measured.outside),
            "mirrored": len(measured.mirrored),
        },
        "sweep": [asdict(score(measured, d)) for d in sorted({*SWEEP, best.distance})],
        "chosen": asdict(best),
        "closest_out": measured.closest_out,
        "farthest_in": measured.farthest_in,
        "recall_by_kind": {
            kind: round(float((values <= best.distance).mean()), 4)
            for kind, values in measured.by_kind.items()
        },
        "mirrored_within": round(float((measured.mirrored <= best.distance).mean()), 4),
        "mirrored_min": float(measured.mirrored.min()) if len(measured.mirrored) else None,
    }


def _print(report: dict[str, Any], photos: int, provider: str) -> None:
    print(
        f"{report['model']} on {photos} photographs (previews at most {report['preview_edge']} px)"
        f": {report['pairs']['in']:,} near-duplicate pairs, {report['pairs']['out']:,} pairs of "
        f"different photos, {report['pairs']['mirrored']:,} mirror pairs"
    )
    if provider == "clip":
        print(
            "  a CLIP model's figures are only as good as its weights: the test model has "
            "random ones, so its table means nothing"
        )
    print(f"\n{'distance':>9} {'found':>7} {'false':>6} {'precision':>10} {'recall':>8} {'F1':>7}")
    for row in report["sweep"]:
        mark = "  <- chosen" if row["distance"] == report["chosen"]["distance"] else ""
        print(
            f"{row['distance']:>9.3f} {row['found']:>7,} {row['false']:>6,} "
            f"{row['precision']:>10.4f} {row['recall']:>8.4f} {row['f1']:>7.4f}{mark}"
        )
    best = report["chosen"]
    print(
        f"\nchosen distance {best['distance']:.3f} (largest multiple of {STEP} with precision "
        f"1.0): precision {best['precision']:.4f}, recall {best['recall']:.4f}, "
        f"F1 {best['f1']:.4f}"
    )
    near, a, b = report["closest_out"]
    print(f"closest different photos: {near:.4f} ({a} / {b})")
    far, a, b = report["farthest_in"]
    print(f"farthest near-duplicates: {far:.4f} ({a} / {b})")
    print("\nrecall at the chosen distance, each variant against its original:")
    for kind, recall in report["recall_by_kind"].items():
        print(f"  {kind:<32}{_percent(recall):>8}")
    print(
        f"  {'mirrored (not counted)':<32}{_percent(report['mirrored_within']):>8} of mirror "
        f"pairs within (nearest {report['mirrored_min']:.4f})"
    )


def _targets(report: dict[str, Any], provider: str, full: bool) -> None:
    print()
    if provider != "local" or not full:
        print("  n/a   the documented figures are local-hash-v1's on the full set")
        return
    best = report["chosen"]["distance"]
    print(
        f"  {'PASS' if best == DOCUMENTED_DISTANCE else 'FAIL'}  the chosen distance is the "
        f"documented {DOCUMENTED_DISTANCE}: {best}"
    )
    measured = [Score(**row) for row in report["sweep"] if row["distance"] in SWEEP]
    same = measured == documented_scores() and report["pairs"]["in"] == IN_PAIRS
    same = same and report["pairs"]["out"] == OUT_PAIRS
    print(
        f"  {'PASS' if same else 'FAIL'}  every row of the table is the documented one "
        f"(docs/embeddings.md#near-duplicate-distance)"
    )


async def measure(
    photos: Sequence[str], embedder: Embedder, settings: MemorySettings
) -> dict[str, Any]:
    """Every figure of ``photos`` with ``embedder`` (closed when done), as ``--json`` prints it."""
    made = items(photos)
    previews = [stored_preview(item.data, settings) for item in made]
    try:
        vectors = await embed_all(embedder, previews)
    finally:
        await embedder.close()
    measured = pairs(made, vectors)
    return _report(measured, chosen(measured), embedder, settings)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--provider",
        choices=("local", "clip"),
        default="local",
        help="the embedder to measure (default local: local-hash-v1)",
    )
    parser.add_argument("--model-dir", type=Path, help="clip: the directory of model directories")
    parser.add_argument("--model", help="clip: the model's directory name under --model-dir")
    parser.add_argument(
        "--photos",
        help=f"comma-separated subset of the photos (default all {len(PHOTOS)})",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON only")
    args = parser.parse_args(argv)
    if args.provider == "clip" and not args.model:
        parser.error("--provider clip needs --model (and --model-dir unless the default)")
    photos = tuple(args.photos.split(",")) if args.photos else PHOTOS
    unknown = sorted(set(photos) - set(PHOTOS))
    if unknown or len(set(photos)) != len(photos) or len(photos) < 2:
        parser.error(
            f"--photos: two or more different names of {', '.join(PHOTOS)} (unknown: {unknown})"
        )
    try:
        embedder, settings = _embedder(args)
    except ConfigurationError as exc:
        parser.error(str(exc))
    report = asyncio.run(measure(photos, embedder, settings))
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    _print(report, len(photos), args.provider)
    _targets(report, args.provider, photos == PHOTOS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
