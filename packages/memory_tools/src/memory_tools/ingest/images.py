"""Sniffing, bounded decoding and sanitised previews of untrusted image bytes (§12.2).

Only four formats exist for this module: JPEG, PNG, WebP and GIF. At first use every other
libvips loader (and every operation libvips marks untrusted) is blocked, so no code path can
reach an SVG, PDF, TIFF or HEIF parser whatever the bytes say. For each upload:

1. the magic bytes must name one of the four formats (a declared type or name never counts);
2. the loader libvips would pick must be that format's loader;
3. the image's structure is walked to its logical end; archive, HTML, script or PDF bytes
   after it (a polyglot) are refused;
4. the header is read and ``width x height x pages`` is checked against the pixel limit
   before any pixel is decoded;
5. a sanitised WebP preview is made by ``thumbnail_buffer`` (shrink-on-load, EXIF
   auto-orientation, sRGB, first frame, no metadata) with ``fail_on="error"``, which reads the
   whole first frame, so truncation or a corrupt stream fails here; the frames of an animation
   are decoded too.

Everything here is CPU-bound and synchronous; :func:`inspect_image` runs it in a worker thread.
"""

from __future__ import annotations

import hashlib
import re
import threading
import zlib
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
import pyvips

from memory_tools.errors import InvalidImage

MIN_LIBVIPS = (8, 18, 3)
PREVIEW_QUALITY = 82
# libwebp effort 0-6: previews favour encoding speed; the size cost is small at this quality.
PREVIEW_EFFORT = 0


@dataclass(frozen=True)
class ImageFormat:
    """One accepted format."""

    name: str
    mime_type: str
    extension: str
    loader: str  # the libvips class that must be chosen for the buffer


FORMATS = {
    "jpeg": ImageFormat("jpeg", "image/jpeg", "jpg", "VipsForeignLoadJpegBuffer"),
    "png": ImageFormat("png", "image/png", "png", "VipsForeignLoadPngBuffer"),
    "webp": ImageFormat("webp", "image/webp", "webp", "VipsForeignLoadWebpBuffer"),
    "gif": ImageFormat("gif", "image/gif", "gif", "VipsForeignLoadNsgifBuffer"),
}

# Recognised only to explain a refusal: none of these is ever decoded.
_KNOWN_OTHERS: tuple[tuple[re.Pattern[bytes], str], ...] = (
    (re.compile(rb"^\s*(<\?xml[^>]*>\s*)?(<!--.*?-->\s*)*<svg", re.I | re.S), "SVG"),
    (re.compile(rb"^\s*(<!doctype html|<html|<head|<body|<script)", re.I), "HTML"),
    (re.compile(rb"^%PDF-"), "PDF"),
    (re.compile(rb"^(II\*\x00|MM\x00\*)"), "TIFF"),
    (re.compile(rb"^....ftyp(heic|heix|hevc|heim|heis|mif1|msf1|avif|avis)", re.S), "HEIF/AVIF"),
    (re.compile(rb"^PK\x03\x04|^PK\x05\x06"), "a ZIP archive"),
    (re.compile(rb"^\x1f\x8b"), "a gzip archive"),
    (re.compile(rb"^(Rar!|7z\xbc\xaf)"), "an archive"),
    (re.compile(rb"^BM"), "BMP"),
    (re.compile(rb"^\x00\x00\x01\x00"), "an icon"),
    (re.compile(rb"^\xff\x0a|^\x00\x00\x00\x0cJXL "), "JPEG XL"),
    (re.compile(rb"^(MZ|\x7fELF)"), "an executable"),
)
# Content that must never ride along with an image (checked after the image's logical end).
_TRAILER_THREATS: tuple[tuple[bytes, str], ...] = (
    (b"PK\x03\x04", "a ZIP archive"),
    (b"PK\x05\x06", "a ZIP archive"),
    (b"Rar!", "a RAR archive"),
    (b"7z\xbc\xaf", "a 7z archive"),
    (b"\x1f\x8b\x08", "gzip data"),
    (b"%PDF-", "a PDF"),
    (b"\x7fELF", "an executable"),
)
# Markup that turns an image into an HTML/script polyglot wherever it appears. Seven or more
# ASCII bytes: a chance match inside compressed pixel data is vanishingly unlikely.
_MARKUP = (b"<script", b"<html", b"<?php", b"<svg xmlns", b"<!doctype", b"javascript:", b"<iframe")


