"""Sniffing, bounded decoding and sanitised previews of untrusted image bytes (§12.2).

Only four formats exist for this module: JPEG, PNG, WebP and GIF. At first use every other
libvips loader (and every operation libvips marks untrusted) is blocked, so no code path can
reach an SVG, PDF, TIFF or HEIF parser whatever the bytes say. For each upload:

1. the magic bytes must name one of the four formats (a declared type or name never counts);
2. the loader libvips would pick must be that format's loader;
3. the image's structure is walked to its logical end; archive, HTML, script or PDF bytes
   after it (a polyglot) are refused;
4. the header is read and ``width x height x pages`` is checked against the pixel limit
   before any pixel is decoded, and so is whether the compressed data can hold that many
   pixels at all (a 633-byte JPEG claiming 6000 x 6000 cannot);
5. a sanitised WebP preview is made (shrink-on-load, EXIF auto-orientation, sRGB, first frame,
   no metadata), which reads the whole first frame, so truncation or a corrupt stream fails
   here; the frames of an animation are decoded too.

Steps 1-4 are :func:`read_header`, cheap in memory; step 5 is :func:`decode_preview`. Both are
CPU-bound and synchronous. :func:`inspect_image` runs them in worker threads and holds the
decode to a budget of pixels in flight (:class:`~memory_tools.ingest.admission.DecodeAdmission`).

Decoders are strict: ``fail_on`` is ``"warning"`` for JPEG, because libjpeg reports corrupt
entropy data and scans cut short ("premature end of data segment", "bad Huffman code") only as
warnings, and ``"error"`` for the others (libpng's warnings include harmless ones about ICC
profiles). A baseline JPEG whose entropy data was overwritten but still decodes to the right
length is not detectable by any decoder, and neither is a lossy WebP's.
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
from memory_tools.ingest.admission import TRIM_AFTER_PIXELS, DecodeAdmission, trim_allocator

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
# How strict each decoder is (libvips' fail_on; see the module docstring).
FAIL_ON = {"jpeg": "warning", "png": "error", "webp": "error", "gif": "error"}
# JPEG frames whose entropy data is Huffman-coded (baseline, extended, progressive, lossless):
# each 8x8 block costs at least one bit. Arithmetic coding has no such floor.
_HUFFMAN_FRAMES = frozenset({0xC0, 0xC1, 0xC2, 0xC3})
# Deflate's largest possible ratio (258 bytes from two 1-bit codes).
_DEFLATE_MAX_RATIO = 1032
_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}

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


@dataclass(frozen=True)
class ImageHeader:
    """What :func:`read_header` learned before any pixel is decoded."""

    format: ImageFormat
    width: int  # as stored, before EXIF orientation
    height: int
    pages: int
    orientation: int
    has_profile: bool
    transparent: bool  # GIF only: a graphic control block declares a transparent colour
    decode_pixels: int  # what decoding will hold: the larger of the image and a GIF's screen


_setup_lock = threading.Lock()
_setup_done = False


def lock_down_libvips() -> None:
    """Block every loader but the four buffer loaders, and all untrusted operations. Idempotent.

    Also switches libvips' operation cache off: every image is seen once, so the cache only
    held decoded pixels (165 MB after one 40 MP GIF) and file descriptors.

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
        pyvips.cache_set_max(0)
        pyvips.cache_set_max_mem(0)
        pyvips.cache_set_max_files(0)
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


def _jpeg_end(data: bytes, pixels: list[tuple[int, int]], frames: list[int]) -> int:
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
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # a frame header
            frames.append(marker)
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


@dataclass(frozen=True)
class _Layout:
    """What walking a file's own structure found."""

    end: int  # where the structure says the image stops
    pixels: list[tuple[int, int]]  # byte ranges of compressed pixel data
    transparent: bool = False  # GIF only: a graphic control block declares a transparent colour
    jpeg_frame: int | None = None  # JPEG only: the frame header's marker (0xC0 baseline, ...)


def _layout(data: bytes, image_format: ImageFormat) -> _Layout:
    """Walk the file's structure once; :class:`InvalidImage` if it is corrupt or truncated."""
    pixels: list[tuple[int, int]] = []
    if image_format.name == "gif":
        end, transparent = _walk_gif(data, pixels)
        return _Layout(end, pixels, transparent=transparent)
    if image_format.name == "jpeg":
        frames: list[int] = []
        end = _jpeg_end(data, pixels, frames)
        return _Layout(end, pixels, jpeg_frame=frames[0] if frames else None)
    if image_format.name == "png":
        return _Layout(_png_end(data, pixels), pixels)
    return _Layout(_webp_end(data, pixels), pixels)


