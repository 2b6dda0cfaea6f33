"""One vault in an open format (``memory-server export`` / ``import``): no lock-in.

An export is a directory (docs/runbooks/export-vault.md describes every field):

- ``originals/<asset id>.<ext>``: each live image's original bytes, exactly as saved;
- ``assets.jsonl``: one JSON object per image (id, file, title, description, alt text, tags,
  project and folder with its path, source, MIME type, SHA-256, size, dimensions, created time);
- ``vault.json``: the vault's projects and folders, counts, and the size and SHA-256 of
  ``assets.jsonl``. It is written last: a directory without it is not a complete export.

Images in the trash are not exported. Import brings an export into one vault of another
identity through the normal save workflow, so quota, dedupe, validation and provenance apply
and the worker embeds the images there with that server's model. Projects and folders are
matched by name and path (created when missing), and every save carries an idempotency key
made of the target vault and the exported id: running an import twice adds nothing.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio

from memory_db import MemoryDbError, ObjectNotFound
from memory_db.repositories import AssetFilter
from memory_db.repositories.records import FolderRecord, StoredAsset, VaultRecord
from memory_tools.access import Caller
from memory_tools.errors import InvalidInputFailure, NotFoundFailure, ToolFailure
from memory_tools.ingest.save import AssetSaver, SaveRequest
from memory_tools.operations import admin
from memory_tools.operations.backup import (
    absolute_path,
    clear_directory,
    file_digest,
    require_empty_directory,
    write_json_atomically,
)
from memory_tools.progress import ProgressCallback, no_progress_bar
from memory_tools.services import MemoryServices
from memory_tools.workflows.projects import create_folder, create_project

EXPORT_FORMAT = "image-memory-vault-export"
EXPORT_FORMAT_VERSION = 1
VAULT_FILE = "vault.json"
ASSETS_FILE = "assets.jsonl"
ORIGINALS = "originals"
_PAGE = 200
_EXTENSIONS = {"image/jpeg": "jpg", "image/png": "png", "image/webp": "webp", "image/gif": "gif"}


@dataclass
class ExportReport:
    """What ``export`` wrote."""

    destination: Path
    vault: str
    projects: int = 0
    folders: int = 0
    assets: int = 0
    bytes: int = 0
    # Images whose bytes the store did not have or had wrong: left out, named for the operator.
    skipped: list[str] = field(default_factory=list[str])


@dataclass
class ImportReport:
    """What ``import`` did."""

    owner: str
    vault: str
    projects_created: int = 0
    folders_created: int = 0
    saved: int = 0
    replayed: int = 0
    deduplicated: int = 0
    bytes: int = 0


# --- export --------------------------------------------------------------------------------------


async def _owned_vault(services: MemoryServices, owner: str, vault: str) -> VaultRecord:
    """The vault ``vault`` of ``owner`` (owned, not merely shared), or ``not_found``."""
    async with services.database.unit_of_work() as uow:
        return await admin.require_owned_vault(uow, owner, vault)


def _folder_paths(folders: list[FolderRecord]) -> dict[str, str]:
    """Each folder's path from its project's root (``Day 1/Morning``)."""
    by_id = {folder.id: folder for folder in folders}
    paths: dict[str, str] = {}

    def path_of(folder: FolderRecord) -> str:
        if folder.id not in paths:
            parent = by_id.get(folder.parent_id) if folder.parent_id else None
            paths[folder.id] = folder.name if parent is None else f"{path_of(parent)}/{folder.name}"
        return paths[folder.id]

    for folder in folders:
        path_of(folder)
    return paths


async def export_vault(
    services: MemoryServices,
    owner: str,
    vault: str,
    destination: Path,
    *,
    progress: ProgressCallback = no_progress_bar,
) -> ExportReport:
    """Write ``owner``'s vault ``vault`` to ``destination`` (new or empty).

    Refuses an unknown owner, a vault the owner does not own, or a non-empty destination
    before writing anything; a failure later removes what was written.
    """
    record = await _owned_vault(services, owner, vault)
    scope = record.scope
    destination = absolute_path(destination)
    require_empty_directory(destination, "export destination")
    async with services.database.unit_of_work() as uow:
        projects = await uow.projects.list([scope], include_archived=True)
        folders = await uow.folders.list_vault(scope)
    summaries = await admin.list_vaults(services.database, record.owner_identity)
    total = next((s.assets for s in summaries if s.id == record.id), 0)
    created = not destination.exists()
    # Private images and their metadata: readable by the exporting user only (as a backup).
    destination.mkdir(parents=True, exist_ok=True, mode=0o700)
    (destination / ORIGINALS).mkdir(mode=0o700)
    report = ExportReport(destination=destination, vault=record.handle)
    report.projects, report.folders = len(projects), len(folders)
    names = {project.id: project.name for project in projects}
    paths = _folder_paths(folders)
    try:
        assets_fd = os.open(destination / ASSETS_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(assets_fd, "w", encoding="utf-8") as lines:
            async for stored, sha256 in _live_assets(services, record):
                entry = await _export_one(services, stored, sha256, destination, names, paths)
                if entry is None:
                    report.skipped.append(stored.asset.id)
                else:
                    lines.write(json.dumps(entry, ensure_ascii=False) + "\n")
                    report.assets += 1
                    report.bytes += entry["bytes"]
                progress(report.assets + len(report.skipped), total, "exporting images")
        size, digest = file_digest(destination / ASSETS_FILE)
        document = {
            "format": EXPORT_FORMAT,
            "formatVersion": EXPORT_FORMAT_VERSION,
            "exportedAt": datetime.now(UTC).isoformat(),
            "serverVersion": version("memory-tools"),
            "vault": record.handle,
            "projects": [
                {
                    "id": p.id,
                    "name": p.name,
                    "description": p.description,
                    "status": p.status,
                    "createdAt": p.created_at.isoformat(),
                }
                for p in projects
            ],
            "folders": [
                {
                    "id": f.id,
                    "projectId": f.project_id,
                    "parentId": f.parent_id,
                    "name": f.name,
                    "path": paths[f.id],
                }
                for f in folders
            ],
            "counts": {"assets": report.assets, "bytes": report.bytes},
            "assetsFile": {"path": ASSETS_FILE, "entries": report.assets, "bytes": size,
                           "sha256": digest},
        }  # fmt: skip
        write_json_atomically(destination / VAULT_FILE, document)
    except BaseException:
        clear_directory(destination, created)
        raise
    return report


async def _live_assets(
    services: MemoryServices, record: VaultRecord
) -> AsyncIterator[tuple[StoredAsset, str]]:
    """The vault's live images (not in the trash) with their originals' SHA-256, oldest first."""
    after: tuple[datetime, str] | None = None
    while True:
        async with services.database.unit_of_work() as uow:
            page = await uow.assets.list_visible(
                [record.scope], AssetFilter(), newest_first=False, limit=_PAGE, after=after
            )
            objects = await uow.objects.get_many(
                [(s.asset.owner_identity, s.asset.object_id) for s in page]
            )
        for stored in page:
            found = objects.get((stored.asset.owner_identity, stored.asset.object_id))
            yield stored, "" if found is None else found.sha256
        if len(page) < _PAGE:
            return
        after = (page[-1].asset.created_at, page[-1].asset.id)


async def _export_one(
    services: MemoryServices,
    stored: StoredAsset,
    sha256: str,
    destination: Path,
    projects: dict[str, str],
    paths: dict[str, str],
) -> dict[str, Any] | None:
    """Copy one original into the export and describe it; None if the store's bytes are wrong."""
    asset = stored.asset
    extension = _EXTENSIONS.get(stored.mime_type, "bin")
    relative = f"{ORIGINALS}/{asset.id}.{extension}"
    if stored.storage_key is None:
        return None
    digest = hashlib.sha256()
    size = 0
    path = destination / relative
    path.touch(mode=0o600, exist_ok=False)
    try:
        async with await anyio.open_file(path, "wb") as handle:
            async for chunk in services.store.get_stream(stored.storage_key):
                digest.update(chunk)
                size += len(chunk)
                await handle.write(chunk)
    except ObjectNotFound:
        path.unlink(missing_ok=True)
        return None
    if size != stored.bytes or digest.hexdigest() != sha256:
        path.unlink(missing_ok=True)
        return None
    return {
        "id": asset.id,
        "file": relative,
        "title": asset.title,
        "description": asset.description,
        "altText": asset.alt_text,
        "originalFileName": asset.original_file_name,
        "tags": asset.tags,
        "project": (
            None
            if asset.project_id is None
            else {"id": asset.project_id, "name": projects.get(asset.project_id)}
        ),
        "folder": (
            None
            if asset.folder_id is None
            else {"id": asset.folder_id, "path": paths.get(asset.folder_id)}
        ),
        "sourceKind": asset.source_kind,
        "sourceUrl": asset.source_url,
        "sourceRef": asset.source_ref,
        "mimeType": stored.mime_type,
        "sha256": digest.hexdigest(),
        "bytes": size,
        "width": stored.width,
        "height": stored.height,
        "createdAt": asset.created_at.isoformat(),
    }