@dataclass(frozen=True)
class InspectedImage:
    """What validation learned about an accepted image, and its sanitised preview."""

    format: ImageFormat
    sha256: str
    bytes: int
    width: int  # as displayed, after EXIF orientation
    height: int
    pages: int
    orientation: int
    preview: bytes
    preview_width: int
    preview_height: int


_setup_lock = threading.Lock()
_setup_done = False


def lock_down_libvips() -> None:
    """Block every loader but the four buffer loaders, and all untrusted operations. Idempotent.

    Raises :class:`RuntimeError` when libvips is older than 8.18.3.
    """
    global _setup_done
    with _setup_lock:
        if _setup_done:
            return
        version = tuple(pyvips.version(index) for index in range(3))
        if version < MIN_LIBVIPS:
            shown = ".".join(map(str, version))
            raise RuntimeError(f"libvips {shown} is too old; 8.18.3 or newer is required")
        pyvips.block_untrusted_set(True)
        pyvips.operation_block_set("VipsForeignLoad", True)
        for image_format in FORMATS.values():
            pyvips.operation_block_set(image_format.loader, False)
        _setup_done = True


def sniff(data: bytes) -> ImageFormat | None:
    """The accepted format the magic bytes announce, or ``None``."""
    if data.startswith(b"\xff\xd8\xff"):
        return FORMATS["jpeg"]
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return FORMATS["png"]
    if data.startswith((b"GIF87a", b"GIF89a")):
        return FORMATS["gif"]
    if len(data) >= 12 and data.startswith(b"RIFF") and data[8:12] == b"WEBP":
        return FORMATS["webp"]
    return None


def describe_other(data: bytes) -> str:
    """A short name for bytes that are not an accepted image (for the error message)."""
    head = data[:512]
    for pattern, name in _KNOWN_OTHERS:
        if pattern.search(head):
            return name
    return "an unknown type"


def _chosen_loader(data: bytes) -> str | None:
    pointer = pyvips.vips_lib.vips_foreign_find_load_buffer(data, len(data))
    if pointer == pyvips.ffi.NULL:
        return None
    return pyvips.ffi.string(pointer).decode()


# --- logical ends: where each format's own structure says the image stops -------------------


# Inside entropy-coded data 0xFF is followed by 0x00 (stuffing), a restart marker or more 0xFF
# fill bytes; anything else is the next marker (found at its last fill byte). A regex finds it
# at C speed — written without a repeat: "\xff+" made the search 15x slower (70 ms for 40 MP).
_JPEG_MARKER = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")


def _jpeg_end(data: bytes, pixels: list[tuple[int, int]]) -> int:
    position = 2
    size = len(data)
    while position + 2 <= size:
        if data[position] != 0xFF:
            raise InvalidImage("the JPEG structure is corrupt")
        marker = data[position + 1]
        if marker == 0xFF:  # fill byte
            position += 1
            continue
        if marker == 0xD9:
            return position + 2
        if marker in (0x01, *range(0xD0, 0xD8)):
            position += 2
            continue
        if position + 4 > size:
            break
        length = int.from_bytes(data[position + 2 : position + 4], "big")
        if length < 2:
            raise InvalidImage("the JPEG structure is corrupt")
        position += 2 + length
        if marker == 0xDA:  # start of scan: entropy-coded data runs to the next real marker
            found = _JPEG_MARKER.search(data, position)
            if found is None:
                raise InvalidImage("the JPEG is truncated")
            pixels.append((position, found.start()))
            position = found.start()
    raise InvalidImage("the JPEG is truncated")


