"""`memory-server models install`: search by meaning in one command, run as a user would.

A tiny model, pinned by a catalog file (``--catalog``) and served by a model hub on 127.0.0.1
laid out like Hugging Face's, stands in for the recommended model (no weights can be
downloaded here). The whole path: a stdio server saves images with the default words-only
embedder (a weak search says why, naming `make model`); ``models install`` downloads and
verifies the files, re-embeds every image and moves the alias, showing both steps' progress
and ending with one line; a new server then searches with the new model without being told;
a second install does nothing. Offline (the hub's port closed; tried first, on the same
images), the command fails in one line and changes nothing: no model directory, no index, the
alias where it was.
"""

from __future__ import annotations

import base64
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client
from fastmcp.client.transports import StdioTransport
from sqlalchemy import text

from memory_db import Database
from memory_db.database import create_engine
from memory_db.embedding.clip_catalog import (
    RECOMMENDED_MODEL,
    catalog_model,
)
from memory_db.testing.clip_model import (
    ModelHubServer,
    serving_pinned_model,
    write_pinning_catalog,
    write_tiny_model,
)
from memory_db.unit_of_work import session_of
from memory_tools.operations.model_install import index_name
from memory_tools.testing.keys import new_key
from memory_tools.workflows.meaning import SEARCH_REASON

from .test_processes import SERVER
from .test_processes import _cli as cli  # pyright: ignore[reportPrivateUsage]
from .test_processes import _env as environment  # pyright: ignore[reportPrivateUsage]
from .test_processes import _png as png  # pyright: ignore[reportPrivateUsage]

pytestmark = pytest.mark.slow

MODEL = "tiny-clip-install"


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny")


