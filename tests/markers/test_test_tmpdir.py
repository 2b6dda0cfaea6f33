"""`make test` puts the tests' temporary files on a RAM file system only when one has room.

``scripts/test-tmpdir.sh`` prints the directory the Makefile gives the suite as TMPDIR, or
nothing (the system's default). ``TEST_TMPDIR_MIN_MB`` is the room it requires.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "test-tmpdir.sh"
SHM = Path("/dev/shm")


def _chosen(min_mb: int) -> str:
    done = subprocess.run(
        [str(SCRIPT)],
        env={**os.environ, "TEST_TMPDIR_MIN_MB": str(min_mb)},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def _shm_is_a_writable_tmpfs() -> bool:
    mounts = Path("/proc/mounts").read_text(encoding="utf-8").splitlines()
    on_shm = [line.split() for line in mounts if line.split()[1:2] == [str(SHM)]]
    return bool(on_shm) and on_shm[-1][2] == "tmpfs" and os.access(SHM, os.W_OK)


def test_the_ram_file_system_is_chosen_when_it_has_the_room() -> None:
    free_mb = 0
    if SHM.is_dir():
        stats = os.statvfs(SHM)
        free_mb = stats.f_bavail * stats.f_frsize // 2**20
    expected = str(SHM) if _shm_is_a_writable_tmpfs() and free_mb >= 1 else ""
    assert _chosen(1) == expected


def test_nothing_is_chosen_without_the_room() -> None:
    assert _chosen(10**9) == ""