def _png_end(data: bytes, pixels: list[tuple[int, int]]) -> int:
    position = 8
    size = len(data)
    while position + 12 <= size:
        length = int.from_bytes(data[position : position + 4], "big")
        kind = data[position + 4 : position + 8]
        body_end = position + 8 + length
        if body_end + 4 > size:
            break
        # Some PNG decoders skip checksums of ancillary chunks; a file whose CRCs lie is refused.
        crc = int.from_bytes(data[body_end : body_end + 4], "big")
        if zlib.crc32(data[position + 4 : body_end]) & 0xFFFFFFFF != crc:
            raise InvalidImage("the PNG is corrupt (a chunk checksum does not match)")
        if kind in (b"IDAT", b"fdAT"):
            pixels.append((position + 8, body_end))
        position = body_end + 4
        if kind == b"IEND":
            return position
    raise InvalidImage("the PNG is truncated")


def _webp_end(data: bytes, pixels: list[tuple[int, int]]) -> int:
    declared = int.from_bytes(data[4:8], "little")
    end = 8 + declared + (declared & 1)
    if declared < 4 or end > len(data) + (declared & 1):
        raise InvalidImage("the WebP is truncated")
    position = 12
    while position + 8 <= min(end, len(data)):
        kind = data[position : position + 4]
        length = int.from_bytes(data[position + 4 : position + 8], "little")
        if kind in (b"VP8 ", b"VP8L", b"ALPH", b"ANMF"):
            pixels.append((position + 8, min(position + 8 + length, len(data))))
        position += 8 + length + (length & 1)
    return min(end, len(data))


def _skip_sub_blocks(data: bytes, position: int) -> int:
    """The position after the data sub-blocks that start at ``position``."""
    size = len(data)
    while position < size:
        # Pixel data comes in full 255-byte sub-blocks, whose length bytes sit 256 apart: a run
        # of them is skipped in C, up to 64 at a time (a bounded slice, whatever the file).
        lengths = data[position : position + 256 * 64 : 256]
        position += 256 * (len(lengths) - len(lengths.lstrip(b"\xff")))
        if position >= size:
            break
        length = data[position]
        position += 1 + length
        if length == 0:
            return position
    raise InvalidImage("the GIF is truncated")


def _walk_gif(data: bytes, pixels: list[tuple[int, int]]) -> tuple[int, bool]:
    """The GIF's logical end, and whether a graphic control block declares transparency."""
    size = len(data)
    if size < 13:
        raise InvalidImage("the GIF is truncated")
    flags = data[10]
    position = 13 + (3 * 2 ** ((flags & 7) + 1) if flags & 0x80 else 0)
    transparent = False
    while position < size:
        block = data[position]
        if block == 0x3B:
            return position + 1, transparent
        if block == 0x21:
            # A graphic control extension: label 0xF9, size 4, then flags (bit 0: transparency).
            if data[position + 1 : position + 3] == b"\xf9\x04" and position + 3 < size:
                transparent = transparent or bool(data[position + 3] & 1)
            position = _skip_sub_blocks(data, position + 2)
        elif block == 0x2C:
            if position + 10 > size:
                raise InvalidImage("the GIF is truncated")
            local = data[position + 9]
            position += 10 + (3 * 2 ** ((local & 7) + 1) if local & 0x80 else 0)
            start = position + 1  # after the LZW code size
            position = _skip_sub_blocks(data, start)
            pixels.append((start, position))
        else:
            raise InvalidImage("the GIF structure is corrupt")
    raise InvalidImage("the GIF is truncated")


_ENDS = {"jpeg": _jpeg_end, "png": _png_end, "webp": _webp_end}


@dataclass(frozen=True)
class _Layout:
    """What walking a file's own structure found."""

    end: int  # where the structure says the image stops
    pixels: list[tuple[int, int]]  # byte ranges of compressed pixel data
    transparent: bool  # GIF only: a graphic control block declares a transparent colour


