"""The clip embedder on a tiny, randomly initialised model written in a temporary directory.

The model directory is laid out like a real one and loaded through the same code; these check
what does not depend on the weights: dimensions and normalisation, batching, preprocessing
on known pixels, tokenisation against the tokenizer file, and clear start-up errors.
"""

from __future__ import annotations

import json
import math
import shutil
import socket
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import pyvips
from tokenizers import Tokenizer

from memory_db import ConfigurationError, MemorySettings
from memory_db.embedding import ClipEmbedder, FusedInput, ImageInput, TextInput, build_embedder
from memory_db.embedding.clip import MODEL_FILES, parse_preprocessing, preprocess_image
from memory_db.errors import ProviderRejected
from memory_db.testing.clip_model import (
    TINY_CONTEXT,
    TINY_DIMENSIONS,
    TINY_MEAN,
    TINY_SIDE,
    TINY_STD,
)


@pytest.fixture(scope="module")
def clip(clip_model_dir: Path) -> ClipEmbedder:
    return ClipEmbedder(clip_model_dir)


def _png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    return (
        pyvips.Image.black(width, height, bands=3).new_from_image(list(rgb)).write_to_buffer(".png")
    )


def _norm(vector: list[float]) -> float:
    return math.sqrt(sum(x * x for x in vector))


async def test_dimensions_normalisation_and_identity(clip: ClipEmbedder) -> None:
    assert clip.model == "tiny-clip" and clip.dimensions == TINY_DIMENSIONS
    values: list[Any] = [
        TextInput("a cat on a sofa"),
        ImageInput(data=_png(40, 30, (200, 10, 10))),
        FusedInput((ImageInput(data=_png(40, 30, (200, 10, 10))), TextInput("a red cat"))),
    ]
    result = await clip.embed(values, "retrieval.query")
    assert result.model == "tiny-clip" and result.dimensions == TINY_DIMENSIONS
    for vector in result.embeddings:
        assert len(vector) == TINY_DIMENSIONS and math.isclose(_norm(vector), 1.0, abs_tol=1e-6)
    # The fused vector is the renormalised 0.5/0.5 combination of the image's and the text's.
    (image,) = (await clip.embed([values[1]], "retrieval.passage")).embeddings
    (text,) = (await clip.embed([TextInput("a red cat")], "retrieval.passage")).embeddings
    mixed = np.add(image, text)
    expected = mixed / np.linalg.norm(mixed)
    assert np.allclose(result.embeddings[2], expected, atol=1e-6)
    assert result.usage.image_tokens == 2 and result.usage.prompt_tokens > 0


async def test_batching_gives_the_same_vectors_as_one_at_a_time(clip: ClipEmbedder) -> None:
    # More images than one encoder chunk (16), of different sizes, and texts of other lengths.
    values: list[Any] = [
        ImageInput(data=_png(24 + 3 * i, 20 + 5 * (i % 4), (10 * i, 255 - 10 * i, 90)))
        for i in range(18)
    ]
    values += [TextInput("the dog"), TextInput("a photo of a green lighthouse at dusk")]
    batch = (await clip.embed(values, "retrieval.passage")).embeddings
    for index, value in enumerate(values):
        (single,) = (await clip.embed([value], "retrieval.passage")).embeddings
        assert np.max(np.abs(np.subtract(single, batch[index]))) < 1e-6
    assert len({tuple(np.round(v, 5)) for v in batch}) == len(values)


def test_preprocessing_matches_the_configuration_on_known_pixels(clip_model_dir: Path) -> None:
    steps = parse_preprocessing(
        json.loads((clip_model_dir / "preprocessor_config.json").read_text())
    )
    assert steps.shortest_edge == 20 and steps.crop == (TINY_SIDE, TINY_SIDE)
    assert steps.mean == TINY_MEAN and steps.std == TINY_STD
    # 160x40: green left, red from x=50 to 110, blue right. The shorter side becomes 20 (80x20),
    # the centre crop 16x16 takes x 32..47 of it (x 64..95 of the original): only red.
    image = pyvips.Image.black(160, 40, bands=3).new_from_image([0, 255, 0])
    red = pyvips.Image.black(60, 40, bands=3).new_from_image([255, 0, 0])
    blue = pyvips.Image.black(50, 40, bands=3).new_from_image([0, 0, 255])
    image = image.insert(red, 50, 0).insert(blue, 110, 0).cast("uchar")
    tensor = preprocess_image(image.write_to_buffer(".png"), steps)
    assert tensor.shape == (3, TINY_SIDE, TINY_SIDE) and tensor.dtype == np.float32
    expected = [
        (1.0 - TINY_MEAN[0]) / TINY_STD[0],
        -TINY_MEAN[1] / TINY_STD[1],
        -TINY_MEAN[2] / TINY_STD[2],
    ]
    for channel, value in enumerate(expected):
        assert np.allclose(tensor[channel], value, atol=1e-5), channel
    # A crop from the left edge would have been green, from the right blue: check a tall image
    # is cropped vertically about its centre too (rows 16..31 of 16x48 after the resize).
    tall = pyvips.Image.black(40, 120, bands=3).new_from_image([0, 0, 255])
    tall = tall.insert(pyvips.Image.black(40, 40, bands=3).new_from_image([255, 255, 255]), 0, 40)
    column = preprocess_image(tall.cast("uchar").write_to_buffer(".png"), steps)
    assert np.allclose(
        column[:, 4:12, :],
        np.array([(1 - m) / s for m, s in zip(TINY_MEAN, TINY_STD, strict=True)])[:, None, None],
        atol=1e-5,
    )


