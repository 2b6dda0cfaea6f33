"""``LocalEmbedder`` (``local-hash-v1``): the offline, deterministic default.

No model can be downloaded here, so this embedder is honest about what it is: a hand-built
feature vector, not a semantic model. 1,024 dimensions in two blocks:

- dims 0-511, the **image block**, from the sanitised image via pyvips: a lightness histogram
  (32), an a*b* colour histogram (12x12), a coarse 8x8 Lab layout (192) and a 4x4 grid of
  9-bin gradient-orientation histograms (144). Histograms are square-rooted (Hellinger) so
  they compare well with cosine; thumbnails make them robust to re-encoding and resizing, and
  global statistics to small crops.
- dims 512-1023, the **text block**: normalised words and their character trigrams, hashed
  with signs into 512 buckets (feature hashing).

A ``visual`` vector fills only the image block, a text vector only the text block, a ``fused``
vector both (weights 0.6 and 0.8, so it stays unit length). Image→image finds near-duplicates and
similar-looking images, text→image finds assets whose text matches, and nothing pretends to be
semantic.
"""

from __future__ import annotations

import hashlib
import math
import re
import unicodedata
from collections.abc import Sequence
from typing import Any

import numpy as np

from memory_db.embedding.in_process import InProcessEmbedder
from memory_db.embedding.pixels import srgb_thumbnail
from memory_db.embedding.types import (
    EmbedValue,
    ImageInput,
    TextInput,
    Usage,
)
from memory_db.errors import ProviderContractError, ProviderRejected

LOCAL_MODEL = "local-hash-v1"
DIMENSIONS = 1024
BLOCK = 512
FUSED_IMAGE_WEIGHT = 0.6
FUSED_TEXT_WEIGHT = 0.8  # 0.6² + 0.8² = 1: a fused vector is unit length by construction

_WORD_RE = re.compile(r"[^\W_]+", re.UNICODE)
_STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "has",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "that",
        "the",
        "to",
        "was",
        "were",
        "with",
    ]
)


