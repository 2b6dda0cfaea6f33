"""``ClipEmbedder``: a CLIP-family model (image and text encoders) run locally with ONNX Runtime.

The model is a directory ``ASSET_EMBED_MODEL_DIR/<model>`` (``memory-server models fetch``
writes one; docs/embeddings.md#clip describes the layout):

- ``visual.onnx``: the image encoder, one float input ``[N, 3, H, W]`` -> ``[N, D]``;
- ``textual.onnx``: the text encoder, ``input_ids`` ``[N, L]`` (and ``attention_mask`` when the
  graph takes one) -> ``[N, D]``;
- ``tokenizer.json``: the Hugging Face ``tokenizers`` file of the text encoder;
- ``preprocessor_config.json``: the Hugging Face image-processor settings (resize, centre crop,
  rescale, normalisation constants);
- ``model.json`` (optional): ``dimensions``, ``context_length`` and the files' SHA-256.

Nothing is downloaded here: a missing or unreadable file is a ``ConfigurationError`` naming it
when the embedder is built (at start-up), never later. The model is identified by its name
(the directory's name), so an index's identity (``clip/<name>/<D>``) holds no machine path.

fastembed was not used: its image models are a fixed list (a ViT-B/32 CLIP, Jina CLIP v1,
ResNet-50, Unicom) with no way to load another image encoder, and it brings a hub downloader
and Pillow. The work it would do is small: decode and crop with pyvips (already the image
library here), normalise with numpy, tokenise with ``tokenizers``.

A ``visual`` vector is the image encoder's output, a text vector the text encoder's, both
L2-normalised; a ``fused`` vector is ``w·image + (1-w)·text``, renormalised
(``ASSET_EMBED_FUSED_IMAGE_WEIGHT``), the images of a fused value averaged first. CLIP has no
query/passage distinction, so both tasks embed alike.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
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
from memory_db.embedding.validation import combine
from memory_db.errors import ConfigurationError, ProviderRejected

VISUAL_FILE = "visual.onnx"
TEXTUAL_FILE = "textual.onnx"
TOKENIZER_FILE = "tokenizer.json"
PREPROCESSOR_FILE = "preprocessor_config.json"
MANIFEST_FILE = "model.json"
MODEL_FILES = (VISUAL_FILE, TEXTUAL_FILE, TOKENIZER_FILE, PREPROCESSOR_FILE)
DEFAULT_CONTEXT_LENGTH = 77
# Images go through the encoder in chunks of this many (bounded memory per call).
IMAGE_CHUNK = 16
# Bounds on what a configuration file may ask for (a hostile or broken file fails clearly).
_MAX_SIDE = 1024
_MAX_CONTEXT = 512
_MAX_CONFIG_BYTES = 1 << 20
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def check_model_name(name: str) -> str:
    """``name`` if it can name a model directory (no separators, no ``..``), else refused."""
    if not _NAME_RE.match(name) or ".." in name:
        raise ConfigurationError(
            f"ASSET_EMBED_MODEL: {name!r} is not a model directory name "
            "(letters, digits, '.', '_', '-'; see memory-server models list)"
        )
    return name


def model_path(model_dir: Path, name: str) -> Path:
    """Where the model ``name`` lives under ``ASSET_EMBED_MODEL_DIR``."""
    return model_dir / check_model_name(name)


# --- preprocessing ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Preprocessing:
    """The image processor's steps: resize, centre crop, rescale, normalise (RGB, CHW)."""

    # Resize so the shorter side is ``shortest_edge`` (CLIP), or to exactly ``height x width``.
    shortest_edge: int | None
    height: int
    width: int
    crop: tuple[int, int] | None  # (height, width) of the centre crop, or no crop
    rescale: float
    mean: tuple[float, float, float]
    std: tuple[float, float, float]

    @property
    def output_size(self) -> tuple[int, int]:
        """(height, width) of the tensor the encoder gets."""
        return self.crop if self.crop is not None else (self.height, self.width)


