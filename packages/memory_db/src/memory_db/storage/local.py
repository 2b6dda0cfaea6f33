"""``LocalAssetObjectStore``: private files under ``$MEMORY_DATA_DIR/objects``.

Writes are atomic (temporary file, fsync, rename, fsync of the directory) so a crash leaves
either the old state or the complete new object. A JSON sidecar records content type, length and
SHA-256. Signed links are HMAC-signed and served by the memory server's ``/objects`` route.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import anyio

from memory_db.errors import ObjectNotFound, StorageError
from memory_db.storage._common import check_put
from memory_db.storage.keys import content_type_for_key, validate_object_key
from memory_db.storage.protocol import HeadResult, PutResult
from memory_db.storage.signing import HmacLinks, UrlSigner

OBJECTS_ROUTE = "/objects"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _private_dirs(root: Path, directory: Path) -> None:
    """Create ``directory`` under ``root`` with every new level readable by the owner only."""
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    current = root
    for part in directory.relative_to(root).parts:
        current = current / part
        with contextlib.suppress(FileExistsError):
            current.mkdir(mode=0o700)


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class LocalAssetObjectStore(HmacLinks):
    """Objects as files; signed links point at ``{public_base_url}/objects/{key}``."""

    def __init__(self, root: Path, signer: UrlSigner, public_base_url: str) -> None:
        self.root = root
        self.signer = signer
        self.public_base_url = public_base_url.rstrip("/")
        self.links_base = self.public_base_url + OBJECTS_ROUTE

    def _path(self, key: str) -> Path:
        # The key is validated against the builder's grammar, so it cannot escape the root.
        return self.root / validate_object_key(key)

    @staticmethod
    def _meta_path(path: Path) -> Path:
        return path.with_name(path.name + ".json")

    async def put(
        self, key: str, body: bytes, *, content_type: str, checksum_sha256: str | None = None
    ) -> PutResult:
        """Store ``body`` atomically after checking key, type and checksum."""
        digest = await anyio.to_thread.run_sync(check_put, key, body, content_type, checksum_sha256)
        path = self._path(key)
        meta = json.dumps(
            {"bytes": len(body), "content_type": content_type, "sha256": digest}
        ).encode()

        def write() -> None:
            _private_dirs(self.root, path.parent)
            _atomic_write(path, body)
            _atomic_write(self._meta_path(path), meta)

        await anyio.to_thread.run_sync(write)
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