@pytest.fixture(scope="module")
def catalog_file(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    return write_pinning_catalog(tmp_path_factory.mktemp("catalog"), MODEL, tiny_model)


@pytest.fixture(scope="module")
def hub(catalog_file: Path, tiny_model: Path) -> Iterator[ModelHubServer]:
    with serving_pinned_model(catalog_file, MODEL, tiny_model) as server:
        yield server


def _closed_port() -> int:
    # A port nothing listens on: bound, then released (connections to it are refused).
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _content(result: Any) -> dict[str, Any]:
    content: dict[str, Any] | None = result.structured_content
    assert content is not None
    return content


def _server(env: dict[str, str], key: str) -> Client[StdioTransport]:
    transport = StdioTransport(
        SERVER[0],
        [*SERVER[1:], "serve", "--transport", "stdio"],
        env={**env, "MEMORY_API_KEY": key},
        keep_alive=False,
    )
    return Client(transport)


async def _indexes(url: str) -> tuple[str, list[str]]:
    """The index the default alias points at, and every registered index."""
    database = Database(create_engine(url, pool_size=1))
    try:
        async with database.unit_of_work() as uow:
            session = session_of(uow)
            active = await session.scalar(text("SELECT index_name FROM mem_vector_index_aliases"))
            names = (await session.scalars(text("SELECT name FROM mem_vector_indexes"))).all()
    finally:
        await database.close()
    return str(active), sorted(names)


async def _save(client: Client[StdioTransport], seed: int, title: str) -> str:
    saved = await client.call_tool(
        "image_asset_save", {"imageBase64": base64.b64encode(png(seed)).decode(), "title": title}
    )
    asset: str = _content(saved)["assetId"]
    got = await client.call_tool("image_asset_get", {"assetId": asset, "waitSeconds": 30})
    assert _content(got)["embeddingStatus"] == "ready"
    return asset


async def test_install_offline_changes_nothing_then_fetches_verifies_switches_and_does_nothing(
    tmp_path: Path, hub: ModelHubServer, catalog_file: Path, database_url: str
) -> None:
    env = environment(tmp_path, MEMORY_DATABASE_URL=database_url)  # migrated: a clone
    key = new_key(env, "meaning@example.com")
    async with _server(env, key) as client:
        ids = [await _save(client, 3, "harbour at night"), await _save(client, 9, "red sofa")]
        # Words only: a search for something no title says is weak, and says why.
        weak = _content(await client.call_tool("image_asset_search", {"query": "lunar crater"}))
        assert weak["noGoodMatch"] is True
        assert weak["noGoodMatchReason"] == SEARCH_REASON and "make model" in SEARCH_REASON
    before, indexes = await _indexes(database_url)

    # Offline (nothing listens on the hub's address): one line, and nothing changes.
    offline = f"http://127.0.0.1:{_closed_port()}"
    failed = cli(
        env, "models", "install", MODEL, "--hub-url", offline, "--catalog", str(catalog_file)
    )
    assert failed.returncode == 1
    errors = [line for line in failed.stderr.splitlines() if line.strip()]
    assert len(errors) == 1, failed.stderr
    assert "cannot reach the model hub 127.0.0.1" in errors[0]
    assert "nothing was installed" in errors[0]
    assert failed.stdout == ""
    # No model directory, not even the empty models directory the fetch had to make.
    assert not (Path(env["MEMORY_DATA_DIR"]) / "models").exists()
    assert await _indexes(database_url) == (before, indexes)  # no new index, the alias kept

    install = ("models", "install", MODEL, "--hub-url", hub.url, "--catalog", str(catalog_file))
    done = cli(env, *install)
    assert done.returncode == 0, done.stderr
    # Progress the whole way (plain lines off a terminal): the bytes, then the re-embedding.
    assert f"downloading {MODEL}: " in done.stderr
    target = index_name(MODEL)
    assert f"re-embedding every image into {target}: 2/2" in done.stderr
    assert (
        done.stdout.strip()
        .splitlines()[-1]
        .startswith(
            f"search now understands meaning: {MODEL} is active (index {target}, 2 images embedded)"
        )
    )
    assert len(done.stdout.strip().splitlines()) == 1
    directory = Path(env["MEMORY_DATA_DIR"]) / "models" / MODEL
    assert (directory / "model.json").is_file()
    active, names = await _indexes(database_url)
    assert active == target and before in names  # the previous index is kept

    # A new server embeds with the model the alias points at, though nothing configures it.
    async with _server(env, key) as client:
        found = _content(await client.call_tool("image_asset_search", {"query": "red sofa"}))
        assert found["results"][0]["assetId"] == ids[1]
        assert {r["embeddingModel"] for r in found["results"]} == {MODEL}
        assert found["noGoodMatchReason"] is None

    # Installed and active: says so, downloads nothing, changes nothing.
    requests = len(hub.requests)
    again = cli(env, *install, "--json")
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["alreadyActive"] is True and report["fetched"] is False
    assert report["switched"] is False and report["index"] == target
    assert len(hub.requests) == requests and "re-embedding" not in again.stderr
    assert await _indexes(database_url) == (active, names)


def test_install_refuses_an_unpinned_entry_and_defaults_to_the_recommended_one(
    tmp_path: Path, hub: ModelHubServer
) -> None:
    env = environment(tmp_path)
    models = Path(env["MEMORY_DATA_DIR"]) / "models"
    requests = len(hub.requests)
    # A built-in entry without full pins is refused before any request, saying what to do.
    refused = cli(env, "models", "install", "clip-vit-b-16-openai", "--hub-url", hub.url)
    assert refused.returncode == 1
    assert "clip-vit-b-16-openai is not pinned" in refused.stderr
    assert "install it by hand" in refused.stderr.lower()
    assert len(hub.requests) == requests
    # No name: the recommended entry, fetched at its pinned commit (this hub lacks it: 404).
    default = cli(env, "models", "install", "--hub-url", hub.url)
    assert default.returncode == 1 and "HTTP 404" in default.stderr
    entry = catalog_model(RECOMMENDED_MODEL)
    assert entry is not None
    first = next(iter(entry.files.values())).path
    assert f"/{entry.repo}/resolve/{entry.revision}/{first}" in hub.requests[requests:]
    assert not models.exists()
