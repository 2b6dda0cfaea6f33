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

from memory_db import Runtime
from memory_tools.operations.reindex_defaults import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_MIN_RECALL,
    DEFAULT_RECALL_QUERIES,
    RECALL_K,
)
from memory_tools.serving.admin_output import Progress, print_json, print_report
from memory_tools.serving.subcommands import (
    DATABASE,
    RUNTIME,
    OpenedDatabase,
    Subcommand,
    add_json_option,
    operator_services,
)


def _reindex_arguments(parser: argparse.ArgumentParser) -> None:
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
    add_json_option(parser, _JSON_HELP)


def _drop_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="the index's table name")
    add_json_option(parser, _JSON_HELP)


async def _reindex(runtime: Runtime, args: argparse.Namespace) -> None:
    # Loaded when it runs, not with the parser: the embedders and the vector index.
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
    services = operator_services(runtime, embedder=runtime.embedder)
    try:
        with Progress(f"re-embedding into {args.target}") as progress:
            report = await reindex(services, request, progress=progress.advance)
    finally:
        # The embedders of other indexes it built on the way (the runtime closes its own).
        await services.embedders.close()
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


async def _drop(opened: OpenedDatabase, args: argparse.Namespace) -> None:
    from memory_tools.operations.reindex import drop_old_index

    await drop_old_index(opened.database, args.name)
    if args.json:
        print_json({"dropped": args.name})
    else:
        print(f"dropped vector index {args.name}")


_JSON_HELP = "print one JSON object for scripts"

REINDEX_COMMANDS = (
    Subcommand(
        name="reindex",
        help="re-embed every image into a new vector index, verify it, switch to it",
        arguments=_reindex_arguments,
        opens=RUNTIME,
        run=_reindex,
    ),
    Subcommand(
        name="drop-index",
        help="drop a vector index no alias points at",
        arguments=_drop_arguments,
        opens=DATABASE,
        run=_drop,
    ),
)
"""``reindex`` and ``drop-index``."""
