"""``memory-server backup``, ``restore``, ``export``, ``import`` and ``enrich``: vault-wide work.

An app adds them with :func:`add_operator_parsers` and runs the parsed command with
:func:`operator_command` inside ``run_command`` (a refusal ends with one line on stderr and exit
status 1). Each shows its progress on stderr (a bar on a terminal, plain lines otherwise) and
prints a table at the end, or one JSON object with ``--json``. The work is in
:mod:`memory_tools.operations.backup`, :mod:`memory_tools.operations.export` and
:mod:`memory_tools.jobs.ocr_jobs`;
docs/runbooks/backup-restore.md, docs/runbooks/export-vault.md and docs/ocr.md describe them.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memory_db import MemorySettings
from memory_tools.serving.admin_output import Progress, human_bytes, print_report

# Each command imports its workflow (and the runtime) when it runs, not with the parser: the
# enrichers alone load pyvips, OCR and the describers, which `memory-server admin ...` and the
# other commands never use.

OPERATOR_COMMANDS = ("backup", "restore", "export", "import", "enrich")
# ``memory_tools.jobs.ocr_jobs.ENRICHERS``' keys, for the parser (a test keeps the two equal).
ENRICHMENT_KINDS = ("ocr", "describe")


def _every_percent(progress: Progress) -> Callable[[int, int, str], None]:
    """``progress.advance`` at most once per percent of each phase, and at its end.

    Off a terminal every call is a line: a backup of 100,000 objects would log 100,000.
    """
    last: list[object] = [None]

    def advance(done: int, total: int, detail: str = "") -> None:
        step = max(1, total // 100)
        mark = (detail, done // step)
        if mark != last[0] or done == total:
            last[0] = mark
            progress.advance(done, total, detail)

    return advance


async def _backup(settings: MemorySettings, args: argparse.Namespace) -> None:
    from memory_db import open_runtime
    from memory_tools.operations.backup import create_backup, require_empty_directory

    # Checked before the database is opened (or started): a refusal is immediate.
    require_empty_directory(Path(args.dest), "backup destination")
    runtime = await open_runtime(settings, public_base_url="http://127.0.0.1")
    try:
        with Progress("backing up") as progress:
            report = await create_backup(
                runtime, Path(args.dest), progress=_every_percent(progress)
            )
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
    print_report(
        document,
        as_json=args.json,
        title=f"backup in {report.destination}",
        columns=("schema", "database", "store", "assets", "objects", "files", "size", "missing"),
        row=(
            report.schema_revision,
            report.database,
            report.store if report.objects_included else f"{report.store} (not copied)",
            report.assets,
            report.objects,
            report.files,
            human_bytes(report.bytes),
            len(report.missing),
        ),
        notes=[
            *(
                []
                if report.objects_included
                else ["the S3 bucket was not copied: back it up with its versioning/replication"]
            ),
            *(
                [
                    f"warning: {len(report.missing)} objects had no bytes or wrong bytes in the "
                    "store (their ids are in manifest.json); run `memory-server admin reconcile`"
                ]
                if report.missing
                else []
            ),
        ],
    )


async def _restore(settings: MemorySettings, args: argparse.Namespace) -> None:
    from memory_tools.operations.backup import restore_backup

    # One bar for both phases (checking every file, then writing the objects): a terminal
    # shows one live display at a time.
    with Progress("restoring (checksums, then objects)") as progress:
        report = await restore_backup(
            settings,
            Path(args.src),
            key_file=Path(args.key_file) if args.key_file else None,
            verify_progress=_every_percent(progress),
            restore_progress=_every_percent(progress),
        )
    document = {
        "dataDir": str(report.data_dir),
        "backupSchemaRevision": report.backup_revision,
        "schemaRevision": report.schema_revision,
        "objectFiles": report.files,
        "bytes": report.bytes,
    }
    print_report(
        document,
        as_json=args.json,
        title=f"restored into {report.data_dir}",
        columns=("backup schema", "schema now", "object files", "size"),
        row=(
            report.backup_revision,
            report.schema_revision,
            report.files,
            human_bytes(report.bytes),
        ),
    )


async def _export(settings: MemorySettings, args: argparse.Namespace) -> None:
    from memory_db import open_runtime
    from memory_tools import MemoryServices
    from memory_tools.operations.export import export_vault

    runtime = await open_runtime(settings, public_base_url="http://127.0.0.1")
    try:
        services = MemoryServices(database=runtime.database, store=runtime.store, settings=settings)
        with Progress("exporting") as progress:
            report = await export_vault(
                services,
                args.vault_owner,
                args.vault,
                Path(args.dest),
                progress=_every_percent(progress),
            )
    finally:
        await runtime.close()
    document = {
        "destination": str(report.destination),
        "vault": report.vault,
        "projects": report.projects,
        "folders": report.folders,
        "assets": report.assets,
        "bytes": report.bytes,
        "skipped": report.skipped,
    }
    print_report(
        document,
        as_json=args.json,
        title=f"export of {report.vault} in {report.destination}",
        columns=("projects", "folders", "images", "size", "skipped"),
        row=(
            report.projects,
            report.folders,
            report.assets,
            human_bytes(report.bytes),
            len(report.skipped),
        ),
        notes=[
            f"warning: {len(report.skipped)} images had no bytes or wrong bytes in the store "
            f"and were left out: {', '.join(report.skipped[:10])}"
        ]
        if report.skipped
        else [],
    )


async def _import(settings: MemorySettings, args: argparse.Namespace) -> None:
    from memory_db import open_runtime
    from memory_tools import MemoryServices
    from memory_tools.operations.export import import_vault

    runtime = await open_runtime(settings, public_base_url="http://127.0.0.1")
    try:
        services = MemoryServices(
            database=runtime.database,
            store=runtime.store,
            settings=settings,
            embedder=runtime.embedder,
        )
        with Progress("importing") as progress:
            report = await import_vault(
                services, args.owner, args.vault, Path(args.src), progress=_every_percent(progress)
            )
    finally:
        await runtime.close()
    document = {
        "owner": report.owner,
        "vault": report.vault,
        "projectsCreated": report.projects_created,
        "foldersCreated": report.folders_created,
        "saved": report.saved,
        "alreadyImported": report.replayed,
        "deduplicated": report.deduplicated,
        "bytes": report.bytes,
    }
    print_report(
        document,
        as_json=args.json,
        title=f"import into {report.owner} / {report.vault}",
        columns=(
            "projects created",
            "folders created",
            "saved",
            "already imported",
            "deduplicated",
        ),
        row=(
            report.projects_created,
            report.folders_created,
            report.saved,
            report.replayed,
            report.deduplicated,
        ),
        # Advice only when there is work for the worker: a second run saves nothing.
        notes=["the worker embeds the saved images: run the server or `memory-server worker`"]
        if report.saved
        else [],
    )


async def _enrich(settings: MemorySettings, args: argparse.Namespace) -> None:
    from memory_db import open_runtime
    from memory_db.describing import build_describer
    from memory_tools import MemoryServices
    from memory_tools.jobs.ocr_jobs import check_what
    from memory_tools.operations.enrich import enrich_vault

    runtime = await open_runtime(settings, public_base_url="http://127.0.0.1")
    # Only its model name is used here (it labels the describe jobs); workers make the calls.
    describer = build_describer(settings)
    try:
        services = MemoryServices(
            database=runtime.database, store=runtime.store, settings=settings, describer=describer
        )
        what = check_what(args.what, services)
        with Progress("queueing") as progress:
            report = await enrich_vault(
                services,
                args.vault_owner,
                args.vault,
                args.what,
                progress=lambda done, total: progress.advance(done, total, ""),
            )
    finally:
        if describer is not None:
            await describer.close()
        await runtime.close()
    document = {
        "vault": report.vault,
        "what": what,
        "assets": report.assets,
        "queued": report.queued,
        "alreadyQueued": report.already_queued,
    }
    print_report(
        document,
        as_json=args.json,
        title=f"enrichment of {report.vault}",
        columns=("what", "images", "queued", "already queued"),
        row=(", ".join(what), report.assets, report.queued, report.already_queued),
        notes=["the worker runs the jobs: run the server or `memory-server worker`"]
        if report.queued
        else [],
    )


def add_operator_parsers(commands: Any) -> None:
    """Add ``backup``, ``restore``, ``export``, ``import`` and ``enrich`` to an app's commands."""
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
    restore.add_argument(
        "--key-file",
        metavar="PATH",
        help="the backup key of the server that wrote the backup (default: "
        "MEMORY_BACKUP_KEY_FILE, else backup.key in MEMORY_DATA_DIR)",
    )
    restore.set_defaults(operator=_restore)
    export = commands.add_parser(
        "export",
        parents=[output],
        help="write one vault (originals, assets.jsonl, vault.json) to DEST in an open format",
    )
    export.add_argument("--vault-owner", required=True, help="the owner of the vault")
    export.add_argument("--vault", required=True, help="the vault's name, e.g. Library")
    export.add_argument("dest", metavar="DEST", help="a new or empty directory")
    export.set_defaults(operator=_export)
    imported = commands.add_parser(
        "import",
        parents=[output],
        help="save a vault export into OWNER's vault (idempotent: a second run adds nothing)",
    )
    imported.add_argument("--owner", required=True, help="the identity that receives the images")
    imported.add_argument(
        "--vault", default="Library", help="the vault to fill (made if missing; default Library)"
    )
    imported.add_argument("src", metavar="SRC", help="a directory `memory-server export` wrote")
    imported.set_defaults(operator=_import)
    enrich = commands.add_parser(
        "enrich",
        parents=[output],
        help="queue the enrichments (OCR, generated context) of every image of one vault again",
    )
    enrich.add_argument("--vault-owner", required=True, help="the owner of the vault")
    enrich.add_argument("--vault", required=True, help="the vault's name, e.g. Library")
    enrich.add_argument(
        "--what",
        action="append",
        choices=list(ENRICHMENT_KINDS),
        help="an enrichment to run (repeatable; default: all the server has switched on)",
    )
    enrich.set_defaults(operator=_enrich)


async def operator_command(settings: MemorySettings, args: argparse.Namespace) -> None:
    """Run the parsed operator command (inside ``run_command``, which maps its failures)."""
    await args.operator(settings, args)
