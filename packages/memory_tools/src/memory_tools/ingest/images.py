"""Sniffing, bounded decoding and sanitised previews of untrusted image bytes.

Only four formats exist for this module: JPEG, PNG, WebP and GIF. At first use every other
libvips loader (and every operation libvips marks untrusted) is blocked, so no code path can
reach an SVG, PDF, TIFF or HEIF parser whatever the bytes say. For each upload:

1. the magic bytes must name one of the four formats (a declared type or name never counts);
2. the loader libvips would pick must be that format's loader;
3. the image's structure is walked to its logical end (:mod:`memory_tools.ingest.structure`);
   archive, HTML, script or PDF bytes after it (a polyglot) are refused;
4. the header is read and ``width x height x pages`` is checked against the pixel limit
   before any pixel is decoded, and so is whether the compressed data can hold that many
   pixels at all (a 633-byte JPEG claiming 6000 x 6000 cannot); the capture time, camera,
   orientation and location are read from the same header's EXIF, tag by tag
   (:mod:`memory_tools.ingest.exif`: a refused tag is left out, never the image);
5. a sanitised WebP preview is made (shrink-on-load, EXIF auto-orientation, sRGB, first frame,
   no metadata), which reads the whole first frame, so truncation or a corrupt stream fails
   here; the frames of an animation are decoded too.

Steps 1-4 are :func:`read_header`, cheap in memory; step 5 is :func:`decode_preview`. Both are
CPU-bound and synchronous. :func:`inspect_image` runs them in worker threads and holds the
decode to a budget of pixels in flight (:class:`~memory_tools.capacity.DecodeAdmission`).

Decoders are strict: ``fail_on`` is ``"warning"`` for JPEG, because libjpeg reports corrupt
entropy data and scans cut short ("premature end of data segment", "bad Huffman code") only as
warnings, and ``"error"`` for the others (libpng's warnings include harmless ones about ICC
profiles). Some damage no decoder reports: libjpeg-turbo decodes an invalid Huffman code in a
baseline scan as zero, so bytes overwritten in place in a baseline JPEG pass (a scan that ends
early does not), and a lossy WebP has no checksum.
"""

from __future__ import annotations

import hashlib
import re
import threading
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread
import pyvips

from memory_tools.capacity import TRIM_AFTER_PIXELS, DecodeAdmission, trim_allocator
from memory_tools.errors import InvalidImage
from memory_tools.ingest import structure
from memory_tools.ingest.exif import Capture, read_capture

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
    # When, with what and where it was taken, from its EXIF (memory_tools.ingest.exif).
    capture: Capture = field(default_factory=Capture)


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
    capture: Capture = field(default_factory=Capture)


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
    layout = structure.walk(data, image_format.name)
    structure.refuse_polyglots(data, layout)
    try:
        header = pyvips.Image.new_from_buffer(data, "", access="sequential", fail_on="error")
        pages = max(1, _int_field(header, "n-pages", 1))
        width, height = header.width, header.height
        orientation = _int_field(header, "orientation", 1)
        has_profile = header.get_typeof("icc-profile-data") != 0
        # Tag by tag, never raising: hostile EXIF loses its tags, not the image.
        capture = read_capture(header)
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
    structure.refuse_impossible_sizes(data, layout, image_format.name, width, height)
    return ImageHeader(
        format=image_format,
        width=width,
        height=height,
        pages=pages,
        orientation=orientation,
        has_profile=has_profile,
        transparent=layout.transparent,
        decode_pixels=decode_pixels,
        capture=capture,
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
        capture=header.capture,
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
