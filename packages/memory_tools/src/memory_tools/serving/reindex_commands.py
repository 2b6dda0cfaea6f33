"""``memory-server reindex`` and ``memory-server drop-index``: rebuilding the vector index.

``reindex --to NAME`` runs :func:`memory_tools.operations.reindex.reindex` with a progress bar on
stderr
(plain lines when stderr is not a terminal) and prints a table, or one JSON object with
``--json``. A refusal or failure ends with one line on stderr and exit status 1 (see
``run_command``); a crashed or interrupted run resumes when run again with the same ``--to``.
The runbook is docs/runbooks/switch-models.md.
"""

from __future__ import annotations

import argparse
from typing import Any

from memory_db import MemorySettings
from memory_tools.operations.reindex_defaults import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_MIN_RECALL,
    DEFAULT_RECALL_QUERIES,
    RECALL_K,
)
from memory_tools.serving.admin_output import Progress, print_json, print_report


def add_reindex_parsers(commands: Any) -> None:
    """Add ``reindex`` and ``drop-index`` to an app's subcommands."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "reindex",
        help="re-embed every image into a new vector index, verify it, switch to it",
    )
    parser.add_argument("--to", required=True, dest="target", help="the new index's table name")
    parser.add_argument(
        "--provider", default=None, help="local, jina or clip (default: the active's)"
    )
    parser.add_argument("--model", default=None, help="the embedding model (default: as active)")
    parser.add_argument("--dim", type=int, default=None, help="vector dimensions")
    parser.add_argument(
        "--min-recall",
        type=float,
        default=DEFAULT_MIN_RECALL,
        help=f"refuse to switch below this recall@{RECALL_K} (default {DEFAULT_MIN_RECALL})",
    )
    parser.add_argument(
        "--recall-queries",
        type=int,
        default=DEFAULT_RECALL_QUERIES,
        help=f"sampled queries for the recall measurement (default {DEFAULT_RECALL_QUERIES})",
    )
    parser.add_argument(
        "--force", action="store_true", help="switch even when recall is below --min-recall"
    )
    parser.add_argument(
        "--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="assets per embedding call"
    )
    parser.add_argument(
        "--drop-old", action="store_true", help="drop the old index after the switch"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object for scripts")
    parser.set_defaults(reindex_handler=_reindex)
    drop = commands.add_parser("drop-index", help="drop a vector index no alias points at")
    drop.add_argument("name", help="the index's table name")
    drop.add_argument("--json", action="store_true", help="print one JSON object for scripts")
    drop.set_defaults(reindex_handler=_drop)


async def reindex_command(settings: MemorySettings, args: argparse.Namespace) -> None:
    """Run the parsed ``reindex`` or ``drop-index`` (inside ``run_command``)."""
    await args.reindex_handler(settings, args)


async def _reindex(settings: MemorySettings, args: argparse.Namespace) -> None:
    # Loaded when it runs, not with the parser: the embedders and the vector index.
    from memory_db import open_runtime
    from memory_tools import MemoryServices
    from memory_tools.operations.reindex import ReindexRequest, reindex

    request = ReindexRequest(
        target=args.target,
        provider=args.provider,
        model=args.model,
        dimensions=args.dim,
        batch_size=args.batch_size,
        min_recall=args.min_recall,
        recall_queries=args.recall_queries,
        force=args.force,
        drop_old=args.drop_old,
    )
    runtime = await open_runtime(settings, public_base_url="http://127.0.0.1")
    services = MemoryServices(
        database=runtime.database,
        store=runtime.store,
        settings=settings,
        embedder=runtime.embedder,
    )
    try:
        with Progress(f"re-embedding into {args.target}") as progress:
            report = await reindex(services, request, progress=progress.advance)
    finally:
        await services.embedders.close()
        await runtime.close()
    document = {
        "index": report.target,
        "previous": report.source,
        "embedder": report.embedder,
        "resumed": report.resumed,
        "embedded": report.embedded,
        "skipped": report.skipped,
        "previousAssets": report.source_assets,
        "assets": report.target_assets,
        "recall": None if report.recall is None else round(report.recall, 4),
        "minRecall": report.min_recall,
        "forced": report.forced,
        "switched": report.switched,
        "droppedPrevious": report.dropped_old,
    }
    recall = "n/a (no vectors)" if report.recall is None else f"{report.recall:.3f}"
    if report.forced:
        recall += f" (below {report.min_recall}: switched with --force)"
    print_report(
        document,
        as_json=args.json,
        title="reindex",
        columns=(
            "index",
            "previous",
            "embedder",
            "embedded",
            "skipped",
            "assets",
            f"recall@{RECALL_K}",
        ),
        row=(
            report.target,
            report.source + (" (dropped)" if report.dropped_old else " (kept)"),
            report.embedder,
            report.embedded,
            report.skipped,
            f"{report.target_assets} of {report.source_assets}",
            recall,
        ),
        notes=[f"switched: the alias now points at {report.target}"],
    )


async def _drop(settings: MemorySettings, args: argparse.Namespace) -> None:
    from memory_db import open_database
    from memory_tools.operations.reindex import drop_old_index

    database, embedded = await open_database(settings, migrate=False)
    try:
        await drop_old_index(database, args.name)
    finally:
        await database.close()
        if embedded is not None:
            embedded.stop()
    if args.json:
        print_json({"dropped": args.name})
    else:
        print(f"dropped vector index {args.name}")