def test_preprocessing_squash_and_alpha() -> None:
    steps = parse_preprocessing(
        {
            "size": {"height": 8, "width": 6},
            "do_center_crop": False,
            "image_mean": 0.5,
            "image_std": 0.5,
        }
    )
    rgba = pyvips.Image.black(30, 50, bands=4).new_from_image([0, 0, 0, 0]).cast("uchar")
    tensor = preprocess_image(rgba.write_to_buffer(".png"), steps)
    # Transparent pixels are flattened on white: (1 - 0.5) / 0.5 = 1 everywhere.
    assert tensor.shape == (3, 8, 6) and np.allclose(tensor, 1.0, atol=1e-5)
    with pytest.raises(ValueError, match="shortest_edge"):
        parse_preprocessing({"size": {"shortest_edge": 5000}})


def test_tokenisation_matches_the_tokenizer_file(clip: ClipEmbedder, clip_model_dir: Path) -> None:
    reference = Tokenizer.from_file(str(clip_model_dir / "tokenizer.json"))
    vocab = reference.get_vocab()
    start, end = vocab["<|startoftext|>"], vocab["<|endoftext|>"]
    text = "A Cat on a SOFA"
    ids, mask = clip.loaded.tokenize([text, "the dog"])
    expected = reference.encode(text).ids
    assert expected == [
        start,
        vocab["a"],
        vocab["cat"],
        vocab["on"],
        vocab["a"],
        vocab["sofa"],
        end,
    ]
    assert ids.shape == (2, TINY_CONTEXT) and ids.dtype == np.int64
    assert ids[0].tolist() == expected + [end] * (TINY_CONTEXT - len(expected))
    assert mask[0].tolist() == [1] * len(expected) + [0] * (TINY_CONTEXT - len(expected))
    # Longer than the context: truncated, still closed by the end token.
    (long_ids,), _ = clip.loaded.tokenize(["the cat " * 20])
    assert len(long_ids) == TINY_CONTEXT and long_ids[0] == start and long_ids[-1] == end
    assert vocab["<unk>"] in clip.loaded.tokenize(["zebra"])[0][0]


@pytest.mark.parametrize("name", MODEL_FILES)
def test_a_missing_or_corrupt_file_is_a_start_up_error_naming_it(
    clip_model_dir: Path, tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    connections: list[Any] = []

    def refuse(_self: socket.socket, address: Any) -> None:
        connections.append(address)
        raise OSError("no network in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    broken = shutil.copytree(clip_model_dir, tmp_path / "broken")
    (broken / name).unlink()
    with pytest.raises(ConfigurationError, match=f"{name} is missing"):
        ClipEmbedder(broken)
    (broken / name).write_bytes(b"\x08\x01garbage{" * 7)
    with pytest.raises(ConfigurationError, match=name.replace(".", r"\.")):
        ClipEmbedder(broken)
    assert connections == []  # nothing tried to download the file


def test_a_preprocessing_the_image_encoder_cannot_take_is_a_start_up_error(
    clip_model_dir: Path, tmp_path: Path
) -> None:
    wrong = shutil.copytree(clip_model_dir, tmp_path / "wrong")
    config = json.loads((wrong / "preprocessor_config.json").read_text())
    config["crop_size"] = {"height": 24, "width": 24}
    (wrong / "preprocessor_config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigurationError, match=r"visual\.onnx takes input .* but preprocessor"):
        ClipEmbedder(wrong)


def test_a_missing_model_directory_names_the_setting(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"no model directory .*ASSET_EMBED_MODEL_DIR"):
        ClipEmbedder(tmp_path / "absent")


async def test_urls_and_undecodable_bytes_are_refused(clip: ClipEmbedder) -> None:
    with pytest.raises(ProviderRejected) as caught:
        await clip.embed([ImageInput(url="https://example.com/a.png")], "retrieval.passage")
    assert caught.value.code == "unsupported_media"
    with pytest.raises(ProviderRejected) as caught:
        await clip.embed([ImageInput(data=b"not an image")], "retrieval.passage")
    assert caught.value.code == "invalid_image"


def test_settings_select_the_clip_embedder(clip_model_dir: Path, tmp_path: Path) -> None:
    base: dict[str, Any] = {
        "memory_data_dir": tmp_path,
        "asset_embed_provider": "clip",
        "asset_embed_model_dir": clip_model_dir.parent,
    }
    made = build_embedder(MemorySettings(**base, asset_embed_model="tiny-clip"))
    assert isinstance(made, ClipEmbedder) and made.dimensions == TINY_DIMENSIONS
    with pytest.raises(ConfigurationError, match="needs ASSET_EMBED_MODEL"):
        build_embedder(MemorySettings(**base))
    with pytest.raises(
        ConfigurationError, match="ASSET_EMBED_DIM: clip model tiny-clip makes 32-d"
    ):
        build_embedder(MemorySettings(**base, asset_embed_model="tiny-clip", asset_embed_dim=512))
    with pytest.raises(ConfigurationError, match="not a model directory name"):
        build_embedder(MemorySettings(**base, asset_embed_model="../tiny-clip"))
    # The default directory is the data directory's models/.
    assert MemorySettings(memory_data_dir=tmp_path).model_dir == tmp_path / "models"
