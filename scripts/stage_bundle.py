"""Lay out the MCPB bundle's directory, for ``mcpb pack``: ``make bundle``.

Copies the repository's tracked files (``git ls-files``, as they are in the working tree, so
nothing untracked such as ``.venv`` or caches) into DEST, then puts ``bundle/manifest.json`` and
``bundle/.mcpbignore`` at its root, where the MCPB format wants them. ``mcpb pack DEST OUT``
then leaves out what ``.mcpbignore`` names. The bundle test (tests/bundle) stages, packs,
unpacks and starts the result exactly this way.

Usage: ``python scripts/stage_bundle.py DEST`` (DEST must not exist or be empty). Standard
library only: it runs before anything is installed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# At the bundle's root in the .mcpb: the manifest the host reads, what `mcpb pack` leaves out.
AT_ROOT = ("bundle/manifest.json", "bundle/.mcpbignore")


def tracked_files(root: Path) -> list[str]:
    """The paths git tracks under ``root`` that exist in the working tree, relative to it."""
    # The developer's own git on PATH, with fixed arguments: nothing here comes from outside.
    listed = subprocess.run(  # noqa: S603
        ["git", "-C", str(root), "ls-files", "-z"],  # noqa: S607
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [path for path in listed.split("\0") if path and (root / path).is_file()]


def stage(root: Path, dest: Path) -> int:
    """Copy the bundle's files from ``root`` into ``dest``; the number of files copied."""
    if dest.exists() and any(dest.iterdir()):
        raise SystemExit(f"stage_bundle: {dest} is not empty; remove it first")
    paths = tracked_files(root)
    for path in paths:
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / path, target)
    for path in AT_ROOT:
        shutil.copy2(root / path, dest / Path(path).name)
    return len(paths)


def main(argv: list[str]) -> int:
    """Stage the bundle into the directory named on the command line."""
    if len(argv) != 1:
        print("usage: python scripts/stage_bundle.py DEST", file=sys.stderr)
        return 2
    dest = Path(argv[0])
    count = stage(ROOT, dest)
    print(f"stage_bundle: {count} files in {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
