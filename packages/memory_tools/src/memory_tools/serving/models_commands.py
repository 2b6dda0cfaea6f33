"""``memory-server models list|fetch NAME|verify [DIR]``: the clip provider's models.

``list`` prints the catalog (dimension, size, licence, commercial use, published ImageNet
zero-shot accuracy, installed or not); ``fetch`` downloads one from its hub into
``ASSET_EMBED_MODEL_DIR`` with a progress bar on a terminal and a SHA-256 per file; ``verify``
checks a model directory and runs one image and one text through it. Each prints a table, or
one JSON object with ``--json``; a failure is one line on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from memory_db import MemorySettings
from memory_db.embedding.clip_catalog import HUB_URL
from memory_tools.serving.admin_output import Progress, print_json, print_table

if TYPE_CHECKING:
    from memory_tools.models import VerifyReport


def add_models_parser(commands: Any) -> None:
    """Add ``models`` (``list``, ``fetch``, ``verify``) to an app's subcommands."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "models", help="list, fetch and verify the clip provider's models"
    )
    actions = parser.add_subparsers(dest="models_command", required=True)
    listing = actions.add_parser("list", help="the models this server can run, with licences")
    listing.add_argument("--json", action="store_true", help="print one JSON object for scripts")
    fetch = actions.add_parser("fetch", help="download a model into ASSET_EMBED_MODEL_DIR")
    fetch.add_argument("name", help="a model name from `models list`")
    fetch.add_argument(
        "--hub-url", default=HUB_URL, help=f"the model hub's address (default {HUB_URL})"
    )
    fetch.add_argument("--force", action="store_true", help="replace an existing directory")
    fetch.add_argument("--json", action="store_true", help="print one JSON object for scripts")
    verify = actions.add_parser("verify", help="check a model directory and run it once")
    verify.add_argument(
        "target",
        nargs="?",
        default=None,
        help="a model directory, or a model name under ASSET_EMBED_MODEL_DIR "
        "(default: ASSET_EMBED_MODEL)",
    )
    verify.add_argument("--json", action="store_true", help="print one JSON object for scripts")


async def models_command(settings: MemorySettings, args: argparse.Namespace) -> None:
    """Run the parsed ``models`` subcommand (inside ``run_command``)."""
    # Loaded when a `models` command runs, not with the parser: it brings httpx and the clip
    # embedder (numpy, onnxruntime), which no other command needs.
    from memory_tools.models import fetch_model, resolve_model_directory, verify_model

    if args.models_command == "list":
        _list(settings, args)
    elif args.models_command == "fetch":
        with Progress(f"fetching {args.name}") as progress:
            report = await fetch_model(
                settings,
                args.name,
                hub_url=args.hub_url,
                force=args.force,
                progress=progress.advance,
            )
        files = [
            {"file": f.name, "bytes": f.size, "sha256": f.sha256, "hubPublishedSha256": f.published}
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
            ("file", "bytes", "sha256", "checked against the hub"),
            [
                (f.name, f.size, f.sha256, "yes" if f.published else "no (recorded)")
                for f in report.files
            ],
            empty="",
        )
        _print_verified(report.verified)
    else:
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


def _list(settings: MemorySettings, args: argparse.Namespace) -> None:
    from memory_tools.models import describe, list_models

    rows = list_models(settings)
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
        ("name", "dim", "size", "licence", "commercial use", "ImageNet zero-shot", "installed"),
        [
            (
                r.model.name,
                r.model.dimensions,
                f"~{r.model.size_mb} MB",
                r.model.licence,
                r.model.commercial,
                r.model.imagenet_zero_shot,
                "yes" if r.installed else "no",
            )
            for r in rows
        ],
        empty="",
    )
    print("Published figures, not measured here. jina-clip-v2 and Jina v5 weights: CC-BY-NC-4.0.")


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
