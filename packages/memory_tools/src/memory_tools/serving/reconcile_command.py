"""``memory-server reconcile``: one reconciliation pass now, with its findings and integrity report.

The checks are :mod:`memory_tools.operations.reconcile`'s (the worker's sweep runs the same on a
schedule).
Progress goes to stderr (a bar on a terminal, one plain line per namespace otherwise); at the end
the findings table, the integrity report and the counter corrections are printed, or one JSON
object with ``--json`` (keys in docs/runbooks/reconcile.md). ``admin reconcile`` is the same
command under its older name.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from memory_db import Runtime
from memory_tools.serving.admin_output import Progress, human_bytes, print_json, print_table
from memory_tools.serving.subcommands import RUNTIME, Subcommand, add_json_option, operator_services

if TYPE_CHECKING:
    from memory_tools.operations.reconcile import Reconciliation


def add_reconcile_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of a reconciliation pass (``reconcile`` and ``admin reconcile``)."""
    parser.add_argument(
        "--dry-run", action="store_true", help="report every finding, change nothing"
    )
    parser.add_argument(
        "--owner", default=None, help="only this identity's namespace (an owner e-mail address)"
    )
    parser.add_argument(
        "--verify-checksums",
        action="store_true",
        help="read every object's bytes and compare them with the recorded SHA-256 (slow: "
        "reads the whole store)",
    )


async def reconcile(runtime: Runtime, args: argparse.Namespace) -> None:
    """Run one pass and print it (inside ``run_command``, which maps its failures)."""
    # Loaded here, not with the parser: the pass needs the ingest code and the worker's
    # constants, which no other operator command does.
    from memory_tools.jobs.worker import ORPHAN_SAFETY_WINDOW
    from memory_tools.operations import admin
    from memory_tools.operations.reconcile import reconcile_store

    with Progress("reconciling namespaces") as progress:
        report = await reconcile_store(
            operator_services(runtime),
            safety_window=ORPHAN_SAFETY_WINDOW,
            progress=progress.advance,
            actor=admin.OPERATOR,
            dry_run=args.dry_run,
            owner=args.owner,
            verify_limit=None if args.verify_checksums else 0,
        )
    if args.json:
        print_json(report_document(report))
    else:
        print_report(report)


def _reconcile_arguments(parser: argparse.ArgumentParser) -> None:
    add_reconcile_arguments(parser)
    add_json_option(parser, "print one JSON object for scripts instead of tables")


RECONCILE = Subcommand(
    name="reconcile",
    help="check the store, objects, vectors and counters against each other and repair",
    arguments=_reconcile_arguments,
    opens=RUNTIME,
    run=reconcile,
)


def report_document(report: Reconciliation) -> dict[str, Any]:
    """The pass as one JSON-ready object (camelCase keys)."""
    return {
        "dryRun": report.dry_run,
        "namespaces": report.namespaces,
        "listed": report.listed,
        "removed": report.removed,
        "removedBytes": report.removed_bytes,
        "waiting": report.waiting,
        "foreign": report.foreign,
        "verified": report.verified,
        "skipped": list(report.skipped),
        "findings": [
            {"check": check, "action": action, "count": count}
            for (check, action), count in sorted(report.findings.items())
        ],
        "integrity": [
            {
                "check": item.check,
                "action": item.action,
                "owner": item.owner,
                "namespaceId": item.namespace_id,
                "objectId": item.object_id,
                "key": item.key,
                "assetIds": list(item.asset_ids),
            }
            for item in report.integrity
        ],
        "counters": [
            {
                "action": item.action,
                "owner": item.owner,
                "namespaceId": item.namespace_id,
                "usedBefore": item.used_before,
                "usedAfter": item.used_after,
                "reservedBefore": item.reserved_before,
                "reservedAfter": item.reserved_after,
            }
            for item in report.drift
        ],
    }


def print_report(report: Reconciliation) -> None:
    """The pass for people: a summary line, then a table per kind of finding."""
    mode = "dry run: nothing changed" if report.dry_run else "repairs applied"
    print(
        f"reconciled {report.namespaces} namespace(s), {report.listed} key(s) listed, "
        f"{report.verified} object(s) verified ({mode})"
    )
    if report.skipped:
        print(
            f"skipped {len(report.skipped)} namespace(s) another reconciler was working on: "
            + ", ".join(report.skipped)
        )
    print_table(
        "findings",
        ("check", "action", "count"),
        [(check, action, count) for (check, action), count in sorted(report.findings.items())],
        empty="no findings: the store, objects, vectors and counters agree",
    )
    if report.removed:
        print(f"removed {report.removed} unaccounted key(s), {human_bytes(report.removed_bytes)}")
    if report.integrity:
        print_table(
            "integrity report",
            ("check", "action", "owner", "namespace", "object", "key", "images"),
            [
                (
                    item.check,
                    item.action,
                    item.owner,
                    item.namespace_id,
                    item.object_id,
                    item.key,
                    " ".join(item.asset_ids) or "(none)",
                )
                for item in report.integrity
            ],
            empty="",
        )
    if any(item.check != "object_restored" for item in report.integrity):
        print(
            "missing or corrupt bytes cannot be recreated: restore them from a backup and run "
            "`memory-server reconcile --verify-checksums` again, or delete the images and save "
            "them again (docs/runbooks/reconcile.md)"
        )
    if report.drift:
        print_table(
            "namespace counters",
            (
                "action",
                "owner",
                "namespace",
                "used before",
                "used after",
                "reserved before",
                "reserved after",
            ),
            [
                (
                    item.action,
                    item.owner,
                    item.namespace_id,
                    item.used_before,
                    item.used_after,
                    item.reserved_before,
                    item.reserved_after,
                )
                for item in report.drift
            ],
            empty="",
        )
