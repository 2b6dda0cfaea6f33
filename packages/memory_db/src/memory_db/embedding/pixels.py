"""Decoding for the in-process embedders: the image as they both see it, three sRGB bands."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyvips


def srgb_thumbnail(data: bytes, width: int, height: int) -> pyvips.Image:
    """Encoded image bytes scaled to exactly ``width`` x ``height``, as three sRGB bands.

    Transparency is flattened onto white, and any band beyond the third (CMYK's fourth, say) is
    dropped. An undecodable image raises ``pyvips.Error``.
    """
    import pyvips  # imported lazily: libvips loads a few MB of shared libraries

    image = pyvips.Image.thumbnail_buffer(data, width, height=height, size="force")
    if image.hasalpha():
        image = image.flatten(background=[255, 255, 255])
    image = image.colourspace("srgb")
    if image.bands > 3:
        image = image.extract_band(0, n=3)
    return image
