"""Backups of a whole server (``memory-server backup`` / ``restore``).

A backup is a directory:

- ``database.dump``: the database in ``pg_dump``'s custom format, taken from an exported
  snapshot (never a copy of a live data directory);
- ``objects/<storage key>``: the bytes of every stored object that snapshot lists (local store
  only: with S3 the bucket keeps its own versions and replicas, and the manifest names it);
- ``files.jsonl``: one line per file above, ``{"path", "bytes", "sha256"}``;
- ``manifest.json``: what the backup is (format, server version, schema revision, time, the
  database and store it came from, counts) and the size and SHA-256 of ``files.jsonl``. It is
  written last, atomically: a directory without it is not a backup.
- ``manifest.hmac``: the manifest's HMAC-SHA256 under the backup key, which is kept outside
  every backup (:mod:`memory_tools.operations.backup_key`).

Consistency: the object list comes from the same snapshot ``pg_dump`` dumps, so every object row
in the dump that should have bytes has them in the backup. Objects saved after the snapshot are
left out with their rows (reconciliation treats their bytes as orphans). An object whose bytes
are missing or wrong in the store is reported (``missing``), never copied wrong; one being
purged while the backup runs (status ``deleting``) may legitimately be gone.

``restore`` checks the manifest's signature with the backup key and every file against the
manifest first, then restores into a new data directory only (the dump checked and restored
without superuser rights: :mod:`memory_db.guarded_restore`), migrates an older schema, and
writes the objects through the object store.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio

from memory_db import MemorySettings, Runtime
from memory_db.dumps import (
    DumpFailed,
    DumpSnapshot,
    SnapshotObject,
    database_target,
    pg_dump,
    restore_into_embedded,
    revision_is_known,
)
from memory_db.errors import InvalidStorageKey, ObjectNotFound, StorageError
from memory_db.files import fsync_dir
from memory_db.guarded_restore import DumpRefused
from memory_db.logs import get_logger
from memory_db.runtime import build_object_store, load_signing_secret
from memory_db.storage import UrlSigner, content_type_for_key, validate_object_key
from memory_tools.errors import (
    ConflictFailure,
    InvalidInputFailure,
    ToolFailure,
    Unavailable,
)
from memory_tools.operations.backup_key import (
    SIGNATURE,
    check_signature,
    load_or_create_backup_key,
    read_backup_key,
    signature_document,
)
from memory_tools.progress import ProgressCallback, no_progress_bar

log = get_logger(__name__)

BACKUP_FORMAT = "image-memory-backup"
# 2: signed (manifest.hmac). Version 1 backups carried no signature and are not restored.
BACKUP_FORMAT_VERSION = 2
MANIFEST = "manifest.json"
FILES = "files.jsonl"
DUMP = "database.dump"
OBJECTS = "objects"
_CHUNK = 1 << 20


@dataclass
class BackupReport:
    """What ``backup`` wrote."""

    destination: Path
    schema_revision: str
    database: str  # "embedded" or "external"
    store: str  # "local" or "s3"
    objects_included: bool
    assets: int = 0
    objects: int = 0
    files: int = 0
    bytes: int = 0
    # Objects whose bytes the store did not have (or had wrong): ids, for the operator.
    missing: list[str] = field(default_factory=list[str])
    # Objects purged (status ``deleting``) between the snapshot and the copy: harmless.
    purged_meanwhile: int = 0


@dataclass
class RestoreReport:
    """What ``restore`` did."""

    data_dir: Path
    backup_revision: str
    schema_revision: str
    files: int = 0  # object files written (originals and previews)
    bytes: int = 0


def require_empty_directory(path: Path, what: str, *, allowed: tuple[str, ...] = ()) -> None:
    """Refuse ``path`` unless missing or empty (``allowed`` names aside); changes nothing."""
    if not path.exists():
        if path.is_symlink():  # mkdir would fail on it with a traceback
            raise ConflictFailure(f"{what} {path} is a symbolic link to nothing")
        return
    if not path.is_dir():
        raise ConflictFailure(f"{what} {path} is not a directory")
    with os.scandir(path) as entries:
        if any(entry.name not in allowed for entry in entries):
            raise ConflictFailure(f"{what} {path} is not empty; choose a new or empty directory")


def absolute_path(path: Path) -> Path:
    """``path`` with ``~`` expanded, made absolute (without touching the filesystem)."""
    return Path(os.path.abspath(os.path.expanduser(path)))


def _open_destination(destination: Path) -> tuple[Path, bool]:
    """The backup directory, checked empty and made private; whether this call made it."""
    destination = absolute_path(destination)
    require_empty_directory(destination, "backup destination")
    created = not destination.exists()
    destination.mkdir(parents=True, exist_ok=True, mode=0o700)
    return destination, created


def clear_directory(path: Path, created: bool) -> None:
    """Remove what a failed run wrote: the directory if it made it, else its contents."""
    if created:
        shutil.rmtree(path, ignore_errors=True)
        return
    with contextlib.suppress(FileNotFoundError), os.scandir(path) as entries:
        for entry in list(entries):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)


def json_bytes(document: dict[str, Any]) -> bytes:
    """``document`` as the indented UTF-8 JSON a backup writes."""
    return (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def write_bytes_atomically(path: Path, content: bytes) -> None:
    """Write ``content`` under a draft name, fsync it, then rename it into place."""
    draft = path.with_name(f".{path.name}.tmp")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(content)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(draft, path)
    fsync_dir(path.parent)


def write_json_atomically(path: Path, document: dict[str, Any]) -> None:
    """Write ``document`` under a draft name, fsync it, then rename it into place."""
    write_bytes_atomically(path, json_bytes(document))


def _write_signed_manifest(destination: Path, key: bytes, manifest: dict[str, Any]) -> None:
    """The signature first, then the manifest: a directory with a manifest is complete."""
    content = json_bytes(manifest)
    write_bytes_atomically(destination / SIGNATURE, json_bytes(signature_document(key, content)))
    write_bytes_atomically(destination / MANIFEST, content)


def file_digest(path: Path) -> tuple[int, str]:
    """Size and SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


