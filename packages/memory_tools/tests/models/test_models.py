"""``models fetch`` and ``models verify`` refusals, against a model hub on 127.0.0.1.

The happy path runs as real subprocesses in tests/e2e/test_clip_provider.py; these check what a
fetch or a verify refuses, and that a refused fetch changes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from memory_db import MemorySettings
from memory_db.embedding.clip_catalog import catalog_model
from memory_db.testing.clip_model import ModelHubServer, hub_files_for, write_tiny_model
from memory_tools.errors import ConflictFailure, FetchFailed, InvalidInputFailure, NotFoundFailure
from memory_tools.models import fetch_model, resolve_model_directory, verify_model

MODEL = "clip-vit-b-32-laion2b"


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelHubServer]:
    entry = catalog_model(MODEL)
    assert entry is not None
    tiny = write_tiny_model(
        tmp_path_factory.mktemp("hub") / "tiny", dims=entry.dimensions, side=224, resize=224
    )
    server = ModelHubServer(hub_files_for(entry, tiny)).start()
    try:
        yield server
    finally:
        server.stop()


async def test_fetch_refusals_change_nothing(tmp_path: Path, hub: ModelHubServer) -> None:
    settings = MemorySettings(memory_data_dir=tmp_path / "data")
    with pytest.raises(NotFoundFailure, match="no model 'nope' in the catalog"):
        await fetch_model(settings, "nope", hub_url=hub.url)
    progress: list[tuple[int, int, str]] = []
    report = await fetch_model(
        settings, MODEL, hub_url=hub.url, progress=lambda d, t, n: progress.append((d, t, n))
    )
    assert report.verified.dimensions == 512 and {f.name for f in report.files} == {
        "visual.onnx",
        "textual.onnx",
        "tokenizer.json",
    }
    assert progress[-1][0] == progress[-1][1] > 0
    directory = settings.model_dir / MODEL
    before = {p.name: p.read_bytes() for p in directory.iterdir()}
    with pytest.raises(ConflictFailure, match="exists"):
        await fetch_model(settings, MODEL, hub_url=hub.url)
    # Bytes that do not hash to what the hub publishes: refused, the installed model untouched.
    victim = next(p for p in hub.files if p.endswith("visual/model.onnx"))
    good = hub.files[victim]
    hub.files[victim] = good[:-1] + bytes([good[-1] ^ 1])
    try:
        with pytest.raises(FetchFailed, match=re.escape("visual.onnx: SHA-256 mismatch")):
            await fetch_model(settings, MODEL, hub_url=hub.url, force=True)
    finally:
        hub.files[victim] = good
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == before
    assert [p.name for p in settings.model_dir.iterdir()] == [MODEL]  # no partial left
    # A file that changed after the fetch fails verify (against model.json) before loading.
    with (directory / "textual.onnx").open("r+b") as damaged:
        damaged.seek(64)
        damaged.write(b"\x00\x01\x02")
    with pytest.raises(
        InvalidInputFailure, match=re.escape("textual.onnx does not match model.json")
    ):
        await verify_model(directory)
    unreachable = "http://127.0.0.1:9"
    with pytest.raises(FetchFailed, match="download failed"):
        await fetch_model(settings, "siglip-b-16-224", hub_url=unreachable)
    assert not (settings.model_dir / "siglip-b-16-224").exists()


async def test_verify_refuses_a_model_that_disagrees_with_its_manifest(tmp_path: Path) -> None:
    settings = MemorySettings(memory_data_dir=tmp_path / "data")
    directory = write_tiny_model(settings.model_dir / "mine")
    (directory / "model.json").write_text('{"dimensions": 64}')
    assert resolve_model_directory(settings, "mine") == directory
    with pytest.raises(
        InvalidInputFailure, match=re.escape("makes 32-d vectors but model.json says 64")
    ):
        await verify_model(directory)
    with pytest.raises(InvalidInputFailure, match="not a model directory name"):
        resolve_model_directory(settings, "bad name!")
