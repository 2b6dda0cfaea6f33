"""Model directories for the clip embedder written here, with randomly initialised weights.

No weights can be downloaded in tests or benchmarks, so these write the encoders with the
``onnx`` helper API (a dev dependency) into a directory laid out like a real model
(``memory_db.embedding.clip``): ``visual.onnx``, ``textual.onnx``, ``tokenizer.json``,
``preprocessor_config.json`` and ``model.json``. The embedder loads them through the same
code as a real model.

- :func:`write_tiny_model`: a patch convolution and a bag-of-token-embeddings text encoder,
  a few kilobytes, for tests.
- :func:`write_vit_b32_model`: encoders shaped like CLIP ViT-B/32 (12 transformer layers of
  width 768 over 7x7 patches of a 224-px image; 12 layers of width 512 over 77 tokens), for
  the benchmark: their speed does not depend on the weights' values.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from memory_db.embedding.clip_catalog import (
    CATALOG,
    catalog_model,
    clip_preprocessing,
    load_catalog_file,
)
from memory_db.testing.http_server import LocalHttpServer

TINY_WORDS = (
    "a",
    "an",
    "the",
    "cat",
    "dog",
    "on",
    "sofa",
    "lighthouse",
    "at",
    "dusk",
    "photo",
    "of",
    "red",
    "blue",
    "green",
    "ein",
    "leuchtturm",
)
TINY_DIMENSIONS = 32
TINY_CONTEXT = 16
TINY_SIDE = 16  # the crop the image encoder sees
TINY_RESIZE = 20  # the shorter side before the crop
TINY_MEAN = (0.5, 0.4, 0.3)
TINY_STD = (0.2, 0.25, 0.3)
SPECIAL_TOKENS = ("<pad>", "<unk>", "<|startoftext|>", "<|endoftext|>")


def _tensor(name: str, array: np.ndarray[Any, Any]) -> Any:
    from onnx import numpy_helper

    return numpy_helper.from_array(array, name=name)


def _save(path: Path, nodes: list[Any], inputs: list[Any], outputs: list[Any], inits: list[Any]):
    import onnx
    from onnx import helper

    graph = helper.make_graph(nodes, path.stem, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def write_tokenizer(path: Path, words: Sequence[str] = TINY_WORDS) -> dict[str, int]:
    """A word-level ``tokenizer.json`` (lower-cased, whitespace-split, CLIP's start/end tokens).

    Returns the vocabulary.
    """
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    vocab = {token: index for index, token in enumerate((*SPECIAL_TOKENS, *words))}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))  # noqa: S106 (a token, not a password)
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<|startoftext|> $A <|endoftext|>",
        special_tokens=[
            ("<|startoftext|>", vocab["<|startoftext|>"]),
            ("<|endoftext|>", vocab["<|endoftext|>"]),
        ],
    )
    tokenizer.save(str(path))
    return vocab


def _write_tiny_visual(path: Path, rng: np.random.Generator, dims: int, side: int) -> None:
    from onnx import TensorProto, helper

    patch = 8
    inits = [
        _tensor("patch_w", rng.normal(0, 0.2, (dims, 3, patch, patch)).astype(np.float32)),
        _tensor("proj", rng.normal(0, 0.3, (dims, dims)).astype(np.float32)),
    ]
    nodes = [
        helper.make_node("Conv", ["pixel_values", "patch_w"], ["patches"], strides=[patch, patch]),
        helper.make_node("Tanh", ["patches"], ["act"]),
        helper.make_node("GlobalAveragePool", ["act"], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["flat"]),
        helper.make_node("MatMul", ["flat", "proj"], ["image_embeds"]),
    ]
    inputs = [
        helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, ["batch", 3, side, side])
    ]
    outputs = [helper.make_tensor_value_info("image_embeds", TensorProto.FLOAT, ["batch", dims])]
    _save(path, nodes, inputs, outputs, inits)


def _write_tiny_textual(path: Path, rng: np.random.Generator, vocab: int, dims: int) -> None:
    from onnx import TensorProto, helper

    inits = [
        _tensor("token_embedding", rng.normal(0, 1.0, (vocab, dims)).astype(np.float32)),
        _tensor("proj", rng.normal(0, 0.3, (dims, dims)).astype(np.float32)),
        _tensor("axis2", np.array([2], dtype=np.int64)),
        _tensor("axis1", np.array([1], dtype=np.int64)),
    ]
    nodes = [
        helper.make_node("Gather", ["token_embedding", "input_ids"], ["tokens"]),
        helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["mask_f", "axis2"], ["mask3"]),
        helper.make_node("Mul", ["tokens", "mask3"], ["masked"]),
        helper.make_node("ReduceSum", ["masked", "axis1"], ["summed"], keepdims=0),
        helper.make_node("Tanh", ["summed"], ["act"]),
        helper.make_node("MatMul", ["act", "proj"], ["text_embeds"]),
    ]
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "sequence"]),
    ]
    outputs = [helper.make_tensor_value_info("text_embeds", TensorProto.FLOAT, ["batch", dims])]
    _save(path, nodes, inputs, outputs, inits)


def write_tiny_model(
    directory: Path,
    *,
    seed: int = 20,
    dims: int = TINY_DIMENSIONS,
    side: int = TINY_SIDE,
    resize: int = TINY_RESIZE,
) -> Path:
    """A complete tiny model directory at ``directory`` (created); returns it.

    The image encoder takes ``side`` x ``side`` pixels; the preprocessing resizes the shorter
    side to ``resize`` and crops the centre ``side`` x ``side``.
    """
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    vocab = write_tokenizer(directory / "tokenizer.json")
    _write_tiny_visual(directory / "visual.onnx", rng, dims, side)
    _write_tiny_textual(directory / "textual.onnx", rng, len(vocab), dims)
    (directory / "preprocessor_config.json").write_text(
        json.dumps(clip_preprocessing(side, TINY_MEAN, TINY_STD, resize=resize)),
        encoding="utf-8",
    )
    (directory / "model.json").write_text(
        json.dumps({"dimensions": dims, "context_length": TINY_CONTEXT}), encoding="utf-8"
    )
    return directory


# --- ViT-B/32-shaped encoders (benchmark) -------------------------------------------------------


class _Graph:
    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self._count = 0

    def name(self, stem: str) -> str:
        self._count += 1
        return f"{stem}_{self._count}"

    def weight(self, shape: tuple[int, ...], scale: float = 0.02) -> str:
        name = self.name("w")
        self.inits.append(_tensor(name, self.rng.normal(0, scale, shape).astype(np.float32)))
        return name

    def const(self, values: Sequence[float] | float, dtype: Any = np.int64) -> str:
        name = self.name("c")
        self.inits.append(_tensor(name, np.array(values, dtype=dtype)))
        return name

    def op(self, kind: str, inputs: list[str], **attrs: Any) -> str:
        from onnx import helper

        out = self.name(kind.lower())
        self.nodes.append(helper.make_node(kind, inputs, [out], **attrs))
        return out

    def linear(self, x: str, d_in: int, d_out: int) -> str:
        return self.op(
            "Add", [self.op("MatMul", [x, self.weight((d_in, d_out))]), self.weight((d_out,))]
        )

    def layer_norm(self, x: str, width: int) -> str:
        scale = self.const([1.0] * width, np.float32)
        bias = self.const([0.0] * width, np.float32)
        return self.op("LayerNormalization", [x, scale, bias], axis=-1)

    def block(self, x: str, width: int, heads: int) -> str:
        head = width // heads
        h = self.layer_norm(x, width)
        qkv = self.linear(h, width, 3 * width)
        qkv = self.op("Reshape", [qkv, self.const([0, 0, 3, heads, head])])
        qkv = self.op("Transpose", [qkv], perm=[2, 0, 3, 1, 4])
        q = self.op("Gather", [qkv, self.const(0)], axis=0)
        k = self.op("Gather", [qkv, self.const(1)], axis=0)
        v = self.op("Gather", [qkv, self.const(2)], axis=0)
        scores = self.op("MatMul", [q, self.op("Transpose", [k], perm=[0, 1, 3, 2])])
        scores = self.op("Mul", [scores, self.const(1.0 / float(np.sqrt(head)), np.float32)])
        attn = self.op("MatMul", [self.op("Softmax", [scores], axis=-1), v])
        attn = self.op("Transpose", [attn], perm=[0, 2, 1, 3])
        attn = self.op("Reshape", [attn, self.const([0, 0, width])])
        x = self.op("Add", [x, self.linear(attn, width, width)])
        h = self.linear(self.layer_norm(x, width), width, 4 * width)
        h = self.op(
            "Mul", [h, self.op("Sigmoid", [self.op("Mul", [h, self.const(1.702, np.float32)])])]
        )
        return self.op("Add", [x, self.linear(h, 4 * width, width)])


def write_vit_visual(
    path: Path,
    rng: np.random.Generator,
    dims: int,
    *,
    width: int = 768,
    layers: int = 12,
    heads: int = 12,
    patch: int = 32,
    side: int = 224,
) -> None:
    """An image encoder of a ViT's shapes (CLIP ViT-B/32's by default), random weights."""
    from onnx import TensorProto, helper

    g = _Graph(rng)
    x = g.op("Conv", ["pixel_values", g.weight((width, 3, patch, patch))], strides=[patch, patch])
    x = g.op("Reshape", [x, g.const([0, width, (side // patch) ** 2])])
    x = g.op("Transpose", [x], perm=[0, 2, 1])
    x = g.op("Add", [x, g.weight(((side // patch) ** 2, width))])
    for _ in range(layers):
        x = g.block(x, width, heads)
    x = g.layer_norm(g.op("ReduceMean", [x], axes=[1], keepdims=0), width)
    g.nodes.append(helper.make_node("MatMul", [x, g.weight((width, dims))], ["image_embeds"]))
    inputs = [
        helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, ["batch", 3, side, side])
    ]
    outputs = [helper.make_tensor_value_info("image_embeds", TensorProto.FLOAT, ["batch", dims])]
    _save(path, g.nodes, inputs, outputs, g.inits)


def write_vit_textual(
    path: Path,
    rng: np.random.Generator,
    vocab: int,
    dims: int,
    *,
    width: int = 512,
    layers: int = 12,
    heads: int = 8,
    context: int = 77,
) -> None:
    """A text encoder of a CLIP's shapes (ViT-B/32's by default), random weights."""
    from onnx import TensorProto, helper

    g = _Graph(rng)
    x = g.op("Gather", [g.weight((vocab, width)), "input_ids"])
    x = g.op("Add", [x, g.weight((context, width))])
    for _ in range(layers):
        x = g.block(x, width, heads)
    x = g.layer_norm(g.op("Gather", [x, g.const(0)], axis=1), width)
    g.nodes.append(helper.make_node("MatMul", [x, g.weight((width, dims))], ["text_embeds"]))
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", context])]
    outputs = [helper.make_tensor_value_info("text_embeds", TensorProto.FLOAT, ["batch", dims])]
    _save(path, g.nodes, inputs, outputs, g.inits)


def write_vit_b32_model(directory: Path, *, seed: int = 32, dims: int = 512) -> Path:
    """A ViT-B/32-shaped model directory (about 600 MB of random fp32 weights); returns it."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    vocab = write_tokenizer(directory / "tokenizer.json")
    # CLIP's vocabulary has 49,408 tokens: the embedding table is part of the model's size.
    write_vit_textual(directory / "textual.onnx", rng, max(len(vocab), 49_408), dims)
    write_vit_visual(directory / "visual.onnx", rng, dims)
    (directory / "preprocessor_config.json").write_text(
        json.dumps(
            clip_preprocessing(
                224, (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)
            )
        ),
        encoding="utf-8",
    )
    (directory / "model.json").write_text(
        json.dumps({"dimensions": dims, "context_length": 77}), encoding="utf-8"
    )
    return directory


