"""The clip provider for real: `memory-server models` against a hub on 127.0.0.1, then a server.

A tiny, randomly initialised model shaped like ``clip-vit-b-32-openai`` (512-d vectors from a
224-px crop; written with the onnx helper API) is served by a model hub on 127.0.0.1 laid out
like Hugging Face's, and pinned (commit, SHA-256s, sizes) by a catalog file passed with
``--catalog``. ``models fetch`` downloads it, ``models verify`` runs it, and a stdio
server started with ``ASSET_EMBED_PROVIDER=clip`` saves images and finds them over MCP. No test
here reaches the internet.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client
from fastmcp.client.transports import StdioTransport

from memory_db.embedding.clip_catalog import catalog_model
from memory_db.testing.clip_model import (
    ModelHubServer,
    serving_pinned_model,
    write_pinning_catalog,
    write_tiny_model,
)
from memory_tools.testing.keys import new_key

from .test_processes import SERVER
from .test_processes import _cli as cli  # pyright: ignore[reportPrivateUsage]
from .test_processes import _env as environment  # pyright: ignore[reportPrivateUsage]
from .test_processes import _png as png  # pyright: ignore[reportPrivateUsage]

pytestmark = pytest.mark.slow

MODEL = "clip-vit-b-32-openai"
PINNED = "tiny-clip-pinned"  # the tiny model, as an operator's catalog file names it


def _shaped_like_the_catalog(directory: Path) -> Path:
    entry = catalog_model(MODEL)
    assert entry is not None
    return write_tiny_model(directory, dims=entry.dimensions, side=224, resize=224)


def _content(result: Any) -> dict[str, Any]:
    content: dict[str, Any] | None = result.structured_content
    assert content is not None
    return content


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _shaped_like_the_catalog(tmp_path_factory.mktemp("tiny") / "tiny")


@pytest.fixture(scope="module")
def catalog_file(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    return write_pinning_catalog(tmp_path_factory.mktemp("catalog"), PINNED, tiny_model)


@pytest.fixture(scope="module")
def hub(catalog_file: Path, tiny_model: Path) -> Iterator[ModelHubServer]:
    with serving_pinned_model(catalog_file, PINNED, tiny_model) as server:
        yield server


def test_models_list_fetch_verify(tmp_path: Path, hub: ModelHubServer, catalog_file: Path) -> None:
    env = environment(tmp_path)
    listed = cli(env, "models", "list", "--json", "--catalog", str(catalog_file))
    assert listed.returncode == 0, listed.stderr
    models = {m["name"]: m for m in json.loads(listed.stdout)["models"]}
    assert {"clip-vit-b-32-laion2b", "siglip-b-16-224", "mobileclip-s2", "jina-clip-v1"} <= set(
        models
    )
    assert models["mobileclip-s2"]["commercialUse"] == "no" and models[MODEL]["installed"] is False
    assert models[PINNED]["pinned"] is True and models[MODEL]["pinned"] is False
    table = cli(env, "models", "list")
    assert table.returncode == 0 and "not pinned: fetch refused" in table.stdout, table.stderr

    # A built-in entry without full pins is refused before anything is downloaded.
    refused = cli(env, "models", "fetch", MODEL, "--hub-url", hub.url)
    assert refused.returncode == 1 and f"{MODEL} is not pinned" in refused.stderr
    assert f"memory-server models verify {MODEL}" in refused.stderr
    assert hub.requests == []

    fetched = cli(
        env, "models", "fetch", PINNED, "--hub-url", hub.url, "--catalog", str(catalog_file)
    )
    assert fetched.returncode == 0, fetched.stderr
    fetched = cli(
        env,
        "models",
        "fetch",
        PINNED,
        "--hub-url",
        hub.url,
        "--catalog",
        str(catalog_file),
        "--force",
        "--json",
    )
    assert fetched.returncode == 0, fetched.stderr
    report = json.loads(fetched.stdout)
    assert report["verified"]["dimensions"] == 512
    assert all(f["matchesPin"] and "/cdn/" in f["source"] for f in report["files"])
    assert f"fetching {PINNED}: " in fetched.stderr  # progress on stderr (plain lines off a tty)
    directory = Path(env["MEMORY_DATA_DIR"]) / "models" / PINNED
    assert sorted(p.name for p in directory.iterdir()) == [
        "model.json",
        "preprocessor_config.json",
        "textual.onnx",
        "tokenizer.json",
        "visual.onnx",
    ]
    verified = cli(env, "models", "verify", PINNED)
    assert verified.returncode == 0 and "ok: " in verified.stdout, verified.stderr
    assert "sha256 ok" in verified.stdout


async def test_a_server_with_the_clip_provider_saves_and_searches(
    tmp_path: Path, database_url: str
) -> None:
    env = environment(tmp_path, MEMORY_DATABASE_URL=database_url)  # migrated: a clone
    _shaped_like_the_catalog(Path(env["MEMORY_DATA_DIR"]) / "models" / MODEL)
    key = new_key(env, "clip@example.com")
    transport = StdioTransport(
        SERVER[0],
        [*SERVER[1:], "serve", "--transport", "stdio"],
        env={
            **env,
            "ASSET_EMBED_PROVIDER": "clip",
            "ASSET_EMBED_MODEL": MODEL,
            "MEMORY_API_KEY": key,
        },
        keep_alive=False,
    )
    async with Client(transport) as client:
        ids = []
        for seed, title in ((3, "harbour at night"), (9, "mountain meadow")):
            saved = await client.call_tool(
                "image_asset_save",
                {"imageBase64": base64.b64encode(png(seed)).decode(), "title": title},
            )
            ids.append(_content(saved)["assetId"])
        for asset in ids:
            got = await client.call_tool("image_asset_get", {"assetId": asset, "waitSeconds": 30})
            assert _content(got)["embeddingStatus"] == "ready"
        by_image = await client.call_tool(
            "image_asset_search", {"imageBase64": base64.b64encode(png(9)).decode()}
        )
        assert _content(by_image)["mode"] == "image"
        assert _content(by_image)["results"][0]["assetId"] == ids[1]
        by_words = await client.call_tool("image_asset_search", {"query": "mountain photo"})
        assert _content(by_words)["mode"] == "text"
        assert _content(by_words)["results"][0]["assetId"] == ids[1]
