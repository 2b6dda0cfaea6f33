"""The clip provider's models: list the catalog, fetch one from its hub, verify a directory.

``memory-server models`` (docs/embeddings.md#clip) runs these. Nothing here runs unless the
operator asks: the embedder itself never downloads.

- :func:`list_models`: the catalog (dimension, size, licence, commercial use, published
  ImageNet zero-shot figure) and whether each is installed under ``ASSET_EMBED_MODEL_DIR``.
- :func:`fetch_model`: downloads a catalog model's files from its hub repository into
  ``ASSET_EMBED_MODEL_DIR/<name>``, hashing each with SHA-256 as it arrives. When the hub
  publishes a file's SHA-256 (Hugging Face does for large files, ``X-Linked-Etag``), a
  mismatch fails the fetch; the hashes are recorded in ``model.json`` for ``verify``. Files go
  to a temporary directory first, moved into place only when all arrived and the model runs.
- :func:`verify_model`: checks a directory's files against ``model.json``, loads the model
  and runs one image and one text through it.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import anyio
import httpx

from memory_db import ConfigurationError, MemorySettings, get_logger
from memory_db.embedding import ClipEmbedder, FusedInput, ImageInput, TextInput
from memory_db.embedding.clip import (
    MANIFEST_FILE,
    MODEL_FILES,
    PREPROCESSOR_FILE,
    check_model_name,
    model_path,
    read_manifest,
)
from memory_db.embedding.clip_catalog import CATALOG, HUB_URL, CatalogModel, catalog_model
from memory_db.errors import EmbeddingError
from memory_tools.errors import ConflictFailure, FetchFailed, InvalidInputFailure, NotFoundFailure

log = get_logger(__name__)

# The largest file a fetch accepts (the biggest listed encoder is well under 1 GiB).
MAX_FILE_BYTES = 4 << 30
_CHUNK = 1 << 20
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")

ProgressCallback = Callable[[int, int, str], None]


@dataclass(frozen=True, slots=True)
class ListedModel:
    """One catalog row and whether it is installed."""

    model: CatalogModel
    installed: bool


def list_models(settings: MemorySettings) -> list[ListedModel]:
    """The catalog, each with whether ``ASSET_EMBED_MODEL_DIR/<name>`` exists."""
    return [ListedModel(m, (settings.model_dir / m.name).is_dir()) for m in CATALOG]


# --- fetch ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FetchedFile:
    """A file a fetch wrote: its size, SHA-256 and whether the hub published that SHA-256."""

    name: str
    size: int
    sha256: str
    published: bool


@dataclass(frozen=True, slots=True)
class FetchReport:
    """What ``models fetch`` did."""

    name: str
    directory: Path
    files: list[FetchedFile]
    verified: VerifyReport


def _published_sha256(response: httpx.Response) -> str | None:
    # The hub answers a large file's resolve URL with a redirect whose X-Linked-Etag is the
    # file's SHA-256; the final response's ETag may be the same value. Either counts.
    for candidate in (*response.history, response):
        for header in ("x-linked-etag", "etag"):
            value = candidate.headers.get(header, "").strip().strip('"').removeprefix("W/")
            value = value.strip('"').lower()
            if _SHA256_RE.match(value):
                return value
    return None


async def _download(
    client: httpx.AsyncClient,
    url: str,
    target: Path,
    name: str,
    progress: ProgressCallback | None,
) -> FetchedFile:
    digest = hashlib.sha256()
    size = 0
    try:
        async with client.stream("GET", url) as response:
            if response.status_code != 200:
                raise FetchFailed(f"{name}: the hub answered HTTP {response.status_code} ({url})")
            declared = int(response.headers.get("content-length") or 0)
            if declared > MAX_FILE_BYTES:
                raise FetchFailed(f"{name}: {declared} bytes is more than a model file may be")
            expected = _published_sha256(response)
            # Progress every 2 % (or 8 MiB without a length): a log keeps ~50 lines a file.
            step = max(_CHUNK, declared // 50) if declared else 8 * _CHUNK
            reported = 0
            with target.open("wb") as out:
                async for chunk in response.aiter_bytes(_CHUNK):
                    size += len(chunk)
                    if size > MAX_FILE_BYTES:
                        raise FetchFailed(f"{name}: more bytes than a model file may be")
                    digest.update(chunk)
                    out.write(chunk)
                    if progress is not None and size - reported >= step:
                        reported = size
                        progress(size, declared or size, name)
            if progress is not None:
                progress(size, declared or size, name)
    except httpx.HTTPError as exc:
        raise FetchFailed(f"{name}: download failed ({type(exc).__name__}: {exc})") from None
    actual = digest.hexdigest()
    if expected is not None and actual != expected:
        raise FetchFailed(
            f"{name}: SHA-256 mismatch (the hub publishes {expected}, the download is {actual})"
        )
    return FetchedFile(name, size, actual, expected is not None)


async def fetch_model(
    settings: MemorySettings,
    name: str,
    *,
    hub_url: str = HUB_URL,
    force: bool = False,
    progress: ProgressCallback | None = None,
) -> FetchReport:
    """Download catalog model ``name`` into ``ASSET_EMBED_MODEL_DIR/<name>`` and verify it."""
    entry = catalog_model(name)
    if entry is None:
        known = ", ".join(m.name for m in CATALOG)
        raise NotFoundFailure(f"no model {name!r} in the catalog (one of {known})")
    destination = settings.model_dir / entry.name
    if destination.exists() and not force:
        raise ConflictFailure(
            f"{destination} exists: verify it (memory-server models verify {entry.name}) "
            "or fetch again with --force to replace it"
        )
    settings.model_dir.mkdir(parents=True, exist_ok=True)
    partial = settings.model_dir / f".{entry.name}.partial-{secrets.token_hex(4)}"
    partial.mkdir()
    try:
        files: list[FetchedFile] = []
        base = hub_url.rstrip("/")
        timeout = httpx.Timeout(60.0, connect=15.0)
        async with httpx.AsyncClient(follow_redirects=True, timeout=timeout) as client:
            for local, remote in entry.files.items():
                url = f"{base}/{entry.repo}/resolve/{entry.revision}/{remote}"
                files.append(await _download(client, url, partial / local, local, progress))
        (partial / PREPROCESSOR_FILE).write_text(
            json.dumps(entry.preprocessing, indent=2), encoding="utf-8"
        )
        manifest = {
            "name": entry.name,
            "dimensions": entry.dimensions,
            "context_length": entry.context_length,
            "source": {"hub": base, "repo": entry.repo, "revision": entry.revision},
            "files": {f.name: f.sha256 for f in files},
        }
        (partial / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
        verified = await verify_model(partial, expect_name=entry.name)
        if destination.exists():
            shutil.rmtree(destination)
        partial.rename(destination)
    finally:
        if partial.exists():
            shutil.rmtree(partial, ignore_errors=True)
    log.info("clip_model_fetched", model=entry.name, files=len(files))
    return FetchReport(entry.name, destination, files, verified)


# --- verify --------------------------------------------------------------------------------------


@dataclass(slots=True)
class VerifyReport:
    """What ``models verify`` checked and measured."""

    name: str
    dimensions: int
    context_length: int
    checked_files: dict[str, str] = field(default_factory=dict)  # file -> "sha256 ok" or size
    image_seconds: float = 0.0
    text_seconds: float = 0.0


def resolve_model_directory(settings: MemorySettings, target: str | None) -> Path:
    """The directory ``models verify`` checks: a path, a model name, or the configured model."""
    if target is None:
        if "asset_embed_model" not in settings.model_fields_set:
            raise InvalidInputFailure(
                "name a model directory or a model (or set ASSET_EMBED_MODEL)"
            )
        target = settings.asset_embed_model
    if "/" in target or target.startswith(".") or Path(target).is_absolute():
        return Path(target).expanduser().absolute()
    try:
        return model_path(settings.model_dir, check_model_name(target))
    except ConfigurationError as exc:
        raise InvalidInputFailure(str(exc)) from None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while chunk := source.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _probe_image() -> bytes:
    import pyvips

    # A small gradient: real pixels for the preprocessing and the encoder.
    image = pyvips.Image.xyz(96, 64)[0].cast("uchar")
    return image.bandjoin([image, image]).copy(interpretation="srgb").write_to_buffer(".png")


async def verify_model(directory: Path, *, expect_name: str | None = None) -> VerifyReport:
    """Check ``directory``'s files (against ``model.json``), load it, embed an image and a text.

    ``InvalidInputFailure`` naming the first problem.
    """
    if not await anyio.Path(directory).is_dir():
        raise InvalidInputFailure(f"no model directory at {directory}")
    checked: dict[str, str] = {}
    try:
        manifest = read_manifest(directory)
    except ConfigurationError as exc:
        raise InvalidInputFailure(str(exc)) from None
    files = manifest.get("files")
    recorded: dict[str, Any] = cast(dict[str, Any], files) if isinstance(files, dict) else {}
    for name in MODEL_FILES:
        path = directory / name
        if not path.is_file():
            raise InvalidInputFailure(f"{name} is missing from {directory}")
        expected = recorded.get(name)
        if isinstance(expected, str):
            actual = await anyio.to_thread.run_sync(_sha256, path)
            if actual != expected:
                raise InvalidInputFailure(
                    f"{name} does not match model.json (SHA-256 {actual}, recorded {expected}): "
                    "the file changed or is damaged; fetch the model again"
                )
            checked[name] = "sha256 ok"
        else:
            checked[name] = f"{path.stat().st_size} bytes (no recorded SHA-256)"
    try:
        embedder = await anyio.to_thread.run_sync(lambda: ClipEmbedder(directory))
    except ConfigurationError as exc:
        raise InvalidInputFailure(str(exc)) from None
    declared = manifest.get("dimensions")
    if isinstance(declared, int) and declared != embedder.dimensions:
        raise InvalidInputFailure(
            f"the model makes {embedder.dimensions}-d vectors but model.json says {declared}"
        )
    report = VerifyReport(
        name=expect_name or embedder.model,
        dimensions=embedder.dimensions,
        context_length=embedder.loaded.context_length,
        checked_files=checked,
    )
    image = ImageInput(data=_probe_image())
    try:
        started = time.perf_counter()
        await embedder.embed([image], "retrieval.passage")
        report.image_seconds = time.perf_counter() - started
        started = time.perf_counter()
        await embedder.embed([TextInput("a photo of a lighthouse at dusk")], "retrieval.query")
        report.text_seconds = time.perf_counter() - started
        await embedder.embed([FusedInput((image, TextInput("a gradient")))], "retrieval.passage")
    except EmbeddingError as exc:
        raise InvalidInputFailure(f"the model did not embed: {exc}") from None
    finally:
        await embedder.close()
    return report


def describe(model: CatalogModel) -> dict[str, Any]:
    """A catalog entry as JSON for ``models list --json``."""
    return {
        "name": model.name,
        "family": model.family,
        "dimensions": model.dimensions,
        "sizeMB": model.size_mb,
        "licence": model.licence,
        "commercialUse": model.commercial,
        "imagenetZeroShot": model.imagenet_zero_shot,
        "source": f"{model.repo}@{model.revision}",
        "note": model.note or None,
    }


__all__ = [
    "FetchReport",
    "FetchedFile",
    "ListedModel",
    "VerifyReport",
    "describe",
    "fetch_model",
    "list_models",
    "resolve_model_directory",
    "verify_model",
]