class ModelHubServer(LocalHttpServer):
    """A model hub on 127.0.0.1 laid out like Hugging Face's, for ``models fetch`` tests.

    ``files`` maps a hub path (``/<repo>/resolve/<revision>/<file>``) to its bytes. A request for
    one is redirected to ``/cdn/...`` with the file's SHA-256 in ``X-Linked-Etag`` and its size
    in ``X-Linked-Size`` (the hub's way of publishing them), computed when the server starts:
    changing ``files`` afterwards serves bytes that do not match what is published, and
    ``published`` can be changed to make the headers vouch for other bytes;
    ``publish_checksums = False`` leaves both headers out (as for a file the hub publishes no
    hash of). ``cdn_url`` sends
    the redirect to another server (``<cdn_url>/cdn/...``) instead of this one. ``trailing``
    maps a hub path to a count of extra zero bytes served after its body, without a
    Content-Length; ``sent`` counts the bytes each such response managed to write, and
    ``trailing_done`` is set when one ends.
    """

    def __init__(self, files: dict[str, bytes]) -> None:
        import hashlib
        import threading
        from http.server import BaseHTTPRequestHandler

        self.files = dict(files)
        self.published = {p: hashlib.sha256(b).hexdigest() for p, b in files.items()}
        self.sizes = {p: len(b) for p, b in files.items()}
        self.requests: list[str] = []
        self.cdn_url: str | None = None
        self.trailing: dict[str, int] = {}
        self.sent: dict[str, int] = {}
        self.trailing_done = threading.Event()  # set when a ``trailing`` response ends
        self.publish_checksums = True  # False: redirects without X-Linked-Etag/X-Linked-Size
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def _serve_trailing(self, path: str, body: bytes, extra: int) -> None:
                self.send_response(200)
                self.send_header("Connection", "close")
                self.end_headers()
                written = 0
                try:
                    self.wfile.write(body)
                    written = len(body)
                    chunk = bytes(1 << 16)
                    while written < len(body) + extra:
                        self.wfile.write(chunk)
                        written += len(chunk)
                except OSError:
                    pass  # the client hung up: what the oversize test wants
                finally:
                    hub.sent[path] = written
                    hub.trailing_done.set()
                self.close_connection = True

            def do_GET(self) -> None:
                hub.requests.append(self.path)
                if self.path.startswith("/cdn/"):
                    path = self.path.removeprefix("/cdn")
                    if path not in hub.files:
                        self.send_error(404)
                        return
                    body = hub.files[path]
                    if path in hub.trailing:
                        self._serve_trailing(path, body, hub.trailing[path])
                        return
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                if self.path not in hub.files:
                    self.send_error(404)
                    return
                self.send_response(302)
                self.send_header("Location", f"{hub.cdn_url or ''}/cdn{self.path}")
                if hub.publish_checksums:
                    self.send_header("X-Linked-Etag", f'"{hub.published[self.path]}"')
                    self.send_header("X-Linked-Size", str(hub.sizes[self.path]))
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        super().__init__(Handler)


