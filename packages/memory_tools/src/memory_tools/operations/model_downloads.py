"""The clip provider's models: list the catalog, fetch one from its hub, verify a directory.

``memory-server models`` (docs/embeddings.md#clip) runs these. Nothing here runs unless the
operator asks: the embedder itself never downloads.

- :func:`list_models`: the catalog (dimension, size, licence, commercial use, published
  ImageNet zero-shot figure) and whether each is installed under ``ASSET_EMBED_MODEL_DIR``.
- :func:`fetch_model`: downloads a pinned catalog model's files from its hub repository at the
  pinned commit into ``ASSET_EMBED_MODEL_DIR/<name>``. Each file must hash to its pinned
  SHA-256 and have its pinned size, wherever it was served from (a redirect to another host
  included): nothing the server says (``X-Linked-Etag``, ``X-Linked-Size``, ``ETag``) is
  trusted, and reading stops once more bytes than the pin allows arrive. An entry that is not
  fully pinned is refused (the operator installs it by hand and runs ``verify``). Files go to a
  temporary directory first, moved into place only when all arrived and the model runs; an
  installed copy is replaced only then.
- :func:`verify_model`: checks a directory's files against ``model.json``, loads the model
  and runs one image and one text through it.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import shutil
import time
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
from memory_db.embedding.clip_catalog import (
    CATALOG,
    HUB_URL,
    CatalogModel,
    HubFile,
    catalog_model,
    pin_problems,
)
from memory_db.errors import EmbeddingError
from memory_tools.errors import ConflictFailure, FetchFailed, InvalidInputFailure, NotFoundFailure
from memory_tools.progress import ProgressCallback

log = get_logger(__name__)

_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class ListedModel:
    """One catalog row, whether it is installed, and what keeps it from being fetched."""

    model: CatalogModel
    installed: bool
    pin_problems: list[str]


def list_models(
    settings: MemorySettings, catalog: tuple[CatalogModel, ...] = CATALOG
) -> list[ListedModel]:
    """The catalog, each with whether ``ASSET_EMBED_MODEL_DIR/<name>`` exists and is pinned."""
    return [
        ListedModel(m, (settings.model_dir / m.name).is_dir(), pin_problems(m)) for m in catalog
    ]


# --- fetch ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FetchedFile:
    """A file a fetch wrote: its size and SHA-256 (both equal to the catalog's pins)."""

    name: str
    size: int
    sha256: str
    source: str  # the URL the bytes finally came from (after any redirects)


@dataclass(frozen=True, slots=True)
class FetchReport:
    """What ``models fetch`` did."""

    name: str
    directory: Path
    files: list[FetchedFile]
    verified: VerifyReport


def _declared_length(response: httpx.Response) -> int | None:
    raw = response.headers.get("content-length", "").strip()
    return int(raw) if raw.isdigit() else None


async def _download(
    client: httpx.AsyncClient,
    url: str,
    target: Path,
    name: str,
    pin: HubFile,
    progress: ProgressCallback | None,
) -> FetchedFile:
    # The pins are the only authority: headers such as X-Linked-Etag/X-Linked-Size or ETag
    # come from the same servers whose bytes are being checked, so they are never read.
    limit = pin.byte_limit
    if pin.sha256 is None or limit is None:  # pin_problems() refused this entry already
        raise FetchFailed(f"{name}: not pinned")
    digest = hashlib.sha256()
    size = 0
    source = url
    try:
        async with client.stream("GET", url) as response:
            source = str(response.url)
            if response.status_code != 200:
                raise FetchFailed(f"{name}: HTTP {response.status_code} from {source}")
            declared = _declared_length(response)
            if declared is not None and declared > limit:
                raise FetchFailed(
                    f"{name}: {source} announces {declared} bytes, more than the pinned "
                    f"{limit}; refused"
                )
            # Progress every 2 % of the pinned size: a log keeps ~50 lines a file.
            step = max(_CHUNK, limit // 50)
            reported = 0
            with target.open("wb") as out:
                async for chunk in response.aiter_raw(_CHUNK):
                    size += len(chunk)
                    if size > limit:
                        # Stop reading: closing the stream drops the connection.
                        raise FetchFailed(
                            f"{name}: {source} sent more than the pinned {limit} bytes; refused"
                        )
                    digest.update(chunk)
                    out.write(chunk)
                    if progress is not None and size - reported >= step:
                        reported = size
                        progress(size, limit, name)
            if progress is not None:
                progress(size, limit, name)
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        # The usual case on a machine without the network: say so, and what it means.
        host = httpx.URL(source).host
        raise FetchFailed(
            f"cannot reach the model hub {host} ({type(exc).__name__}: {exc}); nothing was "
            "installed (without network access, install a model by hand: "
            "docs/embeddings.md#installing-a-model-by-hand)"
        ) from None
    except httpx.HTTPError as exc:
        raise FetchFailed(f"{name}: download failed ({type(exc).__name__}: {exc})") from None
    if pin.size is not None and size != pin.size:
        raise FetchFailed(
            f"{name}: {size} bytes from {source}, the pinned size is {pin.size}; refused"
        )
    actual = digest.hexdigest()
    if actual != pin.sha256:
        raise FetchFailed(
            f"{name}: SHA-256 mismatch (pinned {pin.sha256}, the bytes from {source} hash to "
            f"{actual}); refused"
        )
    return FetchedFile(name, size, actual, source)


def _unpinned_message(entry: CatalogModel, problems: list[str]) -> str:
    files = ", ".join(f"{pin.path} as {local}" for local, pin in entry.files.items())
    return (
        f"{entry.name} is not pinned ({'; '.join(problems)}): fetch refused. Install it by "
        f"hand: download {files} from {entry.repo} at a commit you choose, check each file's "
        f"SHA-256 against the hub's page for it, put them in ASSET_EMBED_MODEL_DIR/{entry.name}/ "
        "with preprocessor_config.json (`memory-server models list --json` prints each "
        'model\'s "preprocessing"), then run `memory-server models verify '
        f"{entry.name}` (docs/embeddings.md#installing-a-model-by-hand)"
    )


async def fetch_model(
    settings: MemorySettings,
    name: str,
    *,
    hub_url: str = HUB_URL,
    force: bool = False,
    progress: ProgressCallback | None = None,
    catalog: tuple[CatalogModel, ...] = CATALOG,
) -> FetchReport:
    """Download pinned catalog model ``name`` into ``ASSET_EMBED_MODEL_DIR/<name>``, verify it.

    ``catalog`` is the built-in one unless the caller adds entries from a catalog file
    (``load_catalog_file``). ``NotFoundFailure`` for a name not in it, ``FetchFailed`` for an
    entry that is not fully pinned (nothing is downloaded) or a file that does not match its
    pins; an installed copy is left untouched by any failure.
    """
    entry = catalog_model(name, catalog)
    if entry is None:
        known = ", ".join(m.name for m in catalog)
        raise NotFoundFailure(f"no model {name!r} in the catalog (one of {known})")
    try:
        check_model_name(entry.name)
    except ConfigurationError as exc:
        raise InvalidInputFailure(str(exc)) from None
    problems = pin_problems(entry)
    if problems:
        raise FetchFailed(_unpinned_message(entry, problems))
    destination = settings.model_dir / entry.name
    if destination.exists() and not force:
        raise ConflictFailure(
            f"{destination} exists: verify it (memory-server models verify {entry.name}) "
            "or fetch again with --force to replace it"
        )
    # A failed first fetch leaves no trace: not even the models directory it had to make.
    made_model_dir = not settings.model_dir.exists()
    settings.model_dir.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(4)
    partial = settings.model_dir / f".{entry.name}.partial-{token}"
    previous = settings.model_dir / f".{entry.name}.previous-{token}"
    partial.mkdir()
    try:
        files: list[FetchedFile] = []
        base = hub_url.rstrip("/")
        timeout = httpx.Timeout(60.0, connect=15.0)
        # identity: the pinned size and SHA-256 are of the file's bytes, not of an encoding.
        headers = {"Accept-Encoding": "identity"}
        async with httpx.AsyncClient(
            follow_redirects=True, max_redirects=5, timeout=timeout, headers=headers
        ) as client:
            for local, pin in entry.files.items():
                url = f"{base}/{entry.repo}/resolve/{entry.revision}/{pin.path}"
                files.append(await _download(client, url, partial / local, local, pin, progress))
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
        # Replace in two renames: the old copy is moved aside only once the new one is whole,
        # and put back if the second rename fails.
        if destination.exists():
            destination.rename(previous)
        try:
            partial.rename(destination)
        except OSError:
            if previous.exists():
                previous.rename(destination)
            raise
    finally:
        for leftover in (partial, previous):
            if leftover.exists():
                shutil.rmtree(leftover, ignore_errors=True)
        if made_model_dir and not any(settings.model_dir.iterdir()):
            settings.model_dir.rmdir()
    log.info("clip_model_fetched", model=entry.name, files=len(files), revision=entry.revision)
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
    """A catalog entry as JSON for ``models list --json``, with its pins and preprocessing."""
    problems = pin_problems(model)
    return {
        "name": model.name,
        "family": model.family,
        "dimensions": model.dimensions,
        "sizeMB": model.size_mb,
        "licence": model.licence,
        "commercialUse": model.commercial,
        "imagenetZeroShot": model.imagenet_zero_shot,
        "repo": model.repo,
        "revision": model.revision,
        "source": f"{model.repo}@{model.revision or 'not pinned'}",
        "pinned": not problems,
        "pinProblems": problems,
        "files": {
            local: {
                "path": pin.path,
                "sha256": pin.sha256,
                "size": pin.size,
                "maxSize": pin.max_size,
            }
            for local, pin in model.files.items()
        },
        "contextLength": model.context_length,
        "preprocessing": model.preprocessing,
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