# --- import --------------------------------------------------------------------------------------


def _refused(source: Path, detail: str) -> InvalidInputFailure:
    return InvalidInputFailure(f"{source} is not a usable vault export: {detail}")


# vault.json lists projects and folders: a few MB for the largest vaults.
_MAX_VAULT_FILE = 64 << 20


def _require_plain_file(source: Path, name: str, limit: int | None = None) -> None:
    """Refuse ``name`` in the export unless it is a regular file, at most ``limit`` bytes.

    A link could point anywhere, a FIFO or ``/dev/zero`` would never end. A missing file is
    left to the reader.
    """
    try:
        status = (source / name).lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISREG(status.st_mode):
        raise _refused(source, f"{name} is not a regular file")
    if limit is not None and status.st_size > limit:
        raise _refused(source, f"{name} is larger than {limit} bytes")


def read_export(source: Path) -> dict[str, Any]:
    """``vault.json`` of the export in ``source``, with ``assets.jsonl`` checked against it."""
    _require_plain_file(source, VAULT_FILE, _MAX_VAULT_FILE)
    _require_plain_file(source, ASSETS_FILE)
    try:
        document = json.loads((source / VAULT_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise _refused(source, f"{VAULT_FILE} is missing (an export writes it last)") from None
    except (OSError, ValueError):
        raise _refused(source, f"{VAULT_FILE} is not valid JSON") from None
    if not isinstance(document, dict) or document.get("format") != EXPORT_FORMAT:
        raise _refused(source, f"{VAULT_FILE} does not describe an {EXPORT_FORMAT}")
    if document.get("formatVersion") != EXPORT_FORMAT_VERSION:
        raise _refused(source, f"format version {document.get('formatVersion')!r} is unknown")
    listing = document.get("assetsFile") or {}
    assets = source / ASSETS_FILE
    if not assets.is_file() or file_digest(assets) != (listing.get("bytes"), listing.get("sha256")):
        raise _refused(source, f"{ASSETS_FILE} is missing or does not match {VAULT_FILE}")
    return document


# An entry is a few kB (the save's limits); a longer line is not an export's.
_MAX_LINE = 1 << 20
_TEXT_FIELDS = ("file", "sha256", "title", "description", "altText", "sourceKind", "sourceUrl")
_OBJECT_FIELDS = ("project", "folder", "sourceRef")


def _malformed(entry: dict[str, Any]) -> str | None:
    """The first field of ``entry`` whose type an export never writes, if any."""
    for name in _TEXT_FIELDS:
        if entry.get(name) is not None and not isinstance(entry[name], str):
            return name
    for name in _OBJECT_FIELDS:
        if entry.get(name) is not None and not isinstance(entry[name], dict):
            return name
    tags = entry.get("tags")
    if tags is not None and not (isinstance(tags, list) and all(isinstance(t, str) for t in tags)):
        return "tags"
    return None


def _entries(source: Path) -> Iterator[dict[str, Any]]:
    with (source / ASSETS_FILE).open(encoding="utf-8") as lines:
        number = 0
        while line := lines.readline(_MAX_LINE + 1):
            number += 1
            if len(line) > _MAX_LINE:
                raise _refused(source, f"{ASSETS_FILE} line {number} is too long")
            try:
                entry = json.loads(line)
            except ValueError:
                raise _refused(source, f"{ASSETS_FILE} line {number} is not JSON") from None
            if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
                raise _refused(source, f"{ASSETS_FILE} line {number} has no id")
            if (name := _malformed(entry)) is not None:
                raise _refused(source, f"{ASSETS_FILE} line {number} has a malformed {name}")
            yield entry


def _original(source: Path, entry: dict[str, Any], limit: int) -> bytes:
    """The original an entry names, checked against its SHA-256 (no path leaves the export).

    Only a regular file directly in ``originals/`` (itself no symlink) of at most ``limit``
    bytes is read: a symlink could point anywhere, a FIFO would block the import forever.
    """
    relative = entry.get("file")
    expected = f"{ORIGINALS}/{entry['id']}."
    if (
        not isinstance(relative, str)
        or not relative.startswith(expected)
        or "/" in relative[len(ORIGINALS) + 1 :]
        or "\0" in relative
    ):
        raise _refused(source, f"image {entry['id']!r} names an unexpected file")
    if (source / ORIGINALS).is_symlink():
        raise _refused(source, f"{ORIGINALS} is a symbolic link, not a directory of the export")
    try:
        fd = os.open(source / relative, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise _refused(source, f"{relative} is missing") from None
    except OSError:  # ELOOP: a symbolic link
        raise _refused(source, f"{relative} is not a regular file") from None
    with os.fdopen(fd, "rb") as handle:
        status = os.fstat(handle.fileno())
        if not stat.S_ISREG(status.st_mode):
            raise _refused(source, f"{relative} is not a regular file")
        if status.st_size > limit:
            raise _refused(source, f"{relative} is larger than the upload limit ({limit} bytes)")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise _refused(source, f"{relative} is larger than the upload limit ({limit} bytes)")
    if hashlib.sha256(data).hexdigest() != entry.get("sha256"):
        raise _refused(source, f"{relative} does not match its SHA-256 in {ASSETS_FILE}")
    return data


def _source_ref(entry: dict[str, Any]) -> dict[str, Any]:
    """The exported source ref plus where the image came from, within the save's limits."""
    ref = dict(entry.get("sourceRef") or {})
    extra = {"exportedAssetId": entry["id"], "exportedSourceKind": entry.get("sourceKind")}
    if isinstance(entry.get("sourceUrl"), str):
        extra["exportedSourceUrl"] = entry["sourceUrl"]
    for key, value in extra.items():
        if len(ref) < 20 and value is not None:
            ref.setdefault(key, value)
    return ref


async def import_vault(
    services: MemoryServices,
    owner: str,
    vault: str,
    source: Path,
    *,
    progress: ProgressCallback = no_progress_bar,
) -> ImportReport:
    """Save every image of the export in ``source`` into ``owner``'s vault ``vault``.

    The vault is created when the owner has none by that name. Each image goes through the
    save workflow as the owner (provenance records the operator's import), with the
    idempotency key ``import:<vault>:<exported id>``, so a second run replays instead of
    adding. The export is checked (format, checksums) before anything is written.
    """
    source = absolute_path(source)
    document = read_export(source)
    async with services.database.unit_of_work() as uow:
        identity = await admin.require_identity(uow, owner)
    target = identity.owner_identity
    try:
        record = await _owned_vault(services, target, vault)
    except NotFoundFailure:
        if "/" in vault:
            raise
        record = await admin.create_vault(services.database, target, vault)
    report = ImportReport(owner=target, vault=record.handle)
    caller = Caller(target, admin.OPERATOR, frozenset({"read", "write"}))
    projects, folders = await _placements(services, caller, record, document, report)
    total = int((document.get("assetsFile") or {}).get("entries") or 0)
    saver = AssetSaver(services)
    for done, entry in enumerate(_entries(source), start=1):
        data = await anyio.to_thread.run_sync(
            _original, source, entry, services.settings.asset_max_bytes
        )
        project = entry.get("project") or {}
        folder = entry.get("folder") or {}
        project_id = projects.get(project.get("id", ""))
        request = SaveRequest(
            vault=record.handle,
            image_base64=base64.b64encode(data).decode("ascii"),
            title=entry.get("title"),
            description=entry.get("description"),
            alt_text=entry.get("altText"),
            tags=list(entry.get("tags") or []),
            source_ref=_source_ref(entry),
            project_id=project_id,
            folder_id=folders.get(folder.get("id", "")) if project_id else None,
            idempotency_key=f"import:{record.id}:{entry['id']}",
            file_name=entry.get("originalFileName"),
        )
        try:
            result = await saver.save(caller, request)
        except ToolFailure as failure:
            raise type(failure)(f"image {entry['id']}: {failure.message}") from failure
        if result.replayed:
            report.replayed += 1
        else:
            report.saved += 1
            report.deduplicated += int(result.deduplicated)
            report.bytes += len(data)
        progress(done, total, "importing images")
    return report


async def _placements(
    services: MemoryServices,
    caller: Caller,
    record: VaultRecord,
    document: dict[str, Any],
    report: ImportReport,
) -> tuple[dict[str, str], dict[str, str]]:
    """Exported project and folder ids mapped to the target vault's, created when missing."""
    scope = record.scope
    async with services.database.unit_of_work() as uow:
        existing = await uow.projects.list([scope], include_archived=True)
        existing_folders = await uow.folders.list_vault(scope)
    by_name = {p.name.lower(): p.id for p in existing}
    paths = _folder_paths(existing_folders)
    by_path = {(f.project_id, paths[f.id].lower()): f.id for f in existing_folders}
    projects: dict[str, str] = {}
    for project in document.get("projects") or []:
        name = str(project.get("name") or "")
        if name.lower() not in by_name:
            async with services.database.unit_of_work() as uow:
                view = await create_project(
                    uow, caller, services, vault=record.handle, name=name,
                    description=project.get("description"),
                )  # fmt: skip
            by_name[name.lower()] = view.project_id
            report.projects_created += 1
        projects[str(project.get("id"))] = by_name[name.lower()]
    folders: dict[str, str] = {}
    exported = sorted(document.get("folders") or [], key=lambda f: str(f.get("path")).count("/"))
    for folder in exported:
        project_id = projects.get(str(folder.get("projectId")))
        if project_id is None:
            continue
        name = str(folder.get("name"))
        path = str(folder.get("path") or name)
        parent_path = path.rpartition("/")[0]
        parent_id = by_path.get((project_id, parent_path.lower())) if parent_path else None
        # Where the folder really lands: under its parent when that was found, else at the
        # project's root. A hand-edited path, or a parent left out, must not make a rerun try
        # to create it again.
        real = name if parent_id is None else f"{paths[parent_id]}/{name}"
        key = (project_id, real.lower())
        if key not in by_path:
            try:
                async with services.database.unit_of_work() as uow:
                    view = await create_folder(
                        uow, caller, services, vault=record.handle, project_id=project_id,
                        parent_id=parent_id, name=name,
                    )  # fmt: skip
            except MemoryDbError as exc:  # pragma: no cover - workflows translate these
                raise InvalidInputFailure(str(exc)) from exc
            by_path[key] = view.folder_id
            paths[view.folder_id] = real
            report.folders_created += 1
        by_path.setdefault((project_id, path.lower()), by_path[key])  # its children's parent
        folders[str(folder.get("id"))] = by_path[key]
    return projects, folders
