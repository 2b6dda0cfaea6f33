"""``restore`` of a tampered backup: nothing outside the backup directory is read.

A backup's checksums are written by whoever wrote the backup: a file of the backup that is a
symbolic link (to any file the server can read, with its checksum) must be refused like a
missing one, whether it is the dump, an object or a directory above an object.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from memory_tools.errors import ConflictFailure, InvalidInputFailure
from memory_tools.operations.backup import json_bytes, require_empty_directory, verify_backup
from memory_tools.operations.backup_key import (
    SIGNATURE,
    load_or_create_backup_key,
    read_backup_key,
    signature_document,
)

KEY = bytes(range(32))


def backup_of(path: Path, files: dict[str, bytes]) -> None:
    """A backup in ``path`` whose files.jsonl and manifest agree with ``files`` (by content).

    Signed with ``KEY``: these checks are the ones a holder of the key still gets.
    """
    lines = "".join(
        json.dumps({"path": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
        + "\n"
        for name, data in files.items()
    ).encode()
    path.mkdir(parents=True, exist_ok=True)
    (path / "files.jsonl").write_bytes(lines)
    manifest = {
        "format": "image-memory-backup",
        "formatVersion": 2,
        "schemaRevision": "0013",
        "fileList": {
            "path": "files.jsonl",
            "entries": len(files),
            "bytes": len(lines),
            "sha256": hashlib.sha256(lines).hexdigest(),
        },
    }
    content = json_bytes(manifest)
    (path / SIGNATURE).write_bytes(json_bytes(signature_document(KEY, content)))
    (path / "manifest.json").write_bytes(content)


def test_verify_refuses_symbolic_links_inside_a_backup(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = b"PGDMP not yours"
    (outside / "database.dump").write_bytes(secret)
    (outside / "original.png").write_bytes(secret)
    tenant = "objects/prod/tenants/ans_aaaaaaaaaaaaaaaaaaaaaaaaaa/objects"
    key = f"{tenant}/aob_bbbbbbbbbbbbbbbbbbbbbbbbbb/original.png"

    linked_dump = tmp_path / "dump"
    backup_of(linked_dump, {"database.dump": secret})
    os.symlink(outside / "database.dump", linked_dump / "database.dump")

    linked_object = tmp_path / "object"
    backup_of(linked_object, {"database.dump": secret, key: secret})
    (linked_object / "database.dump").write_bytes(secret)
    (linked_object / key).parent.mkdir(parents=True)
    os.symlink(outside / "original.png", linked_object / key)

    linked_dir = tmp_path / "directory"
    backup_of(linked_dir, {"database.dump": secret, key: secret})
    (linked_dir / "database.dump").write_bytes(secret)
    (linked_dir / tenant).mkdir(parents=True)
    os.symlink(outside, linked_dir / tenant / "aob_bbbbbbbbbbbbbbbbbbbbbbbbbb")

    linked_lists = []
    for name in ("manifest.json", "files.jsonl"):
        source = tmp_path / f"linked-{name}"
        backup_of(source, {"database.dump": secret})
        (source / "database.dump").write_bytes(secret)
        (outside / name).write_bytes((source / name).read_bytes())
        (source / name).unlink()
        os.symlink(outside / name, source / name)
        linked_lists.append(source)

    for source in (linked_dump, linked_object, linked_dir, *linked_lists):
        with pytest.raises(InvalidInputFailure, match="is not a regular file of the backup"):
            verify_backup(source, KEY)


def test_a_destination_linked_to_nothing_is_refused_clearly(tmp_path: Path) -> None:
    dangling = tmp_path / "dangling"
    os.symlink(tmp_path / "nowhere" / "x", dangling)
    with pytest.raises(ConflictFailure, match="symbolic link to nothing"):
        require_empty_directory(dangling, "backup destination")


def test_the_backup_key_is_made_private_and_a_malformed_one_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "data" / "backup.key"
    key = load_or_create_backup_key(path)
    assert len(key) == 32 and path.stat().st_mode & 0o777 == 0o600
    assert load_or_create_backup_key(path) == key  # made once, then read
    for content in ("", "not hex at all", "ab" * 8):
        path.write_text(content)
        with pytest.raises(InvalidInputFailure, match="is not a backup key"):
            read_backup_key(path)
    path.unlink()
    path.mkdir()
    with pytest.raises(InvalidInputFailure, match="is not a regular file"):
        read_backup_key(path)


def test_a_changed_manifest_is_refused_even_with_matching_files(tmp_path: Path) -> None:
    source = tmp_path / "backup"
    backup_of(source, {"database.dump": b"PGDMP"})
    (source / "database.dump").write_bytes(b"PGDMP")
    verify_backup(source, KEY)  # as written
    manifest = json.loads((source / "manifest.json").read_text())
    manifest["schemaRevision"] = "0001"
    (source / "manifest.json").write_bytes(json_bytes(manifest))
    with pytest.raises(InvalidInputFailure, match="is not authentic"):
        verify_backup(source, KEY)
