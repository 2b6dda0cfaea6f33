"""The key that authenticates backups, and the signature of a backup's manifest.

A backup's checksums (``files.jsonl``, and its checksum in ``manifest.json``) are written by
whoever writes the backup: they catch a damaged copy, not a forged one. So the manifest is
signed with HMAC-SHA256 under a key that is never in a backup: ``backup.key`` in the data
directory (created ``0600`` by the first backup), or the file ``MEMORY_BACKUP_KEY_FILE`` names.
The signature is ``manifest.hmac`` beside the manifest; since the manifest holds the checksum of
``files.jsonl``, which holds the checksum of every file, the signature covers every byte.
``restore`` refuses a backup whose signature is missing or does not match the key it is given.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import stat
from pathlib import Path
from typing import Any

from memory_db.files import create_secret_file
from memory_tools.errors import InvalidInputFailure

SIGNATURE = "manifest.hmac"
ALGORITHM = "HMAC-SHA256"
_KEY_BYTES = 32
_KEY_ID_LABEL = b"image-memory backup key id"


def key_id(key: bytes) -> str:
    """A short, public name of ``key``: tells the operator which key signed a backup."""
    return hmac.new(key, _KEY_ID_LABEL, hashlib.sha256).hexdigest()[:16]


def _parse_key(path: Path, raw: bytes) -> bytes:
    try:
        key = bytes.fromhex(raw.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        key = b""
    if len(key) < _KEY_BYTES:
        raise InvalidInputFailure(
            f"backup key file {path} is not a backup key (64 or more hexadecimal digits)"
        )
    return key


def read_backup_key(path: Path) -> bytes:
    """The key in ``path``; a clear refusal when it is missing, not a file, or malformed."""
    try:
        # Followed: a secret mounted into a container is often a symbolic link to its file.
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise InvalidInputFailure(
            f"the backup key {path} does not exist: restore needs the key of the server that "
            "wrote the backup (copy its backup.key, then pass --key-file PATH or set "
            "MEMORY_BACKUP_KEY_FILE); nothing was restored"
        ) from None
    if not stat.S_ISREG(mode):
        raise InvalidInputFailure(f"the backup key {path} is not a regular file")
    return _parse_key(path, path.read_bytes())


def load_or_create_backup_key(path: Path) -> bytes:
    """The key in ``path``, created (random, ``0600``) when there is none yet."""
    if not path.exists() and not path.is_symlink():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Two backups starting at once on a new data directory agree on one key.
        create_secret_file(path, f"{secrets.token_hex(_KEY_BYTES)}\n".encode("ascii"))
    return read_backup_key(path)


def signature_document(key: bytes, manifest: bytes) -> dict[str, Any]:
    """What ``manifest.hmac`` holds for the manifest's exact bytes."""
    return {
        "algorithm": ALGORITHM,
        "keyId": key_id(key),
        "hmac": hmac.new(key, manifest, hashlib.sha256).hexdigest(),
    }


def check_signature(source: Path, key: bytes, manifest: bytes) -> None:
    """``InvalidInputFailure`` unless ``manifest.hmac`` signs ``manifest`` under ``key``."""
    path = source / SIGNATURE
    if path.is_symlink() or not path.is_file():
        raise InvalidInputFailure(
            f"backup {source} is not authenticated: {SIGNATURE} is missing (backups written "
            "before signing was added cannot be restored by this build); nothing was restored"
        )
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        document = None
    if not isinstance(document, dict) or document.get("algorithm") != ALGORITHM:
        raise InvalidInputFailure(
            f"backup {source} is not authenticated: {SIGNATURE} is malformed; nothing was restored"
        )
    fields: dict[str, Any] = document  # pyright: ignore[reportUnknownVariableType]
    expected = signature_document(key, manifest)
    if fields.get("keyId") != expected["keyId"]:
        raise InvalidInputFailure(
            f"backup {source} was signed with backup key {fields.get('keyId')!r}, not with the "
            f"key given (id {expected['keyId']}): use the backup.key of the server that wrote "
            "it; nothing was restored"
        )
    if not hmac.compare_digest(str(fields.get("hmac")), expected["hmac"]):
        raise InvalidInputFailure(
            f"backup {source} is not authentic: its manifest does not match its signature "
            "(it was changed after the backup was written); nothing was restored"
        )
