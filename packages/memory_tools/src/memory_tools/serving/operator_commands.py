"""``memory-server backup``, ``restore``, ``export``, ``import`` and ``enrich``: vault-wide work.

Each is a :class:`~memory_tools.serving.subcommands.Subcommand` (an app lists
:data:`OPERATOR_COMMANDS`), run inside ``run_command`` (a refusal ends with one line on stderr and
exit status 1); ``migrate`` is declared here too. Each shows its progress on stderr (a bar on a
terminal, plain lines otherwise) and prints a table at the end, or one JSON object with
``--json``. The work is in :mod:`memory_tools.operations.backup`,
:mod:`memory_tools.operations.export` and :mod:`memory_tools.jobs.ocr_jobs`;
docs/runbooks/backup-restore.md, docs/runbooks/export-vault.md and docs/ocr.md describe them.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from memory_db import MemorySettings, Runtime
from memory_tools.serving.admin_output import Progress, human_bytes, print_report
from memory_tools.serving.subcommands import (
    MIGRATED_DATABASE,
    RUNTIME,
    SETTINGS,
    OpenedDatabase,
    Subcommand,
    add_json_option,
    operator_services,
)

# Each command imports its workflow (and the runtime) when it runs, not with the parser: the
# enrichers alone load pyvips, OCR and the describers, which `memory-server admin ...` and the
# other commands never use.

# ``memory_tools.jobs.ocr_jobs.ENRICHERS``' keys, for the parser (a test keeps the two equal).
ENRICHMENT_KINDS = ("ocr", "describe", "capture", "duplicates")


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


def _backup_destination_is_empty(args: argparse.Namespace) -> None:
    from memory_tools.operations.backup import require_empty_directory

    require_empty_directory(Path(args.dest), "backup destination")


async def _backup(runtime: Runtime, args: argparse.Namespace) -> None:
    from memory_tools.operations.backup import create_backup

    with Progress("backing up") as progress:
        report = await create_backup(runtime, Path(args.dest), progress=_every_percent(progress))
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


async def _export(runtime: Runtime, args: argparse.Namespace) -> None:
    from memory_tools.operations.export import export_vault

    with Progress("exporting") as progress:
        report = await export_vault(
            operator_services(runtime),
            args.vault_owner,
            args.vault,
            Path(args.dest),
            progress=_every_percent(progress),
        )
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


async def _import(runtime: Runtime, args: argparse.Namespace) -> None:
    from memory_tools.operations.export import import_vault

    services = operator_services(runtime, embedder=runtime.embedder)
    with Progress("importing") as progress:
        report = await import_vault(
            services, args.owner, args.vault, Path(args.src), progress=_every_percent(progress)
        )
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


async def _enrich(runtime: Runtime, args: argparse.Namespace) -> None:
    from memory_db.describing import build_describer
    from memory_tools.jobs.ocr_jobs import check_what
    from memory_tools.operations.enrich import enrich_vault

    # Only its model name is used here (it labels the describe jobs); workers make the calls.
    describer = build_describer(runtime.settings)
    try:
        services = operator_services(runtime, describer=describer)
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


async def _migrate(opened: OpenedDatabase, args: argparse.Namespace) -> None:
    # alembic loads with this command only: an `admin` command against a database at head
    # needs none of it.
    from memory_db.migrate import current_revision

    print(f"database schema at revision {await current_revision(opened.database.engine)}")


MIGRATE = Subcommand(
    name="migrate", help="apply database migrations", opens=MIGRATED_DATABASE, run=_migrate
)

_JSON_HELP = "print one JSON object for scripts instead of a table"


def _backup_arguments(parser: argparse.ArgumentParser) -> None:
    add_json_option(parser, _JSON_HELP)
    parser.add_argument("dest", metavar="DEST", help="a new or empty directory")


def _restore_arguments(parser: argparse.ArgumentParser) -> None:
    add_json_option(parser, _JSON_HELP)
    parser.add_argument("src", metavar="SRC", help="a directory `memory-server backup` wrote")
    parser.add_argument(
        "--key-file",
        metavar="PATH",
        help="the backup key of the server that wrote the backup (default: "
        "MEMORY_BACKUP_KEY_FILE, else backup.key in MEMORY_DATA_DIR)",
    )


def _export_arguments(parser: argparse.ArgumentParser) -> None:
    add_json_option(parser, _JSON_HELP)
    parser.add_argument("--vault-owner", required=True, help="the owner of the vault")
    parser.add_argument("--vault", required=True, help="the vault's name, e.g. Library")
    parser.add_argument("dest", metavar="DEST", help="a new or empty directory")


def _import_arguments(parser: argparse.ArgumentParser) -> None:
    add_json_option(parser, _JSON_HELP)
    parser.add_argument("--owner", required=True, help="the identity that receives the images")
    parser.add_argument(
        "--vault", default="Library", help="the vault to fill (made if missing; default Library)"
    )
    parser.add_argument("src", metavar="SRC", help="a directory `memory-server export` wrote")


def _enrich_arguments(parser: argparse.ArgumentParser) -> None:
    add_json_option(parser, _JSON_HELP)
    parser.add_argument("--vault-owner", required=True, help="the owner of the vault")
    parser.add_argument("--vault", required=True, help="the vault's name, e.g. Library")
    parser.add_argument(
        "--what",
        action="append",
        choices=list(ENRICHMENT_KINDS),
        help="an enrichment to run (repeatable; default: all the server has switched on)",
    )


OPERATOR_COMMANDS = (
    Subcommand(
        name="backup",
        help="write a consistent backup (database dump, object bytes, manifest) to DEST",
        arguments=_backup_arguments,
        # Checked before the database is opened (or started): a refusal is immediate.
        check=_backup_destination_is_empty,
        opens=RUNTIME,
        run=_backup,
    ),
    Subcommand(
        name="restore",
        help="restore a backup into a new, empty data directory (MEMORY_DATA_DIR)",
        arguments=_restore_arguments,
        # It fills an empty data directory: there is no database to open yet.
        opens=SETTINGS,
        run=_restore,
    ),
    Subcommand(
        name="export",
        help="write one vault (originals, assets.jsonl, vault.json) to DEST in an open format",
        arguments=_export_arguments,
        opens=RUNTIME,
        run=_export,
    ),
    Subcommand(
        name="import",
        help="save a vault export into OWNER's vault (idempotent: a second run adds nothing)",
        arguments=_import_arguments,
        opens=RUNTIME,
        run=_import,
    ),
    Subcommand(
        name="enrich",
        help="queue the enrichments (OCR, generated context, EXIF capture, near-duplicate "
        "pairs) of every image "
        "of one vault again",
        arguments=_enrich_arguments,
        opens=RUNTIME,
        run=_enrich,
    ),
)
"""``backup``, ``restore``, ``export``, ``import`` and ``enrich``, in the order of ``--help``."""