def _refuse_impossible_sizes(
    data: bytes, layout: _Layout, image_format: ImageFormat, width: int, height: int
) -> None:
    """Refuse dimensions the compressed pixel data is too small to hold, before decoding.

    Decoders fill what is missing with grey or black, so such a file would cost the decode of
    an image it does not contain (a 633-byte JPEG claiming 6000 x 6000 is 36 MP).
    """
    compressed = sum(stop - start for start, stop in layout.pixels)
    if image_format.name == "jpeg" and layout.jpeg_frame in _HUFFMAN_FRAMES:
        possible = compressed * 8 >= -(-width // 8) * -(-height // 8)
    elif image_format.name == "png":
        bits = data[24] * _PNG_CHANNELS.get(data[25], 4)  # IHDR: bit depth, colour type
        raw = height * (1 + -(-width * bits // 8))  # each row: a filter byte and the samples
        possible = compressed * _DEFLATE_MAX_RATIO >= raw
    else:
        return
    if not possible:
        raise InvalidImage(
            f"the {image_format.name.upper()} is corrupt: {compressed:,} bytes of image data "
            f"cannot hold {width}x{height} pixels"
        )


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
    fail_on = FAIL_ON[image_format.name]
    if image_format.name == "jpeg":
        shrink = _jpeg_shrink(long_edge, edge)
        loaded = pyvips.Image.jpegload_buffer(
            data, shrink=shrink, access="sequential", fail_on=fail_on
        )
        image = loaded.thumbnail_image(edge, height=edge, size="down", **options)
    elif opaque_gif:
        # Without transparency an alpha band (the loader may add one) is dropped before
        # resizing (a quarter less work), and a palette picture is resized with a linear
        # kernel: lanczos3 rings on its hard edges and dithering. No EXIF or ICC profile exists.
        image = pyvips.Image.gifload_buffer(data, access="sequential", fail_on=fail_on)
        if image.hasalpha():
            image = image.extract_band(0, n=image.bands - 1)
        scale = edge / max(image.width, image.height)
        if scale < 1:
            image = image.resize(scale, kernel="linear")
    else:
        # thumbnail_buffer does not pass its own fail_on argument to the loader (libvips
        # 8.18: a cut PNG became a black preview); the loader's options string does.
        image = pyvips.Image.thumbnail_buffer(
            data, edge, height=edge, size="down", option_string=f"fail_on={fail_on}", **options
        )
    return image


def _band_min(image: pyvips.Image, band: int) -> float:
    value = image.extract_band(band).min()
    return value[0] if isinstance(value, tuple) else value


def read_header(data: bytes, *, max_pixels: int) -> ImageHeader:
    """Steps 1-4: type, structure, header and pixel limit, without decoding any pixel.

    :class:`InvalidImage` names what is wrong.
    """
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
    decode_pixels = width * height * pages
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
        decode_pixels = max(decode_pixels, screen_w * screen_h * pages)
    if width * height * pages > max_pixels:
        raise InvalidImage(
            f"the image has {width * height * pages:,} pixels "
            f"({width}x{height}x{pages} frames); the limit is {max_pixels:,}"
        )
    _refuse_impossible_sizes(data, layout, image_format, width, height)
    return ImageHeader(
        format=image_format,
        width=width,
        height=height,
        pages=pages,
        orientation=orientation,
        has_profile=has_profile,
        transparent=layout.transparent,
        decode_pixels=decode_pixels,
    )


def decode_preview(data: bytes, header: ImageHeader, *, preview_edge: int) -> InspectedImage:
    """Step 5: decode ``data`` (already read by :func:`read_header`) and build its preview."""
    image_format = header.format
    try:
        # thumbnail turns CMYK and greyscale into sRGB itself; an embedded ICC profile needs a
        # real colour transform, which is costly, so it is asked for only then.
        options: dict[str, Any] = {"output_profile": "srgb"} if header.has_profile else {}
        preview = _thumbnail(
            data,
            image_format,
            max(header.width, header.height),
            preview_edge,
            options,
            opaque_gif=image_format.name == "gif" and not header.transparent,
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
        if header.pages > 1:
            # The preview used the first frame; every other frame must decode as well.
            frames = pyvips.Image.new_from_buffer(
                data, "", access="sequential", fail_on=FAIL_ON[image_format.name], n=-1
            )
            frames.avg()
    except pyvips.Error:
        raise InvalidImage(f"the {image_format.name} data is corrupt or truncated") from None
    swapped = header.orientation in (5, 6, 7, 8)
    return InspectedImage(
        format=image_format,
        sha256=hashlib.sha256(data).hexdigest(),
        bytes=len(data),
        width=header.height if swapped else header.width,
        height=header.width if swapped else header.height,
        pages=header.pages,
        orientation=header.orientation,
        preview=encoded,
        preview_width=preview.width,
        preview_height=preview.height,
    )


def inspect_image_sync(data: bytes, *, max_pixels: int, preview_edge: int) -> InspectedImage:
    """Validate ``data`` and build its preview; :class:`InvalidImage` names what is wrong.

    Not admitted against any budget: for tools and benchmarks that decode one image at a time.
    """
    header = read_header(data, max_pixels=max_pixels)
    return decode_preview(data, header, preview_edge=preview_edge)


async def inspect_image(
    data: bytes, *, max_pixels: int, preview_edge: int, admission: DecodeAdmission
) -> InspectedImage:
    """Validate ``data`` and build its preview in worker threads, the decode admitted first.

    The header is read first (cheaply) for the pixel count; the decode then waits until
    ``admission`` has room for it, and after a large decode the memory it freed is handed back
    to the system before its pixels leave the budget.
    """
    header = await anyio.to_thread.run_sync(lambda: read_header(data, max_pixels=max_pixels))

    def decode() -> InspectedImage:
        try:
            return decode_preview(data, header, preview_edge=preview_edge)
        finally:
            if header.decode_pixels >= TRIM_AFTER_PIXELS:
                trim_allocator()

    async with admission.admit(header.decode_pixels):
        # Not abandoned on cancellation: the budget is held until the decode really ends.
        return await anyio.to_thread.run_sync(decode)
