"""``memory-server models list|fetch NAME|verify [DIR]|install [NAME]``: the clip models.

``install`` (``make model``) is search by meaning in one command: it fetches the recommended
model (or NAME) when it is missing, verifies it and switches the active index to it with the
index rebuild, showing the download's bytes and then the re-embedding's progress, and ends with
one line saying what search now understands (``memory_tools.operations.model_install`` decides
each step; this module only wires it to the runtime and the terminal).

``list`` prints the catalog (dimension, size, licence, commercial use, published ImageNet
zero-shot accuracy, installed or not, pinned or not); ``fetch`` downloads a pinned one from its
hub into ``ASSET_EMBED_MODEL_DIR`` with a progress bar on a terminal, checking every file
against its pinned SHA-256 and size; ``--catalog FILE`` adds fully pinned entries from a JSON
file (an operator's own model, or a test's); ``verify``
checks a model directory and runs one image and one text through it. Each prints a table, or
one JSON object with ``--json``; a failure is one line on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import AsyncGenerator, Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memory_db import MemorySettings, open_runtime
from memory_db.embedding.clip_catalog import (
    CATALOG,
    HUB_URL,
    RECOMMENDED_MODEL,
    CatalogModel,
    load_catalog_file,
)
from memory_tools.errors import InvalidInputFailure
from memory_tools.progress import ProgressCallback
from memory_tools.serving.admin_output import Progress, print_json, print_table
from memory_tools.serving.subcommands import (
    OPERATOR_BASE_URL,
    SETTINGS,
    CommandGroup,
    Subcommand,
    add_json_option,
    operator_services,
)

if TYPE_CHECKING:
    from memory_tools.operations.model_downloads import VerifyReport
    from memory_tools.operations.model_install import InstallReport
    from memory_tools.services import MemoryServices


def _list_arguments(parser: argparse.ArgumentParser) -> None:
    add_json_option(parser, _JSON_HELP)
    _add_catalog_option(parser)


def _fetch_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="a model name from `models list`")
    parser.add_argument(
        "--hub-url", default=HUB_URL, help=f"the model hub's address (default {HUB_URL})"
    )
    parser.add_argument("--force", action="store_true", help="replace an existing directory")
    add_json_option(parser, _JSON_HELP)
    _add_catalog_option(parser)


def _install_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "name",
        nargs="?",
        default=RECOMMENDED_MODEL,
        help=f"a model name from `models list` (default: the recommended {RECOMMENDED_MODEL})",
    )
    parser.add_argument(
        "--hub-url", default=HUB_URL, help=f"the model hub's address (default {HUB_URL})"
    )
    add_json_option(parser, _JSON_HELP)
    _add_catalog_option(parser)


def _verify_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "target",
        nargs="?",
        default=None,
        help="a model directory, or a model name under ASSET_EMBED_MODEL_DIR "
        "(default: ASSET_EMBED_MODEL)",
    )
    add_json_option(parser, _JSON_HELP)


def _add_catalog_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--catalog",
        type=Path,
        default=None,
        metavar="FILE",
        help="add fully pinned models from this JSON file (docs/embeddings.md); "
        "it cannot change a built-in entry",
    )


def _catalog(args: argparse.Namespace) -> tuple[CatalogModel, ...]:
    path: Path | None = getattr(args, "catalog", None)
    if path is None:
        return CATALOG
    try:
        return CATALOG + load_catalog_file(path)
    except ValueError as exc:
        raise InvalidInputFailure(str(exc)) from None


async def _fetch(settings: MemorySettings, args: argparse.Namespace) -> None:
    # Loaded when a `models` command runs, not with the parser: it brings httpx and the clip
    # embedder (numpy, onnxruntime), which no other command needs.
    from memory_tools.operations.model_downloads import fetch_model

    catalog = _catalog(args)
    with Progress(f"fetching {args.name}") as progress:
        report = await fetch_model(
            settings,
            args.name,
            hub_url=args.hub_url,
            force=args.force,
            progress=progress.advance,
            catalog=catalog,
        )
    files = [
        {"file": f.name, "bytes": f.size, "sha256": f.sha256, "matchesPin": True}
        | {"source": f.source}
        for f in report.files
    ]
    if args.json:
        print_json(
            {"model": report.name, "directory": str(report.directory), "files": files}
            | {"verified": _verified(report.verified)}
        )
        return
    print_table(
        f"fetched {report.name} into {report.directory}",
        ("file", "bytes", "sha256", "pinned SHA-256 and size"),
        [(f.name, f.size, f.sha256, "match") for f in report.files],
        empty="",
    )
    _print_verified(report.verified)


class _Bars:
    """Each install step as a progress bar on stderr (plain lines when it is not a terminal)."""

    @contextlib.contextmanager
    def step(self, description: str) -> Generator[ProgressCallback]:
        with Progress(description) as bar:
            yield bar.advance


@contextlib.asynccontextmanager
async def _operator_services(settings: MemorySettings) -> AsyncGenerator[MemoryServices]:
    # Opened by the install only once the files are in place (a failed download opens nothing).
    runtime = await open_runtime(settings, public_base_url=OPERATOR_BASE_URL)
    try:
        services = operator_services(runtime, embedder=runtime.embedder)
        try:
            yield services
        finally:
            # The embedders of other indexes the rebuild built (the runtime closes its own).
            await services.embedders.close()
    finally:
        await runtime.close()


async def _install(settings: MemorySettings, args: argparse.Namespace) -> None:
    from memory_tools.operations.model_install import InstallRequest, install_model

    request = InstallRequest(name=args.name, hub_url=args.hub_url, catalog=_catalog(args))
    report = await install_model(
        settings,
        request,
        open_services=lambda: _operator_services(settings),
        steps=_Bars(),
    )
    if args.json:
        print_json(_installed(report))
        return
    print(_install_line(report))


def _install_line(report: InstallReport) -> str:
    if report.already_active:
        return (
            f"{report.name} is installed and active (index {report.index}): nothing to do; "
            "search already understands meaning"
        )
    reindexed = report.reindexed
    previous = f"; the previous index {reindexed.source} is kept" if reindexed else ""
    return (
        f"search now understands meaning: {report.name} is active (index {report.index}, "
        f"{reindexed.embedded if reindexed else 0} images embedded){previous}"
    )


def _installed(report: InstallReport) -> dict[str, Any]:
    reindexed = report.reindexed
    return {
        "model": report.name,
        "directory": str(report.directory),
        "index": report.index,
        "embedder": str(report.identity),
        "fetched": report.fetched is not None,
        "alreadyActive": report.already_active,
        "switched": reindexed is not None and reindexed.switched,
        "previous": reindexed.source if reindexed else None,
        "embedded": reindexed.embedded if reindexed else 0,
        "recall": None
        if reindexed is None or reindexed.recall is None
        else round(reindexed.recall, 4),
    }


async def _verify(settings: MemorySettings, args: argparse.Namespace) -> None:
    from memory_tools.operations.model_downloads import resolve_model_directory, verify_model

    directory = resolve_model_directory(settings, args.target)
    verified = await verify_model(directory)
    if args.json:
        print_json({"directory": str(directory)} | _verified(verified))
        return
    print_table(
        f"verified {directory}",
        ("file", "check"),
        sorted(verified.checked_files.items()),
        empty="",
    )
    _print_verified(verified)


async def _list(settings: MemorySettings, args: argparse.Namespace) -> None:
    from memory_tools.operations.model_downloads import describe, list_models

    rows = list_models(settings, _catalog(args))
    if args.json:
        print_json(
            {
                "modelDir": str(settings.model_dir),
                "models": [describe(r.model) | {"installed": r.installed} for r in rows],
            }
        )
        return
    print_table(
        f"clip models (installed under {settings.model_dir})",
        (
            "name",
            "dim",
            "size",
            "licence",
            "commercial use",
            "ImageNet zero-shot",
            "installed",
            "fetch",
        ),
        [
            (
                r.model.name,
                r.model.dimensions,
                f"~{r.model.size_mb} MB",
                r.model.licence,
                r.model.commercial,
                r.model.imagenet_zero_shot,
                "yes" if r.installed else "no",
                "pinned" if not r.pin_problems else "not pinned: fetch refused",
            )
            for r in rows
        ],
        empty="",
    )
    print("Published figures, not measured here. jina-clip-v2 and Jina v5 weights: CC-BY-NC-4.0.")
    if any(r.pin_problems for r in rows):
        print(
            "A model that is not pinned (no commit, SHA-256 and size on record for every file) "
            "is installed by hand, then checked with `models verify` (docs/embeddings.md)."
        )


def _verified(report: VerifyReport) -> dict[str, Any]:
    return {
        "name": report.name,
        "dimensions": report.dimensions,
        "contextLength": report.context_length,
        "files": report.checked_files,
        "imageSeconds": round(report.image_seconds, 4),
        "textSeconds": round(report.text_seconds, 4),
    }


def _print_verified(report: VerifyReport) -> None:
    print(
        f"ok: {report.name} makes {report.dimensions}-d vectors; one image embedded in "
        f"{report.image_seconds:.3f} s, one text ({report.context_length} tokens) in "
        f"{report.text_seconds:.3f} s"
    )


_JSON_HELP = "print one JSON object for scripts"

MODELS = CommandGroup(
    name="models",
    help="list, fetch, verify and install the clip provider's models",
    dest="models_command",
    commands=(
        Subcommand(
            name="list",
            help="the models this server can run, with licences",
            arguments=_list_arguments,
            opens=SETTINGS,
            run=_list,
        ),
        Subcommand(
            name="fetch",
            help="download a model into ASSET_EMBED_MODEL_DIR",
            arguments=_fetch_arguments,
            opens=SETTINGS,
            run=_fetch,
        ),
        Subcommand(
            name="verify",
            help="check a model directory and run it once",
            arguments=_verify_arguments,
            opens=SETTINGS,
            run=_verify,
        ),
        Subcommand(
            name="install",
            help="search by meaning: fetch the recommended model (or NAME), switch to it",
            arguments=_install_arguments,
            opens=SETTINGS,
            run=_install,
        ),
    ),
)
"""``models list``, ``models fetch NAME``, ``models verify [DIR]`` and ``models install``."""