def hub_files_for(entry: Any, directory: Path) -> dict[str, bytes]:
    """The hub paths of catalog ``entry``'s files (at its revision), with ``directory``'s bytes."""
    return {
        f"/{entry.repo}/resolve/{entry.revision}/{pin.path}": (directory / local).read_bytes()
        for local, pin in entry.files.items()
    }


# A made-up commit for test catalog entries: 40 hex digits, like the pins of the real catalog.
TEST_REVISION = "0123456789abcdef0123456789abcdef01234567"


def catalog_entry_for(
    directory: Path,
    *,
    name: str,
    repo: str = "tests/tiny-clip",
    revision: str = TEST_REVISION,
) -> dict[str, Any]:
    """A catalog-file entry (``load_catalog_file``) pinning ``directory``'s model files.

    The files are laid out like immich's repositories (``visual/model.onnx``, ...); the
    SHA-256s and sizes are the files' own, the preprocessing and dimensions the directory's.
    """
    import hashlib

    layout = {
        "visual.onnx": "visual/model.onnx",
        "textual.onnx": "textual/model.onnx",
        "tokenizer.json": "textual/tokenizer.json",
    }
    manifest = json.loads((directory / "model.json").read_text(encoding="utf-8"))
    files: dict[str, Any] = {}
    for local, remote in layout.items():
        data = (directory / local).read_bytes()
        files[local] = {
            "path": remote,
            "sha256": hashlib.sha256(data).hexdigest(),
            "size": len(data),
        }
    return {
        "name": name,
        "dimensions": manifest["dimensions"],
        "contextLength": manifest["context_length"],
        "repo": repo,
        "revision": revision,
        "files": files,
        "preprocessing": json.loads(
            (directory / "preprocessor_config.json").read_text(encoding="utf-8")
        ),
        "licence": "test weights (random)",
        "commercialUse": "yes",
    }


