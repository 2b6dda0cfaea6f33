"""``LocalAssetObjectStore``: private files under ``$MEMORY_DATA_DIR/objects``.

Writes are create-only and atomic: the bytes go to a temporary file that is fsynced and then
hard-linked into place (``link`` fails if the name exists, so an object, once written, is never
replaced), followed by an fsync of the directory. A crash leaves either no object or the
complete one. A JSON sidecar records content type, length and SHA-256 for ``head``; readers
verify against the database's SHA-256, never against the sidecar. Signed links are HMAC-signed
and served by the memory server's ``/objects`` route.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import anyio

from memory_db.errors import InvalidStorageKey, ObjectNotFound, StorageError
from memory_db.files import fsync_dir, write_new_file
from memory_db.storage._common import check_put, refuse_overwrite
from memory_db.storage.keys import (
    content_type_for_key,
    parse_storage_key,
    validate_namespace_prefix,
    validate_storage_key,
)
from memory_db.storage.protocol import HeadResult, ListedObject, PutResult
from memory_db.storage.signing import HmacLinks, UrlSigner

OBJECTS_ROUTE = "/objects"


def _private_dirs(root: Path, directory: Path) -> None:
    """Create ``directory`` under ``root`` with every new level readable by the owner only."""
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    current = root
    for part in directory.relative_to(root).parts:
        current = current / part
        with contextlib.suppress(FileExistsError):
            current.mkdir(mode=0o700)


def _temporary(path: Path, data: bytes) -> Path:
    """Write ``data`` to a fresh, fsynced temporary file next to ``path``."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    write_new_file(tmp, data)
    return tmp


def _atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` atomically (sidecars only: they describe, they are never trusted)."""
    tmp = _temporary(path, data)
    try:
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _create_only(path: Path, data: bytes, digest: str) -> bool:
    """Link ``data`` into ``path`` unless it exists; ``True`` if this call wrote it.

    ``False`` if the same bytes were there already; other bytes raise ``ObjectExists`` and
    stay untouched.
    """
    tmp = _temporary(path, data)
    try:
        os.link(tmp, path)  # atomic and exclusive: fails with EEXIST, never replaces
    except FileExistsError:
        if _file_sha256(path) != digest:
            raise refuse_overwrite(str(path)) from None
        return False
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)
    return True


class LocalAssetObjectStore(HmacLinks):
    """Objects as files; signed links point at ``{public_base_url}/objects/{key}``."""

    def __init__(self, root: Path, signer: UrlSigner, public_base_url: str) -> None:
        self.root = root
        self.signer = signer
        self.public_base_url = public_base_url.rstrip("/")
        self.links_base = self.public_base_url + OBJECTS_ROUTE

    def _path(self, key: str) -> Path:
        # The key is validated against the builders' grammars, so it cannot escape the root.
        return self.root / validate_storage_key(key)

    @staticmethod
    def _meta_path(path: Path) -> Path:
        return path.with_name(path.name + ".json")

    async def put(
        self, key: str, body: bytes, *, content_type: str, checksum_sha256: str | None = None
    ) -> PutResult:
        """Store ``body`` create-only and atomically after checking key, type and checksum."""
        digest = await anyio.to_thread.run_sync(check_put, key, body, content_type, checksum_sha256)
        path = self._path(key)
        meta = json.dumps(
            {"bytes": len(body), "content_type": content_type, "sha256": digest}
        ).encode()

        def write() -> None:
            _private_dirs(self.root, path.parent)
            written = _create_only(path, body, digest)
            if written or not self._meta_path(path).exists():
                _atomic_write(self._meta_path(path), meta)

        try:
            await anyio.to_thread.run_sync(write)
        except OSError as exc:
            raise StorageError(f"local store write failed: {type(exc).__name__}") from exc
        return PutResult(key=key, bytes=len(body), etag=digest)

    async def head(self, key: str) -> HeadResult:
        """Metadata from the sidecar; ``exists=False`` when the object is missing."""
        path = self._path(key)

        def read() -> HeadResult:
            if not path.is_file():
                return HeadResult(exists=False)
            try:
                meta = json.loads(self._meta_path(path).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                meta = {}
            return HeadResult(
                exists=True,
                bytes=path.stat().st_size,
                content_type=meta.get("content_type") or content_type_for_key(key),
                checksum_sha256=meta.get("sha256"),
                etag=meta.get("sha256"),
            )

        return await anyio.to_thread.run_sync(read)

    async def get_stream(self, key: str, *, chunk_size: int = 65536) -> AsyncIterator[bytes]:
        """Stream the file in chunks."""
        path = self._path(key)
        try:
            handle = await anyio.open_file(path, "rb")
        except FileNotFoundError as exc:
            raise ObjectNotFound("no object is stored under this key") from exc
        async with handle:
            while chunk := await handle.read(chunk_size):
                yield chunk

    async def list_namespace(self, prefix: str) -> AsyncIterator[ListedObject]:
        """Every object and staging file under ``prefix`` (sidecars and temporaries excluded)."""
        base = self.root / validate_namespace_prefix(prefix)

        def scan() -> list[ListedObject]:
            found: list[ListedObject] = []
            if not base.is_dir():
                return found
            for path in base.rglob("*"):
                key = path.relative_to(self.root).as_posix()
                try:
                    parse_storage_key(key)
                    stat = path.stat()
                except (InvalidStorageKey, FileNotFoundError):
                    continue  # a sidecar, a temporary file, or deleted meanwhile
                modified = datetime.fromtimestamp(stat.st_mtime, UTC)
                found.append(ListedObject(key=key, bytes=stat.st_size, modified=modified))
            return sorted(found, key=lambda item: item.key)

        try:
            listed = await anyio.to_thread.run_sync(scan)
        except OSError as exc:
            raise StorageError(f"local store listing failed: {type(exc).__name__}") from exc
        for item in listed:
            yield item

    async def delete(self, key: str) -> None:
        """Remove the object and its sidecar; missing files are fine."""
        path = self._path(key)

        def remove() -> None:
            path.unlink(missing_ok=True)
            self._meta_path(path).unlink(missing_ok=True)
            # Drop the now-empty object directory; a sibling variant keeps it alive.
            with contextlib.suppress(OSError):
                path.parent.rmdir()

        try:
            await anyio.to_thread.run_sync(remove)
        except OSError as exc:
            raise StorageError(f"local store delete failed: {type(exc).__name__}") from exc

    async def close(self) -> None:
        """Nothing to release."""
