"""Test images and what the local store holds: shared by every subject's tool tests."""

from __future__ import annotations

import base64

import pyvips

from memory_db.storage import LocalAssetObjectStore
from memory_tools import MemoryServices


def picture(seed: int, size: int = 48) -> bytes:
    """A distinct small PNG per seed."""
    xyz = pyvips.Image.xyz(size, size)
    red = ((xyz[0] * (seed + 3) + xyz[1]) % 256).cast("uchar")
    green = ((xyz[1] * (seed + 5)) % 256).cast("uchar")
    blue = ((xyz[0] + seed * 17) % 256).cast("uchar")
    return red.bandjoin([green, blue]).copy(interpretation="srgb").pngsave_buffer()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def stored_files(services: MemoryServices) -> list[str]:
    store = services.store
    assert isinstance(store, LocalAssetObjectStore)
    if not store.root.exists():
        return []
    return sorted(
        str(p.relative_to(store.root))
        for p in store.root.rglob("*")
        if p.is_file() and not p.name.endswith(".json") and not p.name.startswith(".")
    )