def _side(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= _MAX_SIDE:
        raise ValueError(f"{what} must be a whole number from 1 to {_MAX_SIDE}")
    return value


def _triple(value: Any, what: str, default: tuple[float, float, float]) -> tuple[float, ...]:
    if value is None:
        return default
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = [value] * 3
    if not isinstance(value, list) or len(value) != 3:
        raise ValueError(f"{what} must be three numbers")
    return tuple(float(v) for v in value)


def parse_preprocessing(config: dict[str, Any]) -> Preprocessing:
    """The :class:`Preprocessing` of a Hugging Face ``preprocessor_config.json`` (ValueError)."""
    size = config.get("size", {"shortest_edge": 224})
    if isinstance(size, int) and not isinstance(size, bool):
        size = {"shortest_edge": size}
    if not isinstance(size, dict):
        raise ValueError("size must be an object")
    shortest: int | None = None
    height = width = 0
    if config.get("do_resize", True) is False:
        raise ValueError("do_resize false is not supported (the encoder needs a fixed size)")
    if "shortest_edge" in size:
        shortest = _side(size["shortest_edge"], "size.shortest_edge")
    else:
        height = _side(size.get("height"), "size.height")
        width = _side(size.get("width"), "size.width")
    crop: tuple[int, int] | None = None
    if config.get("do_center_crop", shortest is not None):
        crop_size = config.get("crop_size", size)
        if isinstance(crop_size, int) and not isinstance(crop_size, bool):
            crop_size = {"height": crop_size, "width": crop_size}
        if not isinstance(crop_size, dict):
            raise ValueError("crop_size must be an object")
        crop = (
            _side(crop_size.get("height", crop_size.get("shortest_edge")), "crop_size.height"),
            _side(crop_size.get("width", crop_size.get("shortest_edge")), "crop_size.width"),
        )
    elif shortest is not None:
        raise ValueError("a shortest_edge resize needs do_center_crop (the encoder needs a square)")
    rescale = float(config.get("rescale_factor", 1 / 255)) if config.get("do_rescale", True) else 1
    mean3: tuple[float, ...] = (0.0, 0.0, 0.0)
    std3: tuple[float, ...] = (1.0, 1.0, 1.0)
    if config.get("do_normalize", True):
        mean3 = _triple(config.get("image_mean"), "image_mean", (0.0, 0.0, 0.0))
        std3 = _triple(config.get("image_std"), "image_std", (1.0, 1.0, 1.0))
    if any(s <= 0 for s in std3):
        raise ValueError("image_std must be positive")
    return Preprocessing(
        shortest_edge=shortest,
        height=height,
        width=width,
        crop=crop,
        rescale=rescale,
        mean=(mean3[0], mean3[1], mean3[2]),
        std=(std3[0], std3[1], std3[2]),
    )


def preprocess_image(data: bytes, steps: Preprocessing) -> np.ndarray[Any, Any]:
    """The ``[3, H, W]`` float32 tensor of encoded image bytes (``invalid_image`` if undecodable).

    Like the Hugging Face image processors: the shorter side is resized to ``shortest_edge``
    (the longer one in proportion, rounded down) or the image to ``height x width``, then the
    centre is cropped (offsets rounded down), the values rescaled and normalised per channel.
    """
    import pyvips  # imported lazily: libvips loads a few MB of shared libraries

    try:
        header = pyvips.Image.new_from_buffer(data, "")
        if steps.shortest_edge is not None:
            short = min(header.width, header.height)
            scale = steps.shortest_edge / short
            width = max(steps.shortest_edge, int(header.width * scale))
            height = max(steps.shortest_edge, int(header.height * scale))
            if header.width <= header.height:
                width = steps.shortest_edge
            else:
                height = steps.shortest_edge
        else:
            width, height = steps.width, steps.height
        image = srgb_thumbnail(data, width, height)
        if image.format != "uchar":
            image = image.cast("uchar")
        pixels: np.ndarray[Any, Any] = image.numpy()
    except pyvips.Error as exc:
        raise ProviderRejected("invalid_image", "the image could not be decoded") from exc
    pixels = pixels.reshape(image.height, image.width, 3)
    if steps.crop is not None:
        crop_h, crop_w = steps.crop
        top = max(0, (image.height - crop_h) // 2)
        left = max(0, (image.width - crop_w) // 2)
        pixels = pixels[top : top + crop_h, left : left + crop_w]
        if pixels.shape[:2] != (crop_h, crop_w):  # smaller than the crop: pad like HF (zeros)
            padded = np.zeros((crop_h, crop_w, 3), dtype=pixels.dtype)
            padded[: pixels.shape[0], : pixels.shape[1]] = pixels
            pixels = padded
    scaled = pixels.astype(np.float32) * np.float32(steps.rescale)
    normalised = (scaled - np.array(steps.mean, dtype=np.float32)) / np.array(
        steps.std, dtype=np.float32
    )
    return np.ascontiguousarray(normalised.transpose(2, 0, 1))


# --- loading ----------------------------------------------------------------------------------


def _file(directory: Path, name: str) -> Path:
    path = directory / name
    if not path.is_file():
        raise ConfigurationError(
            f"clip model {directory.name}: {name} is missing from {directory} "
            "(memory-server models fetch NAME writes a complete model directory)"
        )
    return path


def _json_file(directory: Path, name: str) -> dict[str, Any]:
    path = _file(directory, name)
    try:
        if path.stat().st_size > _MAX_CONFIG_BYTES:
            raise ValueError("larger than 1 MiB")
        value = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(value, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as exc:
        raise ConfigurationError(
            f"clip model {directory.name}: {name} is unreadable: {exc}"
        ) from None
    return value


def read_manifest(directory: Path) -> dict[str, Any]:
    """``model.json`` of a model directory, or ``{}`` when it has none."""
    if not (directory / MANIFEST_FILE).exists():
        return {}
    return _json_file(directory, MANIFEST_FILE)


def _session(directory: Path, name: str) -> Any:
    import onnxruntime as ort

    path = _file(directory, name)
    options = ort.SessionOptions()
    options.log_severity_level = 3  # ONNX Runtime's own warnings go to stderr, not our logs
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own exception types for a bad graph
        raise ConfigurationError(
            f"clip model {directory.name}: {name} is not a loadable ONNX model: "
            f"{str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__}"
        ) from None


def _output_name(session: Any, preferred: tuple[str, ...]) -> str:
    outputs = session.get_outputs()
    names = [o.name for o in outputs]
    for name in preferred:
        if name in names:
            return name
    for output in outputs:
        if len(output.shape) == 2:
            return str(output.name)
    return str(names[0])


class ClipModel:
    """The loaded encoders, tokenizer and preprocessing of one model directory (blocking API)."""

    def __init__(self, directory: Path) -> None:
        from tokenizers import Tokenizer

        self.directory = directory
        self.name = directory.name
        if not directory.is_dir():
            raise ConfigurationError(
                f"clip model {directory.name}: no model directory at {directory} "
                "(ASSET_EMBED_MODEL_DIR/ASSET_EMBED_MODEL; memory-server models fetch NAME)"
            )
        manifest = read_manifest(directory)
        try:
            self.preprocessing = parse_preprocessing(_json_file(directory, PREPROCESSOR_FILE))
        except ValueError as exc:
            raise ConfigurationError(
                f"clip model {self.name}: {PREPROCESSOR_FILE} is invalid: {exc}"
            ) from None
        tokenizer_path = _file(directory, TOKENIZER_FILE)
        try:
            self.tokenizer = Tokenizer.from_file(str(tokenizer_path))
        except Exception as exc:  # tokenizers raises a plain Exception for a malformed file
            raise ConfigurationError(
                f"clip model {self.name}: {TOKENIZER_FILE} is not a tokenizers file: "
                f"{str(exc)[:300]}"
            ) from None
        self.visual = _session(directory, VISUAL_FILE)
        self.textual = _session(directory, TEXTUAL_FILE)
        self._image_input = self.visual.get_inputs()[0].name
        self._image_output = _output_name(self.visual, ("image_embeds", "embedding"))
        self._text_output = _output_name(self.textual, ("text_embeds", "embedding"))
        text_inputs = {i.name: i for i in self.textual.get_inputs()}
        ids_input = text_inputs.get("input_ids") or text_inputs.get("text")
        if ids_input is None:
            ids_input = self.textual.get_inputs()[0]
        self._ids_input = ids_input.name
        self._mask_input = "attention_mask" if "attention_mask" in text_inputs else None
        unknown = set(text_inputs) - {self._ids_input, "attention_mask"}
        if unknown:
            raise ConfigurationError(
                f"clip model {self.name}: {TEXTUAL_FILE} takes inputs this embedder does not "
                f"provide: {', '.join(sorted(unknown))}"
            )
        self.context_length = self._context_length(manifest, ids_input.shape)
        self._configure_tokenizer()
        # Sessions are safe to run from several threads; the tokenizer's settings are not
        # changed after this point. One lock keeps a model's runs from competing for the cores.
        self._lock = threading.Lock()
        self.dimensions = self._probe()

    def _context_length(self, manifest: dict[str, Any], shape: Sequence[Any]) -> int:
        if len(shape) == 2 and isinstance(shape[1], int) and shape[1] > 0:
            return int(shape[1])
        declared = manifest.get("context_length")
        if isinstance(declared, int) and 1 <= declared <= _MAX_CONTEXT:
            return declared
        truncation = self.tokenizer.truncation
        if truncation and 1 <= int(truncation.get("max_length", 0)) <= _MAX_CONTEXT:
            return int(truncation["max_length"])
        return DEFAULT_CONTEXT_LENGTH

    def _configure_tokenizer(self) -> None:
        padding = self.tokenizer.padding
        pad_token = padding.get("pad_token") if padding else None
        pad_id = padding.get("pad_id") if padding else None
        if pad_id is None:
            for candidate in ("<|endoftext|>", "<pad>", "[PAD]", "</s>"):
                found = self.tokenizer.token_to_id(candidate)
                if found is not None:
                    pad_token, pad_id = candidate, found
                    break
        # Every text is padded to the context length: its vector never depends on the other
        # texts of a batch, and encoders exported with a fixed length get what they expect.
        self.tokenizer.enable_truncation(max_length=self.context_length)
        self.tokenizer.enable_padding(
            length=self.context_length, pad_id=int(pad_id or 0), pad_token=str(pad_token or "")
        )

    def _probe(self) -> int:
        side_h, side_w = self.preprocessing.output_size
        shape = list(self.visual.get_inputs()[0].shape)
        if len(shape) != 4 or any(
            isinstance(want, int) and want != got
            for want, got in zip(shape[1:], (3, side_h, side_w), strict=True)
        ):
            raise ConfigurationError(
                f"clip model {self.name}: {VISUAL_FILE} takes input {shape} but "
                f"{PREPROCESSOR_FILE} makes [N, 3, {side_h}, {side_w}]"
            )
        try:
            text = self.encode_texts(["a photo"])
        except Exception as exc:  # onnxruntime's own exception types
            raise ConfigurationError(
                f"clip model {self.name}: {TEXTUAL_FILE} failed on a test text: "
                f"{str(exc).splitlines()[0][:300]}"
            ) from None
        try:
            image = self._run_images(np.zeros((1, 3, side_h, side_w), dtype=np.float32))
        except Exception as exc:  # onnxruntime's own exception types
            raise ConfigurationError(
                f"clip model {self.name}: {VISUAL_FILE} failed on a test image: "
                f"{str(exc).splitlines()[0][:300]}"
            ) from None
        if text.ndim != 2 or image.ndim != 2:
            raise ConfigurationError(
                f"clip model {self.name}: the encoders must output [N, D] vectors "
                f"(got {list(image.shape)} and {list(text.shape)})"
            )
        if text.shape[1] != image.shape[1]:
            raise ConfigurationError(
                f"clip model {self.name}: {VISUAL_FILE} makes {image.shape[1]}-d vectors but "
                f"{TEXTUAL_FILE} {text.shape[1]}-d"
            )
        return int(text.shape[1])

    def tokenize(self, texts: Sequence[str]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """``input_ids`` and ``attention_mask`` (``[N, context_length]``, int64) of ``texts``."""
        encodings = self.tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        return ids, mask

    def _run_images(self, pixels: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        with self._lock:
            (out,) = self.visual.run([self._image_output], {self._image_input: pixels})
        return np.asarray(out, dtype=np.float32)

    def encode_texts(self, texts: Sequence[str]) -> np.ndarray[Any, Any]:
        """Unnormalised text vectors ``[N, D]``."""
        ids, mask = self.tokenize(texts)
        feeds: dict[str, Any] = {self._ids_input: ids}
        if self._mask_input is not None:
            feeds[self._mask_input] = mask
        with self._lock:
            (out,) = self.textual.run([self._text_output], feeds)
        return np.asarray(out, dtype=np.float32)

    def encode_images(self, images: Sequence[bytes]) -> np.ndarray[Any, Any]:
        """Unnormalised image vectors ``[N, D]`` of encoded image bytes, in chunks."""
        chunks: list[np.ndarray[Any, Any]] = []
        for start in range(0, len(images), IMAGE_CHUNK):
            pixels = np.stack(
                [
                    preprocess_image(d, self.preprocessing)
                    for d in images[start : start + IMAGE_CHUNK]
                ]
            )
            chunks.append(self._run_images(pixels))
        return np.concatenate(chunks) if chunks else np.zeros((0, self.dimensions), np.float32)


def _unit_rows(matrix: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    norms = np.linalg.norm(matrix.astype(np.float64), axis=1, keepdims=True)
    if not np.all(norms > 0):
        raise ProviderRejected("zero_vector", "the model produced a zero vector")
    return matrix.astype(np.float64) / norms


def _image_bytes(value: ImageInput) -> bytes:
    if value.data is None:
        raise ProviderRejected("unsupported_media", "the clip embedder takes image bytes, not URLs")
    return value.data


class ClipEmbedder(InProcessEmbedder):
    """An ONNX CLIP-family model from ``ASSET_EMBED_MODEL_DIR/<model>`` (unit-length vectors)."""

    def __init__(
        self,
        directory: Path,
        *,
        dimensions: int | None = None,
        fused_image_weight: float = 0.5,
    ) -> None:
        self._model = ClipModel(directory)
        if dimensions is not None and dimensions != self._model.dimensions:
            raise ConfigurationError(
                f"ASSET_EMBED_DIM: clip model {self._model.name} makes "
                f"{self._model.dimensions}-d vectors, not {dimensions}"
            )
        self._fused_image_weight = fused_image_weight

    @property
    def model(self) -> str:
        """The model directory's name (an index records it; never the path)."""
        return self._model.name

    @property
    def dimensions(self) -> int:
        """The encoders' output width."""
        return self._model.dimensions

    @property
    def loaded(self) -> ClipModel:
        """The loaded model (preprocessing, tokenizer, sessions)."""
        return self._model

    def embed_blocking(self, values: Sequence[EmbedValue]) -> list[list[float]]:
        """One unit vector per value (blocking: run it in a worker thread)."""
        texts: list[str] = []
        images: list[bytes] = []
        for value in values:
            if isinstance(value, TextInput):
                texts.append(value.text)
            elif isinstance(value, ImageInput):
                images.append(_image_bytes(value))
            else:
                if value.text:
                    texts.append(value.text)
                images.extend(_image_bytes(image) for image in value.images)
        text_vectors = _unit_rows(self._model.encode_texts(texts)) if texts else None
        image_vectors = _unit_rows(self._model.encode_images(images)) if images else None
        out: list[list[float]] = []
        next_text = next_image = 0
        # Empty arrays stand in for a side with no inputs: nothing indexes them then.
        text_rows = text_vectors if text_vectors is not None else np.zeros((0, 0))
        image_rows = image_vectors if image_vectors is not None else np.zeros((0, 0))
        for value in values:
            if isinstance(value, TextInput):
                out.append([float(x) for x in text_rows[next_text]])
                next_text += 1
            elif isinstance(value, ImageInput):
                out.append([float(x) for x in image_rows[next_image]])
                next_image += 1
            else:
                text_vector = None
                if value.text:
                    text_vector = text_rows[next_text]
                    next_text += 1
                count = len(value.images)
                image_vector = None
                if count:
                    image_vector = image_rows[next_image : next_image + count].mean(axis=0)
                    next_image += count
                out.append(self._fuse(image_vector, text_vector))
        return out

    def _fuse(
        self, image: np.ndarray[Any, Any] | None, text: np.ndarray[Any, Any] | None
    ) -> list[float]:
        if image is None:
            if text is None:
                raise ProviderRejected("empty_input", "a fused value needs text or an image")
            return [float(x) for x in text]
        unit_image = image / np.linalg.norm(image)
        if text is None:
            return [float(x) for x in unit_image]
        return combine(unit_image.tolist(), text.tolist(), self._fused_image_weight)

    def _usage(self, values: Sequence[EmbedValue]) -> Usage:
        texts = [v.text for v in values if not isinstance(v, ImageInput) and v.text]
        images = sum(
            1 if isinstance(v, ImageInput) else len(v.images)
            for v in values
            if not isinstance(v, TextInput)
        )
        prompt = 0
        if texts:
            prompt = int(self._model.tokenize(texts)[1].sum())
        return Usage(total_tokens=prompt + images, prompt_tokens=prompt, image_tokens=images)

    async def close(self) -> None:
        """Nothing to release (the sessions go with the object)."""


__all__ = [
    "MODEL_FILES",
    "ClipEmbedder",
    "ClipModel",
    "Preprocessing",
    "check_model_name",
    "model_path",
    "parse_preprocessing",
    "preprocess_image",
]