def _layout(data: bytes, image_format: ImageFormat) -> _Layout:
    """Walk the file's structure once; :class:`InvalidImage` if it is corrupt or truncated."""
    pixels: list[tuple[int, int]] = []
    if image_format.name == "gif":
        end, transparent = _walk_gif(data, pixels)
        return _Layout(end, pixels, transparent)
    return _Layout(_ENDS[image_format.name](data, pixels), pixels, transparent=False)


def _outside(pixels: list[tuple[int, int]], size: int) -> list[tuple[int, int]]:
    """The byte ranges that are not compressed pixel data (headers, metadata, trailer).

    Gaps shorter than 16 bytes between pixel ranges are chunk framing (length, type, CRC),
    checked by the structure walk; they are not scanned one by one.
    """
    ranges: list[tuple[int, int]] = []
    cursor = 0
    for start, end in sorted(pixels):
        if start - cursor >= 16 or (not ranges and start > cursor):
            ranges.append((cursor, start))
        cursor = max(cursor, end)
    if cursor < size:
        ranges.append((cursor, size))
    return ranges


def _refuse_polyglots(data: bytes, layout: _Layout) -> None:
    trailer = data[layout.end :]
    for signature, name in _TRAILER_THREATS:
        if signature in trailer:
            raise InvalidImage(f"{name} is appended to the image (a polyglot file)")
    # Markup hides in metadata (comments, text chunks, EXIF) and after the image, not inside
    # compressed pixel data, which is skipped: scanning a 30 MB PNG whole cost 50 ms.
    for start, stop in _outside(layout.pixels, len(data)):
        lowered = data[start:stop].lower()
        if any(marker in lowered for marker in _MARKUP):
            raise InvalidImage("the file carries HTML or script markup (a polyglot file)")


# --- decoding -------------------------------------------------------------------------------


def _int_field(image: pyvips.Image, name: str, default: int) -> int:
    if image.get_typeof(name) == 0:
        return default
    value = image.get(name)
    return int(value) if isinstance(value, int | float) else default


def _jpeg_shrink(long_edge: int, preview_edge: int) -> int:
    """The largest DCT scale-down (1, 2, 4, 8) that still leaves at least the preview edge.

    libvips' thumbnail keeps a factor of two for its final resize and so decodes a 40 MP JPEG
    at full size for a 2,048-px preview; decoding at 1/2 scale first is what Pillow's draft
    mode does, and is visually the same for a preview.
    """
    shrink = 1
    while shrink < 8 and long_edge // (shrink * 2) >= preview_edge:
        shrink *= 2
    return shrink


def _thumbnail(
    data: bytes,
    image_format: ImageFormat,
    long_edge: int,
    edge: int,
    options: dict[str, Any],
    *,
    opaque_gif: bool,
) -> pyvips.Image:
    """The upright, sRGB preview, as a pipeline: nothing is decoded until it is read."""
    if image_format.name == "jpeg":
        shrink = _jpeg_shrink(long_edge, edge)
        loaded = pyvips.Image.jpegload_buffer(
            data, shrink=shrink, access="sequential", fail_on="error"
        )
        image = loaded.thumbnail_image(edge, height=edge, size="down", fail_on="error", **options)
    elif opaque_gif:
        # Without transparency an alpha band (the loader may add one) is dropped before
        # resizing (a quarter less work), and a palette picture is resized with a linear
        # kernel: lanczos3 rings on its hard edges and dithering. No EXIF or ICC profile exists.
        image = pyvips.Image.gifload_buffer(data, access="sequential", fail_on="error")
        if image.hasalpha():
            image = image.extract_band(0, n=image.bands - 1)
        scale = edge / max(image.width, image.height)
        if scale < 1:
            image = image.resize(scale, kernel="linear")
    else:
        image = pyvips.Image.thumbnail_buffer(
            data, edge, height=edge, size="down", fail_on="error", **options
        )
    return image


def _band_min(image: pyvips.Image, band: int) -> float:
    value = image.extract_band(band).min()
    return value[0] if isinstance(value, tuple) else value


