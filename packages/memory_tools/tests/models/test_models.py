"""``models fetch`` and ``models verify`` refusals, against a model hub on 127.0.0.1.

The happy path runs as real subprocesses in tests/e2e/test_clip_provider.py; these check what a
fetch or a verify refuses, and that a refused fetch changes nothing. The tiny model is pinned
by a catalog file (``load_catalog_file``), as an operator would add a model of their own: the
built-in catalog's pins are not touched.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from memory_db import MemorySettings
from memory_db.embedding.clip_catalog import (
    CATALOG,
    CatalogModel,
    catalog_model,
    load_catalog_file,
    pin_problems,
)
from memory_db.testing.clip_model import (
    TEST_REVISION,
    ModelHubServer,
    catalog_entry_for,
    hub_files_for,
    write_catalog_file,
    write_tiny_model,
)
from memory_tools.errors import ConflictFailure, FetchFailed, InvalidInputFailure, NotFoundFailure
from memory_tools.operations.model_downloads import (
    fetch_model,
    list_models,
    resolve_model_directory,
    verify_model,
)

MODEL = "tiny-clip-pinned"


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> tuple[CatalogModel, ...]:
    tiny = write_tiny_model(tmp_path_factory.mktemp("hub") / "tiny", dims=512, side=224, resize=224)
    path = tmp_path_factory.mktemp("catalog") / "catalog.json"
    return CATALOG + load_catalog_file(
        write_catalog_file(path, [catalog_entry_for(tiny, name=MODEL)])
    )


@pytest.fixture
def hub(catalog: tuple[CatalogModel, ...], tmp_path: Path) -> Iterator[ModelHubServer]:
    entry = catalog_model(MODEL, catalog)
    assert entry is not None
    tiny = write_tiny_model(tmp_path / "tiny", dims=512, side=224, resize=224)
    server = ModelHubServer(hub_files_for(entry, tiny)).start()
    try:
        yield server
    finally:
        server.stop()


def _visual(hub: ModelHubServer) -> str:
    return next(p for p in hub.files if p.endswith("visual/model.onnx"))


def _flip_last_byte(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 1])


async def test_fetch_refusals_change_nothing(
    tmp_path: Path, hub: ModelHubServer, catalog: tuple[CatalogModel, ...]
) -> None:
    settings = MemorySettings(memory_data_dir=tmp_path / "data")
    with pytest.raises(NotFoundFailure, match="no model 'nope' in the catalog"):
        await fetch_model(settings, "nope", hub_url=hub.url, catalog=catalog)
    progress: list[tuple[int, int, str]] = []
    report = await fetch_model(
        settings,
        MODEL,
        hub_url=hub.url,
        progress=lambda d, t, n: progress.append((d, t, n)),
        catalog=catalog,
    )
    assert report.verified.dimensions == 512 and {f.name for f in report.files} == {
        "visual.onnx",
        "textual.onnx",
        "tokenizer.json",
    }
    assert progress[-1][0] == progress[-1][1] > 0
    # Every request asked for the pinned commit, none for a branch.
    assert hub.requests and all(
        f"/resolve/{TEST_REVISION}/" in p for p in hub.requests if "resolve" in p
    )
    directory = settings.model_dir / MODEL
    before = {p.name: p.read_bytes() for p in directory.iterdir()}
    with pytest.raises(ConflictFailure, match="exists"):
        await fetch_model(settings, MODEL, hub_url=hub.url, catalog=catalog)
    # Bytes that do not hash to the pin: refused, the installed model untouched.
    victim = _visual(hub)
    good = hub.files[victim]
    hub.files[victim] = _flip_last_byte(good)
    with pytest.raises(FetchFailed, match=re.escape("visual.onnx: SHA-256 mismatch")):
        await fetch_model(settings, MODEL, hub_url=hub.url, force=True, catalog=catalog)
    hub.files[victim] = good
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == before
    assert [p.name for p in settings.model_dir.iterdir()] == [MODEL]  # no partial left
    # Right bytes with --force replace the installed copy (and leave nothing beside it).
    replaced = await fetch_model(settings, MODEL, hub_url=hub.url, force=True, catalog=catalog)
    assert replaced.directory == directory
    assert [p.name for p in settings.model_dir.iterdir()] == [MODEL]
    # A file that changed after the fetch fails verify (against model.json) before loading.
    with (directory / "textual.onnx").open("r+b") as damaged:
        damaged.seek(64)
        damaged.write(b"\x00\x01\x02")
    with pytest.raises(
        InvalidInputFailure, match=re.escape("textual.onnx does not match model.json")
    ):
        await verify_model(directory)
    unreachable = "http://127.0.0.1:9"
    with pytest.raises(FetchFailed, match=re.escape("cannot reach the model hub 127.0.0.1 ")):
        await fetch_model(settings, MODEL, hub_url=unreachable, force=True, catalog=catalog)


async def test_wrong_bytes_are_refused_even_when_the_hub_headers_vouch_for_them(
    tmp_path: Path, hub: ModelHubServer, catalog: tuple[CatalogModel, ...]
) -> None:
    settings = MemorySettings(memory_data_dir=tmp_path / "data")
    victim = _visual(hub)
    other = _flip_last_byte(hub.files[victim])
    hub.files[victim] = other
    # The hub's X-Linked-Etag and X-Linked-Size now describe exactly the bytes it serves.
    hub.published[victim] = hashlib.sha256(other).hexdigest()
    hub.sizes[victim] = len(other)
    with pytest.raises(FetchFailed, match=re.escape("visual.onnx: SHA-256 mismatch (pinned ")):
        await fetch_model(settings, MODEL, hub_url=hub.url, catalog=catalog)
    assert not settings.model_dir.exists()  # nothing left, not even the models directory


async def test_a_redirect_to_another_host_serving_other_bytes_is_refused(
    tmp_path: Path, hub: ModelHubServer, catalog: tuple[CatalogModel, ...]
) -> None:
    settings = MemorySettings(memory_data_dir=tmp_path / "data")
    # The other host serves the same paths, one of them with other bytes; the hub's redirect
    # sends the client there by another host name and publishes no hash (as the issue found).
    elsewhere = ModelHubServer(dict(hub.files))
    victim = _visual(hub)
    elsewhere.files[victim] = _flip_last_byte(hub.files[victim])
    elsewhere.start()
    try:
        hub.cdn_url = f"http://localhost:{elsewhere.port}"
        hub.publish_checksums = False
        with pytest.raises(
            FetchFailed, match=rf"visual\.onnx: SHA-256 mismatch .*localhost:{elsewhere.port}/cdn/"
        ):
            await fetch_model(settings, MODEL, hub_url=hub.url, catalog=catalog)
        assert any(p.startswith("/cdn/") for p in elsewhere.requests)
    finally:
        elsewhere.stop()
    assert not (settings.model_dir / MODEL).exists()


async def test_an_oversize_stream_is_cut_off_at_the_pinned_size(
    tmp_path: Path, hub: ModelHubServer, catalog: tuple[CatalogModel, ...]
) -> None:
    settings = MemorySettings(memory_data_dir=tmp_path / "data")
    victim = _visual(hub)
    extra = 256 << 20  # far more than socket buffers hold: the client must stop reading
    hub.trailing[victim] = extra
    with pytest.raises(
        FetchFailed, match=re.escape("visual.onnx: ") + ".*sent more than the pinned"
    ):
        await fetch_model(settings, MODEL, hub_url=hub.url, catalog=catalog)
    # The server's write loop ends when the client hangs up. 60 s is generous: it ends at once
    # on a closed socket; the bound only keeps a broken build from hanging the suite.
    assert await anyio.to_thread.run_sync(hub.trailing_done.wait, 60.0)
    assert hub.sent[victim] < len(hub.files[victim]) + extra // 4
    assert not (settings.model_dir / MODEL).exists()


async def test_an_unpinned_entry_is_refused_before_any_request(
    tmp_path: Path, hub: ModelHubServer, catalog: tuple[CatalogModel, ...]
) -> None:
    settings = MemorySettings(memory_data_dir=tmp_path / "data")
    unpinned = [m for m in CATALOG if pin_problems(m)]
    assert unpinned  # the built-in entries no stored hub page fully pins
    for model in unpinned:
        with pytest.raises(FetchFailed, match=re.escape(f"{model.name} is not pinned")) as refused:
            await fetch_model(settings, model.name, hub_url=hub.url, catalog=catalog)
        assert f"memory-server models verify {model.name}" in str(refused.value)
    assert hub.requests == []
    assert not settings.model_dir.exists()
    listed = {r.model.name: r for r in list_models(settings, catalog)}
    assert listed[MODEL].pin_problems == []
    assert all(listed[m.name].pin_problems for m in unpinned)


def test_a_catalog_file_cannot_replace_or_weaken_a_pin(tmp_path: Path) -> None:
    tiny = write_tiny_model(tmp_path / "tiny")
    entry = catalog_entry_for(tiny, name="clip-vit-b-32-openai")
    with pytest.raises(ValueError, match="built-in catalog entry"):
        load_catalog_file(write_catalog_file(tmp_path / "a.json", [entry]))
    branch = catalog_entry_for(tiny, name="mine", revision="main")
    with pytest.raises(ValueError, match=re.escape("no pinned commit")):
        load_catalog_file(write_catalog_file(tmp_path / "b.json", [branch]))
    no_hash = catalog_entry_for(tiny, name="mine")
    del no_hash["files"]["tokenizer.json"]["sha256"]
    with pytest.raises(ValueError, match=re.escape("tokenizer.json: 'sha256' must be")):
        load_catalog_file(write_catalog_file(tmp_path / "c.json", [no_hash]))
    escape = catalog_entry_for(tiny, name="../escape")
    with pytest.raises(ValueError, match="is not a model name"):
        load_catalog_file(write_catalog_file(tmp_path / "e.json", [escape]))
    (tmp_path / "d.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match="not a readable JSON catalog file"):
        load_catalog_file(tmp_path / "d.json")


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