class _FileList:
    """``files.jsonl``, appended as files are written; its size and SHA-256 go in the manifest."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._handle = os.fdopen(
            os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8"
        )
        self.entries = 0
        self.total_bytes = 0

    def add(self, relative: str, size: int, sha256: str) -> None:
        line = json.dumps({"path": relative, "bytes": size, "sha256": sha256})
        self._handle.write(line + "\n")
        self.entries += 1
        self.total_bytes += size

    def close(self) -> None:
        if not self._handle.closed:
            self._handle.flush()
            os.fsync(self._handle.fileno())
            self._handle.close()


# --- backup --------------------------------------------------------------------------------------


async def create_backup(
    runtime: Runtime, destination: Path, *, progress: ProgressCallback = no_progress_bar
) -> BackupReport:
    """Write a backup of the server ``runtime`` opens into ``destination`` (new or empty).

    A failure removes what was written, so nothing is left that could pass for a backup.
    """
    settings = runtime.settings
    # Made (or read) before anything is written: a key that cannot be read refuses the backup.
    key = await anyio.to_thread.run_sync(load_or_create_backup_key, settings.backup_key_path)
    destination, created = await anyio.to_thread.run_sync(_open_destination, destination)
    local = settings.asset_storage_provider != "s3"
    report = BackupReport(
        destination=destination,
        schema_revision="",
        database="embedded" if runtime.embedded is not None else "external",
        store="local" if local else "s3",
        objects_included=local,
    )
    files = _FileList(destination / FILES)
    try:
        await _back_up(runtime, destination, files, report, progress)
        files.close()
        size, digest = await anyio.to_thread.run_sync(file_digest, files.path)
        manifest = _manifest(settings, report, files, size, digest)
        await anyio.to_thread.run_sync(_write_signed_manifest, destination, key, manifest)
    except BaseException:
        files.close()
        clear_directory(destination, created)
        raise
    log.info(
        "backup_written",
        objects=report.objects,
        files=report.files,
        bytes=report.bytes,
        missing=len(report.missing),
        schema_revision=report.schema_revision,
    )
    return report


async def _back_up(
    runtime: Runtime,
    destination: Path,
    files: _FileList,
    report: BackupReport,
    progress: ProgressCallback,
) -> None:
    target = database_target(runtime.settings, runtime.embedded)
    dump_path = destination / DUMP
    try:
        async with DumpSnapshot(runtime.database) as snapshot:
            report.schema_revision = await snapshot.schema_revision() or ""
            counts = await snapshot.counts()
            report.assets = counts.assets
            total = counts.objects_with_bytes if report.objects_included else 0
            progress(0, total, "dumping the database")
            # The dump and the copy run together; the snapshot stays open until both end.
            async with anyio.create_task_group() as group:
                group.start_soon(_dump, target, dump_path, snapshot.id)
                if report.objects_included:
                    await _copy_objects(
                        runtime, snapshot.objects_with_bytes(), destination, files, report,
                        lambda done: progress(done, total, "copying objects"),
                    )  # fmt: skip
    except BaseExceptionGroup as group:
        # One task's failure cancels the other: report the failure, not the cancellation.
        raise _first_failure(group) from None
    dump_path.chmod(0o600)
    size, digest = await anyio.to_thread.run_sync(file_digest, dump_path)
    files.add(DUMP, size, digest)
    report.files = files.entries
    report.bytes = files.total_bytes


def _first_failure(group: BaseExceptionGroup[BaseException]) -> BaseException:
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            return _first_failure(exc)
        if not isinstance(exc, anyio.get_cancelled_exc_class()):
            return exc
    return group


async def _dump(target: Any, dump_path: Path, snapshot_id: str) -> None:
    try:
        await pg_dump(target, dump_path, snapshot=snapshot_id)
    except DumpFailed as exc:
        raise Unavailable(f"the database dump failed: {exc}") from exc


async def _copy_objects(
    runtime: Runtime,
    objects: AsyncIterator[SnapshotObject],
    destination: Path,
    files: _FileList,
    report: BackupReport,
    advance: Callable[[int], None],
) -> None:
    done = 0
    async for stored in objects:
        keys: list[tuple[str, str | None]] = [(stored.storage_key, stored.sha256)]
        if stored.preview_storage_key is not None:
            keys.append((stored.preview_storage_key, stored.preview_sha256))
        copied: list[tuple[str, int, str]] = []
        problem = False
        for key, expected in keys:
            try:
                size, digest = await _copy_object(runtime, key, destination)
            except ObjectNotFound:
                problem = True
                break
            if expected is not None and digest != expected:
                (destination / OBJECTS / key).unlink(missing_ok=True)
                problem = True
                break
            copied.append((f"{OBJECTS}/{key}", size, digest))
        if problem:
            for relative, _size, _digest in copied:
                (destination / relative).unlink(missing_ok=True)
            if stored.status == "deleting":
                report.purged_meanwhile += 1
            else:
                report.missing.append(stored.id)
                log.warning("backup_object_missing", object_id=stored.id)
        else:
            for relative, size, digest in copied:
                files.add(relative, size, digest)
            report.objects += 1
        done += 1
        advance(done)


async def _copy_object(runtime: Runtime, key: str, destination: Path) -> tuple[int, str]:
    """Stream one object into the backup; its size and SHA-256 as written."""
    path = destination / OBJECTS / validate_object_key(key)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    digest = hashlib.sha256()
    size = 0
    try:
        async with await anyio.open_file(path, "wb") as handle:
            async for chunk in runtime.store.get_stream(key):
                digest.update(chunk)
                size += len(chunk)
                await handle.write(chunk)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    path.chmod(0o600)  # images are private, whatever the directory's permissions
    return size, digest.hexdigest()


def _manifest(
    settings: MemorySettings, report: BackupReport, files: _FileList, size: int, digest: str
) -> dict[str, Any]:
    store: dict[str, Any] = {"provider": report.store, "objectsIncluded": report.objects_included}
    if report.store == "s3":
        store["bucket"] = settings.asset_s3_bucket
        store["endpoint"] = settings.asset_s3_endpoint
    return {
        "format": BACKUP_FORMAT,
        "formatVersion": BACKUP_FORMAT_VERSION,
        "createdAt": datetime.now(UTC).isoformat(),
        "serverVersion": version("memory-tools"),
        "schemaRevision": report.schema_revision,
        "database": {"source": report.database, "dump": DUMP, "dumpFormat": "pg_dump custom"},
        "objectStore": store,
        "counts": {
            "assets": report.assets,
            "objects": report.objects,
            "missingObjects": len(report.missing),
            "files": report.files,
            "bytes": report.bytes,
        },
        "missingObjectIds": report.missing,
        "fileList": {"path": FILES, "entries": files.entries, "bytes": size, "sha256": digest},
    }


# --- verify and restore --------------------------------------------------------------------------


def _corrupted(source: Path, detail: str) -> InvalidInputFailure:
    return InvalidInputFailure(f"backup {source} is corrupted: {detail}; nothing was restored")


def read_manifest(source: Path, key: bytes) -> dict[str, Any]:
    """The manifest of the backup in ``source``, checked for its signature and format."""
    path = source / MANIFEST
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise _corrupted(source, f"{MANIFEST} is not a regular file of the backup")
    if not path.is_file():
        raise InvalidInputFailure(
            f"{source} is not a complete backup: {MANIFEST} is missing (a backup writes it last)"
        )
    content = path.read_bytes()
    check_signature(source, key, content)
    try:
        manifest = json.loads(content.decode("utf-8"))
    except ValueError:
        raise _corrupted(source, f"{MANIFEST} is not valid JSON") from None
    if not isinstance(manifest, dict) or manifest.get("format") != BACKUP_FORMAT:
        raise _corrupted(source, f"{MANIFEST} does not describe an {BACKUP_FORMAT}")
    if manifest.get("formatVersion") != BACKUP_FORMAT_VERSION:
        raise InvalidInputFailure(
            f"backup format version {manifest.get('formatVersion')!r} is not supported by this "
            f"build (it reads version {BACKUP_FORMAT_VERSION})"
        )
    return manifest


def _entry_path(source: Path, entry: Any) -> tuple[str, Path, int, str]:
    """Check one ``files.jsonl`` entry names a file a backup writes (no path escapes)."""
    if not (
        isinstance(entry, dict)
        and isinstance(entry.get("path"), str)
        and isinstance(entry.get("bytes"), int)
        and isinstance(entry.get("sha256"), str)
    ):
        raise _corrupted(source, f"{FILES} has a malformed line")
    relative: str = entry["path"]
    if relative != DUMP:
        key = relative.removeprefix(f"{OBJECTS}/")
        try:
            if key == relative:
                raise InvalidStorageKey("not under objects/")
            validate_object_key(key)
        except InvalidStorageKey:
            raise _corrupted(source, f"{FILES} names an unexpected file {relative!r}") from None
    return relative, source / relative, entry["bytes"], entry["sha256"]


def _plain_file(source: Path, relative: str) -> bool:
    """Whether ``relative`` is a regular file under ``source`` through no symbolic link.

    A backup's checksums are its author's: a link could point at any file this user can read.
    """
    path = source
    for part in relative.split("/"):
        path = path / part
        if path.is_symlink():
            return False
    return stat.S_ISREG(path.lstat().st_mode)


def verify_backup(
    source: Path, key: bytes, *, progress: ProgressCallback = no_progress_bar
) -> dict[str, Any]:
    """Check the manifest's signature under ``key``, then every file against the manifest.

    The manifest, or a refusal naming the signature, or the first file that is missing, of the
    wrong size or of the wrong SHA-256.
    """
    manifest = read_manifest(source, key)
    listing = manifest.get("fileList") or {}
    files_path = source / FILES
    if not files_path.is_file():
        raise _corrupted(source, f"{FILES} is missing")
    if not _plain_file(source, FILES):
        raise _corrupted(source, f"{FILES} is not a regular file of the backup")
    if file_digest(files_path) != (listing.get("bytes"), listing.get("sha256")):
        raise _corrupted(source, f"{FILES} does not match its checksum in {MANIFEST}")
    total = int(listing.get("entries") or 0)
    seen_dump = False
    with files_path.open(encoding="utf-8") as lines:
        for done, line in enumerate(lines, start=1):
            try:
                entry = json.loads(line)
            except ValueError:
                raise _corrupted(source, f"{FILES} line {done} is not JSON") from None
            relative, path, size, sha256 = _entry_path(source, entry)
            seen_dump = seen_dump or relative == DUMP
            if not path.exists():
                raise _corrupted(source, f"{relative} is missing")
            if not _plain_file(source, relative):
                raise _corrupted(source, f"{relative} is not a regular file of the backup")
            if file_digest(path) != (size, sha256):
                raise _corrupted(source, f"{relative} does not match its SHA-256 in {FILES}")
            progress(done, total, "checking files")
    if not seen_dump:
        raise _corrupted(source, f"{DUMP} is not listed in {FILES}")
    return manifest


async def restore_backup(
    settings: MemorySettings,
    source: Path,
    *,
    key_file: Path | None = None,
    verify_progress: ProgressCallback = no_progress_bar,
    restore_progress: ProgressCallback = no_progress_bar,
) -> RestoreReport:
    """Restore the backup in ``source`` into the new, empty data directory the settings name.

    ``key_file``: the backup key (default: ``settings.backup_key_path``; a data directory that
    holds only that key counts as empty). Afterwards the restored data directory keeps the key
    (unless ``MEMORY_BACKUP_KEY_FILE`` names it elsewhere), so its backups are signed alike.

    Refuses (changing nothing) a data directory that holds anything, an external database, a
    backup without a valid signature under the key, one that fails verification, one from a
    newer schema, or one whose dump holds what our schema never creates. A failure after the
    checks removes what was written, leaving the data directory as it was.
    """
    source = absolute_path(source)
    if settings.memory_database_url is not None:
        raise InvalidInputFailure(
            "restore writes a new embedded database: unset MEMORY_DATABASE_URL (to restore into "
            "another PostgreSQL, use pg_restore on database.dump; see the backup runbook)"
        )
    data_dir = absolute_path(settings.memory_data_dir)
    default_key = absolute_path(settings.memory_data_dir / "backup.key")
    key_path = absolute_path(key_file or settings.backup_key_path)
    allowed = (default_key.name,) if key_path == default_key else ()
    require_empty_directory(data_dir, "data directory (MEMORY_DATA_DIR)", allowed=allowed)
    key = read_backup_key(key_path)
    manifest = await anyio.to_thread.run_sync(
        lambda: verify_backup(source, key, progress=verify_progress)
    )
    revision = str(manifest.get("schemaRevision") or "")
    if not revision_is_known(revision):
        raise InvalidInputFailure(
            f"the backup's schema revision {revision!r} is newer than this build knows: "
            "restore it with the server version that wrote it"
        )
    created = not data_dir.exists()
    report = RestoreReport(data_dir=data_dir, backup_revision=revision, schema_revision="")
    try:
        try:
            _before, after = await restore_into_embedded(settings, source / DUMP, revision)
        except DumpRefused as exc:
            raise InvalidInputFailure(
                f"backup {source} is refused: {exc}; nothing was restored"
            ) from exc
        report.schema_revision = after
        await _restore_objects(settings, source, report, restore_progress)
        if settings.memory_backup_key_file is None and key_path != default_key:
            write_bytes_atomically(default_key, key.hex().encode("ascii") + b"\n")
    except BaseException:
        _clear_restored(data_dir, created, keep=default_key if key_path == default_key else None)
        raise
    log.info("backup_restored", files=report.files, schema_revision=after)
    return report


def _clear_restored(data_dir: Path, created: bool, *, keep: Path | None) -> None:
    """Empty the data directory again after a failed restore, keeping the key it was given."""
    if keep is None:
        clear_directory(data_dir, created)
        return
    with contextlib.suppress(FileNotFoundError), os.scandir(data_dir) as entries:
        for entry in list(entries):
            if entry.path == str(keep):
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)


async def _restore_objects(
    settings: MemorySettings, source: Path, report: RestoreReport, progress: ProgressCallback
) -> None:
    signer = UrlSigner(load_signing_secret(settings))
    store = build_object_store(settings, public_base_url="http://127.0.0.1", signer=signer)
    try:
        total = sum(1 for _ in _object_entries(source))
        for done, (key, path, sha256) in enumerate(_object_entries(source), start=1):
            body = await anyio.Path(path).read_bytes()
            try:
                await store.put(
                    key, body, content_type=content_type_for_key(key), checksum_sha256=sha256
                )
            except StorageError as exc:
                raise ToolFailure(f"could not write object {key} to the store: {exc}") from exc
            report.files += 1
            report.bytes += len(body)
            progress(done, total, "restoring objects")
    finally:
        await store.close()


def _object_entries(source: Path) -> Iterator[tuple[str, Path, str]]:
    with (source / FILES).open(encoding="utf-8") as lines:
        for line in lines:
            relative, path, _size, sha256 = _entry_path(source, json.loads(line))
            if relative != DUMP:
                yield relative.removeprefix(f"{OBJECTS}/"), path, sha256