def inspect_image_sync(data: bytes, *, max_pixels: int, preview_edge: int) -> InspectedImage:
    """Validate ``data`` and build its preview; :class:`InvalidImage` names what is wrong."""
    lock_down_libvips()
    if not data:
        raise InvalidImage("the file is empty")
    image_format = sniff(data)
    if image_format is None:
        raise InvalidImage(
            f"the bytes are {describe_other(data)}, not a JPEG, PNG, WebP or GIF image"
        )
    loader = _chosen_loader(data)
    if loader != image_format.loader:
        raise InvalidImage(f"the bytes look like {image_format.name} but do not parse as one")
    layout = _layout(data, image_format)
    _refuse_polyglots(data, layout)
    try:
        header = pyvips.Image.new_from_buffer(data, "", access="sequential", fail_on="error")
        pages = max(1, _int_field(header, "n-pages", 1))
        width, height = header.width, header.height
        orientation = _int_field(header, "orientation", 1)
        has_profile = header.get_typeof("icc-profile-data") != 0
    except pyvips.Error:
        raise InvalidImage(f"the {image_format.name} header is unreadable") from None
    if width <= 0 or height <= 0:
        raise InvalidImage("the image has no pixels")
    if image_format.name == "gif":
        # Frames are composed on the logical screen, which other decoders allocate in full.
        screen_w, screen_h = (
            int.from_bytes(data[6:8], "little"),
            int.from_bytes(data[8:10], "little"),
        )
        if screen_w * screen_h * pages > max_pixels:
            raise InvalidImage(
                f"the GIF's logical screen has {screen_w * screen_h * pages:,} pixels "
                f"({screen_w}x{screen_h}x{pages} frames); the limit is {max_pixels:,}"
            )
    if width * height * pages > max_pixels:
        raise InvalidImage(
            f"the image has {width * height * pages:,} pixels "
            f"({width}x{height}x{pages} frames); the limit is {max_pixels:,}"
        )
    try:
        # thumbnail turns CMYK and greyscale into sRGB itself; an embedded ICC profile needs a
        # real colour transform, which is costly, so it is asked for only then.
        options: dict[str, Any] = {"output_profile": "srgb"} if has_profile else {}
        preview = _thumbnail(
            data,
            image_format,
            max(width, height),
            preview_edge,
            options,
            opaque_gif=image_format.name == "gif" and not layout.transparent,
        )
        if preview.hasalpha():
            # Checking the alpha band reads every pixel, so the preview (bounded by the edge)
            # is evaluated into memory once; an opaque alpha band only slows the encoder down.
            preview = preview.copy_memory()
            if _band_min(preview, preview.bands - 1) >= 255:
                preview = preview.extract_band(0, n=preview.bands - 1)
        # Otherwise the encoder reads the pipeline itself: one pass, no copy of the pixels.
        encoded = preview.webpsave_buffer(
            Q=PREVIEW_QUALITY, keep=pyvips.enums.ForeignKeep.NONE, effort=PREVIEW_EFFORT
        )
        if pages > 1:
            # The preview used the first frame; every other frame must decode as well.
            frames = pyvips.Image.new_from_buffer(
                data, "", access="sequential", fail_on="error", n=-1
            )
            frames.avg()
    except pyvips.Error:
        raise InvalidImage(f"the {image_format.name} data is corrupt or truncated") from None
    swapped = orientation in (5, 6, 7, 8)
    return InspectedImage(
        format=image_format,
        sha256=hashlib.sha256(data).hexdigest(),
        bytes=len(data),
        width=height if swapped else width,
        height=width if swapped else height,
        pages=pages,
        orientation=orientation,
        preview=encoded,
        preview_width=preview.width,
        preview_height=preview.height,
    )


async def inspect_image(data: bytes, *, max_pixels: int, preview_edge: int) -> InspectedImage:
    """:func:`inspect_image_sync` in a worker thread, off the event loop."""
    return await anyio.to_thread.run_sync(
        lambda: inspect_image_sync(data, max_pixels=max_pixels, preview_edge=preview_edge)
    )
