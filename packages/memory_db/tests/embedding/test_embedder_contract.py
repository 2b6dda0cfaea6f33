"""One contract for every embedder: Jina (protocol server), local, clip (tiny model), fake."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pyvips

from memory_db.embedding import (
    ClipEmbedder,
    Embedder,
    FusedInput,
    ImageInput,
    JinaEmbedder,
    LocalEmbedder,
    ScriptedEmbedder,
    TextInput,
)
from memory_db.errors import ProviderContractError
from memory_db.testing.jina_server import JinaTestServer


def _png(red: int) -> bytes:
    image = pyvips.Image.black(48, 32, bands=3).new_from_image([red, 255 - red, 90])
    return image.write_to_buffer(".png")


@pytest.fixture(scope="module")
def protocol_server() -> Iterator[JinaTestServer]:
    server = JinaTestServer({"contract-key"}).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["jina", "local", "clip", "fake"])
async def embedder(
    request: pytest.FixtureRequest, protocol_server: JinaTestServer, clip_model_dir: Path
) -> AsyncIterator[Embedder]:
    made: Embedder
    if request.param == "jina":
        made = JinaEmbedder(api_keys=["contract-key"], base_url=protocol_server.base_url)
    elif request.param == "local":
        made = LocalEmbedder()
    elif request.param == "clip":
        made = ClipEmbedder(clip_model_dir)
    else:
        made = ScriptedEmbedder()
    assert isinstance(made, Embedder)
    try:
        yield made
    finally:
        await made.close()


def _values() -> list[Any]:
    image = ImageInput(data=_png(200))
    return [
        TextInput("a lighthouse at dusk"),
        image,
        FusedInput((image, TextInput("a lighthouse at dusk"))),
        TextInput("ein Leuchtturm"),
        ImageInput(data=_png(20)),
    ]


async def test_one_unit_vector_per_value_in_order(embedder: Embedder) -> None:
    values = _values()
    result = await embedder.embed(values, "retrieval.passage")
    assert len(result.embeddings) == len(values)
    assert result.model == embedder.model and result.dimensions == embedder.dimensions
    for vector in result.embeddings:
        assert len(vector) == embedder.dimensions
        assert all(math.isfinite(x) for x in vector)
        assert math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0, abs_tol=1e-3)
    assert result.usage.total_tokens >= 0 and result.usage.image_tokens >= 0


async def test_deterministic_and_batch_independent(embedder: Embedder) -> None:
    values = _values()
    batch = (await embedder.embed(values, "retrieval.passage")).embeddings
    for index, value in enumerate(values):
        (single,) = (await embedder.embed([value], "retrieval.passage")).embeddings
        assert max(abs(a - b) for a, b in zip(single, batch[index], strict=True)) < 1e-6


async def test_distinct_inputs_get_distinct_vectors(embedder: Embedder) -> None:
    vectors = (await embedder.embed(_values(), "retrieval.passage")).embeddings
    assert vectors[0] != vectors[3] and vectors[1] != vectors[4] and vectors[1] != vectors[2]


async def test_empty_batch(embedder: Embedder) -> None:
    result = await embedder.embed([], "retrieval.query")
    assert result.embeddings == []


async def test_task_must_be_explicit(embedder: Embedder) -> None:
    with pytest.raises(ValueError, match="task"):
        await embedder.embed([TextInput("x")], "search")  # type: ignore[arg-type]


async def test_scripted_fake_validates_like_a_provider() -> None:
    fake = ScriptedEmbedder(
        dims=4, script=[[[1.0, 0.0, 0.0]], [[2.0, 0.0, 0.0, 0.0]], [[math.nan, 0, 0, 1]]]
    )
    for code in ("wrong_dimensions", "not_normalized", "non_finite"):
        with pytest.raises(ProviderContractError) as caught:
            await fake.embed([TextInput("x")], "retrieval.query")
        assert caught.value.code == code
    assert len(fake.calls) == 3


async def test_local_embedder_refuses_urls_and_undecodable_bytes() -> None:
    from memory_db.errors import ProviderRejected

    local = LocalEmbedder()
    with pytest.raises(ProviderRejected) as caught:
        await local.embed([ImageInput(url="https://example.com/a.png")], "retrieval.passage")
    assert caught.value.code == "unsupported_media"
    with pytest.raises(ProviderRejected) as caught:
        await local.embed([ImageInput(data=b"not an image at all")], "retrieval.passage")
    assert caught.value.code == "invalid_image"


def test_settings_select_the_embedder(tmp_path: Any) -> None:
    from memory_db import ConfigurationError, MemorySettings
    from memory_db.embedding import build_embedder

    local = build_embedder(MemorySettings(memory_data_dir=tmp_path))
    assert isinstance(local, LocalEmbedder) and local.model == "local-hash-v1"
    jina = build_embedder(
        MemorySettings(
            memory_data_dir=tmp_path,
            asset_embed_provider="jina",
            jina_api_keys="k1,k2",  # type: ignore[arg-type]
            asset_embed_fused_mode="native",
        )
    )
    assert isinstance(jina, JinaEmbedder) and jina.model == "jina-embeddings-v5-omni-small"
    with pytest.raises(ConfigurationError, match="ASSET_EMBED_DIM"):
        build_embedder(MemorySettings(memory_data_dir=tmp_path, asset_embed_dim=512))