def write_catalog_file(path: Path, entries: Sequence[dict[str, Any]]) -> Path:
    """Write ``entries`` as a catalog file (``memory-server models --catalog FILE``)."""
    path.write_text(json.dumps({"models": list(entries)}, indent=2), encoding="utf-8")
    return path


@contextmanager
def serving_pinned_model(
    catalog_file: Path, name: str, directory: Path
) -> Generator[ModelHubServer]:
    """A hub on 127.0.0.1 serving ``directory``'s model as ``catalog_file`` pins ``name``.

    Started for the block and stopped after it.
    """
    entry = catalog_model(name, CATALOG + load_catalog_file(catalog_file))
    if entry is None:
        raise ValueError(f"{name} is not in {catalog_file} nor in the catalog")
    server = ModelHubServer(hub_files_for(entry, directory)).start()
    try:
        yield server
    finally:
        server.stop()


def write_pinning_catalog(directory: Path, name: str, model: Path) -> Path:
    """``directory/catalog.json``: a catalog file pinning ``model``'s files as ``name``."""
    return write_catalog_file(directory / "catalog.json", [catalog_entry_for(model, name=name)])


__all__ = [
    "TEST_REVISION",
    "TINY_CONTEXT",
    "TINY_DIMENSIONS",
    "TINY_MEAN",
    "TINY_RESIZE",
    "TINY_SIDE",
    "TINY_STD",
    "ModelHubServer",
    "catalog_entry_for",
    "hub_files_for",
    "serving_pinned_model",
    "write_catalog_file",
    "write_pinning_catalog",
    "write_tiny_model",
    "write_tokenizer",
    "write_vit_b32_model",
    "write_vit_textual",
    "write_vit_visual",
]
