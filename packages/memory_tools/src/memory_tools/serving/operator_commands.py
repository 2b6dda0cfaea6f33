"""``memory-server backup``, ``restore``, ``export`` and ``import``: whole-server and vault copies.

An app adds them with :func:`add_operator_parsers` and runs the parsed command with
:func:`operator_command` inside ``run_command`` (a refusal ends with one line on stderr and exit
status 1). Each shows its progress on stderr (a bar on a terminal, plain lines otherwise) and
prints a table at the end, or one JSON object with ``--json``. The work is in
:mod:`memory_tools.backup` and :mod:`memory_tools.export`; docs/runbooks/backup-restore.md and
docs/runbooks/export-vault.md describe them.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from memory_db import MemorySettings, open_runtime
from memory_tools.backup import create_backup, require_empty_directory, restore_backup
from memory_tools.serving.admin_output import Progress, human_bytes, print_json, print_table

OPERATOR_COMMANDS = ("backup", "restore")


async def _backup(settings: MemorySettings, args: argparse.Namespace) -> None:
    # Checked before the database is opened (or started): a refusal is immediate.
    require_empty_directory(Path(args.dest), "backup destination")
    runtime = await open_runtime(settings, public_base_url="http://127.0.0.1")
    try:
        with Progress("backing up") as progress:
            report = await create_backup(runtime, Path(args.dest), progress=progress.advance)
    finally:
        await runtime.close()
    document = {
        "destination": str(report.destination),
        "schemaRevision": report.schema_revision,
        "database": report.database,
        "objectStore": report.store,
        "objectsIncluded": report.objects_included,
        "assets": report.assets,
        "objects": report.objects,
        "files": report.files,
        "bytes": report.bytes,
        "missingObjects": report.missing,
        "purgedMeanwhile": report.purged_meanwhile,
    }
    if args.json:
        print_json(document)
        return
    print_table(
        f"backup in {report.destination}",
        ("schema", "database", "store", "assets", "objects", "files", "size", "missing"),
        [
            (
                report.schema_revision,
                report.database,
                report.store if report.objects_included else f"{report.store} (not copied)",
                report.assets,
                report.objects,
                report.files,
                human_bytes(report.bytes),
                len(report.missing),
            )
        ],
        empty="",
    )
    if not report.objects_included:
        print("the S3 bucket was not copied: back it up with the bucket's versioning/replication")
    if report.missing:
        print(
            f"warning: {len(report.missing)} objects had no bytes or wrong bytes in the store "
            "(their ids are in manifest.json); run `memory-server admin reconcile`"
        )


async def _restore(settings: MemorySettings, args: argparse.Namespace) -> None:
    with (
        Progress("verifying checksums") as verifying,
        Progress("restoring objects") as restoring,
    ):
        report = await restore_backup(
            settings,
            Path(args.src),
            verify_progress=verifying.advance,
            restore_progress=restoring.advance,
        )
    document = {
        "dataDir": str(report.data_dir),
        "backupSchemaRevision": report.backup_revision,
        "schemaRevision": report.schema_revision,
        "objects": report.objects,
        "bytes": report.bytes,
    }
    if args.json:
        print_json(document)
        return
    print_table(
        f"restored into {report.data_dir}",
        ("backup schema", "schema now", "objects", "size"),
        [
            (
                report.backup_revision,
                report.schema_revision,
                report.objects,
                human_bytes(report.bytes),
            )
        ],
        empty="",
    )


def add_operator_parsers(commands: Any) -> None:
    """Add ``backup`` and ``restore`` to an app's subcommands; each binds its handler."""
    output = argparse.ArgumentParser(add_help=False)
    output.add_argument(
        "--json", action="store_true", help="print one JSON object for scripts instead of a table"
    )
    backup = commands.add_parser(
        "backup",
        parents=[output],
        help="write a consistent backup (database dump, object bytes, manifest) to DEST",
    )
    backup.add_argument("dest", metavar="DEST", help="a new or empty directory")
    backup.set_defaults(operator=_backup)
    restore = commands.add_parser(
        "restore",
        parents=[output],
        help="restore a backup into a new, empty data directory (MEMORY_DATA_DIR)",
    )
    restore.add_argument("src", metavar="SRC", help="a directory `memory-server backup` wrote")
    restore.set_defaults(operator=_restore)


async def operator_command(settings: MemorySettings, args: argparse.Namespace) -> None:
    """Run the parsed operator command (inside ``run_command``, which maps its failures)."""
    await args.operator(settings, args)