def _unit(vector: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector


# --- text ---------------------------------------------------------------------------------


def _normalise_text(text: str) -> list[str]:
    folded = unicodedata.normalize("NFKD", text.casefold())
    stripped = "".join(ch for ch in folded if not unicodedata.combining(ch))
    return [w for w in _WORD_RE.findall(stripped) if w not in _STOPWORDS]


def _bucket(feature: str) -> tuple[int, float]:
    digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    return value % BLOCK, (1.0 if (value >> 63) & 1 else -1.0)


def text_features(text: str) -> np.ndarray[Any, Any]:
    """The unit-length 512-d text block of ``text`` (zeros for text without words)."""
    block = np.zeros(BLOCK, dtype=np.float64)
    for word in _normalise_text(text):
        index, sign = _bucket("w:" + word)
        block[index] += sign
        padded = f"<{word}>"
        for start in range(len(padded) - 2):
            index, sign = _bucket("g:" + padded[start : start + 3])
            block[index] += 0.35 * sign
    # Sublinear weighting keeps one repeated word from dominating.
    block = np.sign(block) * np.sqrt(np.abs(block))
    return _unit(block)


# --- image --------------------------------------------------------------------------------


def _load_lab(data: bytes, size: int) -> np.ndarray[Any, Any]:
    import pyvips  # imported lazily: libvips loads a few MB of shared libraries

    try:
        image = srgb_thumbnail(data, size, size)
        lab = image.colourspace("lab")
        array: np.ndarray[Any, Any] = lab.numpy()
    except pyvips.Error as exc:
        raise ProviderRejected("invalid_image", "the image could not be decoded") from exc
    return array.astype(np.float64).reshape(size, size, 3)


def _hellinger(histogram: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    total = float(histogram.sum())
    if total <= 0:
        return np.zeros_like(histogram, dtype=np.float64)
    return np.sqrt(histogram / total)


def image_features(data: bytes) -> np.ndarray[Any, Any]:
    """The unit-length 512-d image block of encoded image bytes."""
    lab = _load_lab(data, 64)
    lightness, a, b = lab[..., 0], lab[..., 1], lab[..., 2]

    l_hist = _hellinger(np.histogram(lightness, bins=32, range=(0.0, 100.0))[0].astype(np.float64))
    ab_hist = _hellinger(
        np.histogram2d(a.ravel(), b.ravel(), bins=12, range=[[-80.0, 80.0], [-80.0, 80.0]])[0]
        .ravel()
        .astype(np.float64)
    )
    # Coarse layout: 8x8 cells of mean Lab, centred so overall brightness matters less.
    cells = lab.reshape(8, 8, 8, 8, 3).mean(axis=(1, 3))
    layout = (cells - cells.mean(axis=(0, 1))) / np.array([50.0, 40.0, 40.0])
    layout = _unit(layout.ravel())
    # Texture: gradient orientation histograms (9 unsigned bins) in a 4x4 grid.
    gy, gx = np.gradient(lightness)
    magnitude = np.hypot(gx, gy)
    orientation = (np.arctan2(gy, gx) % math.pi) / math.pi * 9
    bins = np.minimum(orientation.astype(np.int64), 8)
    hog = np.zeros((4, 4, 9), dtype=np.float64)
    for cy in range(4):
        for cx in range(4):
            window = (slice(cy * 16, cy * 16 + 16), slice(cx * 16, cx * 16 + 16))
            hog[cy, cx] = np.bincount(
                bins[window].ravel(), weights=magnitude[window].ravel(), minlength=9
            )
    hog_block = _hellinger(hog.ravel())

    block = np.concatenate([l_hist * 0.9, ab_hist * 1.0, layout * 1.0, hog_block * 0.8])
    if block.shape != (BLOCK,):
        raise ProviderContractError(
            "malformed_response", f"the colour block has shape {block.shape}, not ({BLOCK},)"
        )
    return _unit(block)


# --- the embedder -------------------------------------------------------------------------


def _image_bytes(value: ImageInput) -> bytes:
    if value.data is None:
        raise ProviderRejected(
            "unsupported_media", "the local embedder takes image bytes, not URLs"
        )
    return value.data


def embed_value(value: EmbedValue) -> list[float]:
    """The 1,024-d vector of one value (blocking: run it in a worker thread)."""
    vector = np.zeros(DIMENSIONS, dtype=np.float64)
    if isinstance(value, TextInput):
        vector[BLOCK:] = text_features(value.text)
    elif isinstance(value, ImageInput):
        vector[:BLOCK] = image_features(_image_bytes(value))
    else:
        images = [image_features(_image_bytes(image)) for image in value.images]
        image_block = _unit(np.sum(images, axis=0)) if images else np.zeros(BLOCK)
        text_block = text_features(value.text)
        image_weight = FUSED_IMAGE_WEIGHT if text_block.any() else 1.0
        text_weight = FUSED_TEXT_WEIGHT if images else 1.0
        vector[:BLOCK] = image_weight * image_block
        vector[BLOCK:] = text_weight * text_block
    vector = _unit(vector)
    if not vector.any():
        # Text without a single word: a fixed unit vector rather than a zero vector.
        vector[BLOCK] = 1.0
    return [float(x) for x in vector]


class LocalEmbedder(InProcessEmbedder):
    """Deterministic offline embeddings (``local-hash-v1``, 1,024-d, unit length)."""

    @property
    def model(self) -> str:
        """``local-hash-v1``."""
        return LOCAL_MODEL

    @property
    def dimensions(self) -> int:
        """Always 1,024."""
        return DIMENSIONS

    def embed_blocking(self, values: Sequence[EmbedValue]) -> list[list[float]]:
        """One vector per value (pyvips and numpy: run by ``embed`` in a worker thread)."""
        return [embed_value(v) for v in values]

    def _usage(self, values: Sequence[EmbedValue]) -> Usage:
        prompt = 0
        images = 0
        for value in values:
            if isinstance(value, TextInput):
                prompt += len(_normalise_text(value.text))
            elif isinstance(value, ImageInput):
                images += 1
            else:
                prompt += len(_normalise_text(value.text))
                images += len(value.images)
        return Usage(total_tokens=prompt + images, prompt_tokens=prompt, image_tokens=images)

    async def close(self) -> None:
        """Nothing to release."""


__all__ = ["LOCAL_MODEL", "LocalEmbedder", "embed_value", "image_features", "text_features"]
