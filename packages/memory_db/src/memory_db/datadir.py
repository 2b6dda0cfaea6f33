"""Checks that the data directory is a safe home for a live database.

A PostgreSQL data directory (and our object files) must live on a local filesystem: cloud-sync
clients copy files while the database writes them, and network filesystems break the locking
and fsync guarantees PostgreSQL relies on. Both corrupt data silently, so we refuse them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath

# Path components that cloud-sync clients own, matched case-insensitively against a whole
# component, allowing the suffixes clients add ("Dropbox (Team)", "OneDrive - Contoso").
_CLOUD_SYNC_COMPONENT = re.compile(
    r"^(dropbox|onedrive|google ?drive|my drive|icloud ?drive|mobile documents|"
    r"com~apple~clouddocs|cloudstorage|box sync|pcloud drive)([ -].*)?$",
    re.IGNORECASE,
)

_NETWORK_FS_TYPES = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb",
        "smb3",
        "smbfs",
        "afs",
        "ncpfs",
        "9p",
        "glusterfs",
        "ceph",
        "cephfs",
        "lustre",
        "gpfs",
        "beegfs",
        "davfs",
        "fuse.sshfs",
        "fuse.rclone",
        "fuse.s3fs",
        "fuse.gcsfuse",
        "fuse.davfs",
        "fuse.glusterfs",
        "fuse.cephfs",
    }
)


def cloud_sync_reason(path: Path) -> str | None:
    """Return why ``path`` lies in a cloud-sync folder, or None if it does not."""
    for part in PurePosixPath(path).parts:
        if _CLOUD_SYNC_COMPONENT.match(part):
            return (
                f"it is inside a cloud-sync folder ({part!r}); sync clients copy database "
                "files while they are written and corrupt them"
            )
    return None


def _unescape_mount(field: str) -> str:
    # /proc/mounts escapes space, tab, newline and backslash as octal.
    return (
        field.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
    )


def network_fs_reason(path: Path, mounts_text: str) -> str | None:
    """Return why ``path`` is on a network filesystem according to ``mounts_text``."""
    best_mount = ""
    best_type = ""
    target = str(path)
    for line in mounts_text.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        mount_point, fs_type = _unescape_mount(fields[1]), fields[2].lower()
        prefix = mount_point.rstrip("/") + "/"
        if (target == mount_point or target.startswith(prefix) or mount_point == "/") and len(
            mount_point
        ) >= len(best_mount):
            best_mount, best_type = mount_point, fs_type
    if best_type in _NETWORK_FS_TYPES:
        return (
            f"it is on a network filesystem ({best_type} mounted at {best_mount}); "
            "PostgreSQL needs local locking and fsync"
        )
    return None


def check_data_dir(path: Path, mounts_text: str | None = None) -> None:
    """Raise ``ValueError`` with an explanation if ``path`` is not a safe data directory.

    ``mounts_text`` defaults to the contents of ``/proc/mounts`` where it exists.
    """
    resolved = Path(os.path.abspath(path.expanduser()))
    reason = cloud_sync_reason(resolved)
    if reason is None:
        if mounts_text is None:
            try:
                mounts_text = Path("/proc/mounts").read_text(encoding="utf-8")
            except OSError:
                mounts_text = ""
        reason = network_fs_reason(resolved, mounts_text)
    if reason is not None:
        raise ValueError(f"refusing data directory {resolved}: {reason}. Choose a local path.")
