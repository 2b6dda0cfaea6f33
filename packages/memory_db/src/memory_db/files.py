"""Durable, private writes of the small files a data directory holds (keys, object files).

A key is written in full under a private name, then linked into place: processes starting at
once on a new data directory never read a half-written key, and the first link wins (the
others find the key there and use it).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """Make the entries of directory ``path`` durable: a link into it then survives a crash."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_new_file(path: Path, content: bytes) -> None:
    """Create ``path`` (``0600``; it must not exist yet) holding ``content``, flushed to disk.

    On any failure the partial file is removed.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def create_secret_file(path: Path, content: bytes) -> None:
    """Create ``path`` (``0600``) holding ``content``, unless another process created it first.

    Either way ``path`` then holds one complete key: read it back rather than trusting
    ``content`` to be the one that won.
    """
    draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    write_new_file(draft, content)
    try:
        with contextlib.suppress(FileExistsError):
            os.link(draft, path)
    finally:
        draft.unlink()
