"""Encoder throughput of each candidate for the recommended model, fp32 and int8, on this CPU.

No weights can be downloaded here, but an encoder's compute cost depends on its architecture,
not on its weights' values. So each candidate's two towers are written with random weights in
its published shapes (``memory_db.testing.clip_model``: the same transformer blocks the
ViT-B/32-shaped benchmark model uses), then quantized the way the hub's int8 exports are
(``onnxruntime.quantization.quantize_dynamic``, 8-bit weights, activations quantized at run
time), and run with ONNX Runtime on the CPU as the clip embedder runs them (all cores):

- images/s: the image encoder alone on preprocessed pixels, batch 1 and batch 16 (what the
  worker and ``reindex`` send); the preprocessing is the same for every candidate (about 0.7
  of a 2,048-px WebP decode: benchmarks/clip_embedder.py);
- texts/s: the text encoder on texts padded to the model's context, batch 1 (a search query).

Medians of ``--rounds`` timed runs after a warm-up, fp32 and int8 timed in turns (so that
other work on a shared machine slows both alike: compare the two within a run). Not part of the test suite: it writes about
2.5 GB of models into a temporary directory and takes minutes on two cores.

    uv run --frozen python benchmarks/clip_candidates.py [--only clip-vit-b-32] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Candidate:
    """One architecture: its towers' shapes (as published) and what the catalog calls it."""

    name: str
    catalog: str
    dims: int
    patch: int
    side: int
    visual_width: int
    text_width: int
    text_heads: int
    context: int
    vocab: int


CANDIDATES = (
    # OpenAI CLIP ViT-B/32 and OpenCLIP's LAION-2B ViT-B/32 share these shapes.
    Candidate(
        "clip-vit-b-32",
        "clip-vit-b-32-openai(-int8), clip-vit-b-32-laion2b",
        512,
        32,
        224,
        768,
        512,
        8,
        77,
        49_408,
    ),
    Candidate(
        "clip-vit-b-16",
        "clip-vit-b-16-openai, clip-vit-b-16-laion2b",
        512,
        16,
        224,
        768,
        512,
        8,
        77,
        49_408,
    ),
    # SigLIP ViT-B/16 at 224 px: a 768-wide text tower over 64 tokens, a 32,000-token vocabulary.
    Candidate("siglip-b-16-224", "siglip-b-16-224", 768, 16, 224, 768, 768, 12, 64, 32_000),
)


def _interleaved(actions: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    """Median seconds of each action, timed in turns: load from other work hits all alike."""
    for action in actions.values():
        action()  # warm-up: first-run allocations and thread pools
    times: dict[str, list[float]] = {label: [] for label in actions}
    for _ in range(rounds):
        for label, action in actions.items():
            start = time.perf_counter()
            action()
            times[label].append(time.perf_counter() - start)
    return {label: statistics.median(spent) for label, spent in times.items()}


def _write(candidate: Candidate, directory: Path) -> tuple[Path, Path]:
    from memory_db.testing.clip_model import write_vit_textual, write_vit_visual

    rng = np.random.default_rng(7)
    visual = directory / f"{candidate.name}-visual.onnx"
    textual = directory / f"{candidate.name}-textual.onnx"
    write_vit_visual(
        visual, rng, candidate.dims, patch=candidate.patch, side=candidate.side,
        width=candidate.visual_width, heads=candidate.visual_width // 64,
    )  # fmt: skip
    write_vit_textual(
        textual, rng, candidate.vocab, candidate.dims, width=candidate.text_width,
        heads=candidate.text_heads, context=candidate.context,
    )  # fmt: skip
    return visual, textual


def _quantized(path: Path) -> Path:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    target = path.with_name(path.stem + "-int8.onnx")
    quantize_dynamic(str(path), str(target), weight_type=QuantType.QUInt8)
    return target


def _session(path: Path) -> Any:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _measure(
    candidate: Candidate, towers: dict[str, tuple[Path, Path]], rounds: int
) -> dict[str, dict[str, float]]:
    """images/s at batch 1 and 16, texts/s at batch 1, and size, for each precision."""
    rng = np.random.default_rng(1)
    pixels = rng.normal(0, 1, (16, 3, candidate.side, candidate.side)).astype(np.float32)
    tokens = rng.integers(0, candidate.vocab, (1, candidate.context), dtype=np.int64)
    sessions = {p: (_session(v), _session(t)) for p, (v, t) in towers.items()}

    def image(session: Any, batch: np.ndarray[Any, Any]) -> Callable[[], Any]:
        return lambda: session.run(None, {session.get_inputs()[0].name: batch})

    def words(session: Any) -> Callable[[], Any]:
        return lambda: session.run(None, {session.get_inputs()[0].name: tokens})

    one = _interleaved({p: image(v, pixels[:1]) for p, (v, _t) in sessions.items()}, rounds)
    sixteen = _interleaved(
        {p: image(v, pixels) for p, (v, _t) in sessions.items()}, max(2, rounds // 2)
    )
    texts = _interleaved({p: words(t) for p, (_v, t) in sessions.items()}, rounds)
    return {
        p: {
            "images/s b1": 1 / one[p],
            "images/s b16": 16 / sixteen[p],
            "texts/s b1": 1 / texts[p],
            "MB": (v.stat().st_size + t.stat().st_size) / 1e6,
        }
        for p, (v, t) in towers.items()
    }


def main() -> None:
    """Write, quantize and time each candidate; print one row per candidate and precision."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed runs per figure")
    parser.add_argument("--only", default=None, help="one candidate's name")
    parser.add_argument("--work-dir", type=Path, default=None, help="where models are written")
    args = parser.parse_args()
    chosen = [c for c in CANDIDATES if args.only in (None, c.name)]
    header = f"{'candidate':<18}{'weights':<8}{'MB':>7}{'img/s b1':>10}{'img/s b16':>11}"
    print(header + f"{'txt/s b1':>10}")
    with tempfile.TemporaryDirectory(dir=args.work_dir) as work:
        for candidate in chosen:
            directory = Path(work) / candidate.name
            directory.mkdir()
            visual, textual = _write(candidate, directory)
            towers = {"fp32": (visual, textual), "int8": (_quantized(visual), _quantized(textual))}
            for precision, row in _measure(candidate, towers, args.rounds).items():
                print(
                    f"{candidate.name:<18}{precision:<8}{row['MB']:>7.0f}"
                    f"{row['images/s b1']:>10.1f}{row['images/s b16']:>11.1f}"
                    f"{row['texts/s b1']:>10.1f}",
                    flush=True,
                )
            for path in directory.iterdir():
                path.unlink()  # two candidates' models at once would need 2.5 GB


if __name__ == "__main__":
    main()
