"""Validation and previews over a corpus of generated good, awkward and hostile files."""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import pyvips

from memory_tools.capacity import DecodeAdmission
from memory_tools.errors import InvalidImage
from memory_tools.ingest.images import (
    FORMATS,
    ImageHeader,
    decode_preview,
    inspect_image,
    inspect_image_sync,
    lock_down_libvips,
    sniff,
)

EDGE = 256
MAX_PIXELS = 40_000_000


def _rgb(width: int, height: int) -> pyvips.Image:
    """A deterministic colourful test picture."""
    x = pyvips.Image.xyz(width, height)
    red = (x[0] * 255 / max(width - 1, 1)).cast("uchar")
    green = (x[1] * 255 / max(height - 1, 1)).cast("uchar")
    blue = ((x[0] + x[1]) % 256).cast("uchar")
    return red.bandjoin([green, blue]).copy(interpretation="srgb")


def _png_chunk(kind: bytes, payload: bytes) -> bytes:
    crc = zlib.crc32(kind + payload) & 0xFFFFFFFF
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", crc)


def _png_with_header(width: int, height: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00" + b"\x00" * 3)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", ihdr)
        + _png_chunk(b"IDAT", idat)
        + _png_chunk(b"IEND", b"")
    )


def _gif_huge_screen() -> bytes:
    one_pixel = _rgb(1, 1).gifsave_buffer()
    return one_pixel[:6] + struct.pack("<HH", 65535, 65535) + one_pixel[10:]


def _jpeg_claiming(width: int, height: int) -> bytes:
    data = bytearray(_rgb(16, 16).jpegsave_buffer(Q=80))
    sof = data.find(b"\xff\xc0")
    data[sof + 5 : sof + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def _noisy_photo(width: int, height: int) -> pyvips.Image:
    """Grain over a gradient: entropy data that fills the whole scan, as a photo's does."""
    # Small enough for the save tests' 64 KiB limit, which reuse this corpus.
    grain = pyvips.Image.gaussnoise(width, height, sigma=40, mean=0, seed=3)
    return (_rgb(width, height) * 0.6 + grain + 40).cast("uchar").copy(interpretation="srgb")


def _jpeg_scan(data: bytes) -> tuple[int, int]:
    """Where the first scan's entropy-coded data starts and stops (segments walked in order)."""
    position = 2
    while data[position + 1] != 0xDA:
        position += 2 + int.from_bytes(data[position + 2 : position + 4], "big")
    start = position + 2 + int.from_bytes(data[position + 2 : position + 4], "big")
    stop = re.compile(rb"\xff[^\x00\xd0-\xd7]").search(data, start)
    assert stop is not None
    return start, stop.start()


def _jpeg_scan_cut(data: bytes, fraction: float) -> bytes:
    """``fraction`` of the first scan cut out of its middle; every marker kept."""
    start, stop = _jpeg_scan(data)
    cut_from = start + (stop - start) // 3
    return data[:cut_from] + data[cut_from + int((stop - start) * fraction) :]


def _jpeg_scan_overwritten(data: bytes, count: int) -> bytes:
    """``count`` bytes in the middle of the first scan replaced by others (never 0xFF)."""
    start, stop = _jpeg_scan(data)
    middle = (start + stop) // 2
    garbage = bytes((byte * 73 + 11) % 0xFF for byte in range(count))
    return data[:middle] + garbage + data[middle + count :]


def _cut_short(data: bytes) -> bytes:
    """The first 60 % of ``data``."""
    return data[: len(data) * 6 // 10]


def _png_rewritten(data: bytes, change: Callable[[bytes], bytes]) -> bytes:
    """The same PNG with every IDAT payload passed through ``change``, checksums made good."""
    out, position = bytearray(data[:8]), 8
    while position < len(data):
        length = int.from_bytes(data[position : position + 4], "big")
        kind = data[position + 4 : position + 8]
        payload = data[position + 8 : position + 8 + length]
        out += _png_chunk(kind, change(payload) if kind == b"IDAT" else payload)
        position += 12 + length
    return bytes(out)


def _png_claiming(width: int, height: int) -> bytes:
    data = bytearray(_rgb(16, 16).pngsave_buffer())
    data[16:24] = struct.pack(">II", width, height)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])) & 0xFFFFFFFF)
    return bytes(data)


def _webp_bitstream_cut() -> bytes:
    """A lossy WebP whose VP8 data lost its last 40 %, with the RIFF and chunk sizes fixed."""
    data = _noisy_photo(300, 200).webpsave_buffer(Q=80, keep=pyvips.enums.ForeignKeep.NONE)
    kind, length = data[12:16], int.from_bytes(data[16:20], "little")
    assert kind == b"VP8 "
    payload = data[20 : 20 + int(length * 0.6) // 2 * 2]
    body = b"WEBP" + kind + len(payload).to_bytes(4, "little") + payload
    return b"RIFF" + len(body).to_bytes(4, "little") + body


def _bad_png_crc() -> bytes:
    data = bytearray(_rgb(32, 32).pngsave_buffer())
    idat = data.find(b"IDAT")
    data[idat + 8] ^= 0xFF
    return bytes(data)


def _png_text_after_pixels() -> bytes:
    data = _rgb(16, 16).pngsave_buffer()
    iend = data.rfind(b"IEND") - 4
    text = _png_chunk(b"tEXt", b"Comment\x00<script>alert(1)</script>")
    return data[:iend] + text + data[iend:]


def _webp_with_markup_chunk() -> bytes:
    data = bytearray(_rgb(16, 16).webpsave_buffer())
    extra = b"XMP " + (40).to_bytes(4, "little") + b"<html><script>x</script></html>".ljust(40)
    data += extra
    data[4:8] = (len(data) - 8).to_bytes(4, "little")
    return bytes(data)


def _animated_gif(frames: int, size: int = 24) -> bytes:
    pages = [(_rgb(size, size) * (index + 1) % 256).cast("uchar") for index in range(frames)]
    strip = pyvips.Image.arrayjoin(pages, across=1).copy()
    strip.set_type(pyvips.GValue.gint_type, "page-height", size)
    strip.set_type(pyvips.GValue.array_int_type, "delay", [100] * frames)
    return strip.gifsave_buffer()


def _rotated_jpeg(orientation: int) -> bytes:
    image = _rgb(40, 20).copy()
    image.set_type(pyvips.GValue.gint_type, "orientation", orientation)
    return image.jpegsave_buffer(Q=85, keep="all")


def _palette_png_with_alpha() -> bytes:
    rgba = _rgb(30, 30).bandjoin(pyvips.Image.black(30, 30).new_from_image(128).cast("uchar"))
    return rgba.pngsave_buffer(palette=True)


def _png16() -> bytes:
    return (_rgb(20, 10).cast("ushort") * 256).copy(interpretation="rgb16").pngsave_buffer()


def _cmyk_jpeg() -> bytes:
    return _rgb(32, 16).colourspace("cmyk").jpegsave_buffer(Q=85)


# The smallest shape of a Windows executable: "MZ", e_lfanew at 0x3C, "PE\0\0" there.
_PE_STUB = b"MZ" + b"\x90" * 58 + (0x40).to_bytes(4, "little") + b"PE\0\0" + b"\0" * 64


def _fixed(data: bytes) -> Callable[[], bytes]:
    return lambda: data


@dataclass(frozen=True)
class Good:
    name: str
    make: Callable[[], bytes]
    mime: str
    width: int
    height: int
    pages: int = 1
    orientation: int = 1


GOOD = [
    Good("baseline jpeg", lambda: _rgb(64, 48).jpegsave_buffer(Q=90), "image/jpeg", 64, 48),
    Good(
        "progressive jpeg",
        lambda: _rgb(64, 48).jpegsave_buffer(interlace=True),
        "image/jpeg",
        64,
        48,
    ),
    Good("rgb png", lambda: _rgb(50, 30).pngsave_buffer(), "image/png", 50, 30),
    Good(
        "grey png",
        lambda: _rgb(50, 30).colourspace("b-w").pngsave_buffer(),
        "image/png",
        50,
        30,
    ),
    Good("palette png with transparency", _palette_png_with_alpha, "image/png", 30, 30),
    Good("16-bit png", _png16, "image/png", 20, 10),
    Good("lossy webp", lambda: _rgb(40, 40).webpsave_buffer(Q=70), "image/webp", 40, 40),
    Good(
        "lossless webp with alpha",
        lambda: _rgb(40, 20).bandjoin(255).webpsave_buffer(lossless=True),
        "image/webp",
        40,
        20,
    ),
    Good("static gif", lambda: _rgb(33, 21).gifsave_buffer(), "image/gif", 33, 21),
    Good("animated gif", lambda: _animated_gif(3), "image/gif", 24, 24, pages=3),
    Good("exif rotated 90", lambda: _rotated_jpeg(6), "image/jpeg", 20, 40, orientation=6),
    Good("exif rotated 180", lambda: _rotated_jpeg(3), "image/jpeg", 40, 20, orientation=3),
    Good("exif transverse", lambda: _rotated_jpeg(7), "image/jpeg", 20, 40, orientation=7),
    Good("cmyk jpeg", _cmyk_jpeg, "image/jpeg", 32, 16),
    Good("wide image", lambda: _rgb(1200, 300).jpegsave_buffer(), "image/jpeg", 1200, 300),
    Good(
        "jpeg with zero padding",
        lambda: _rgb(16, 16).jpegsave_buffer() + b"\x00" * 32,
        "image/jpeg",
        16,
        16,
    ),
    Good(
        # Phones append a video after the JPEG ("motion photos"); "MZ" occurs in such data by
        # chance, and without a PE header behind it, it is not an executable.
        "jpeg with trailing data that happens to hold MZ",
        lambda: _rgb(16, 16).jpegsave_buffer() + b"\x00\x00\x00\x18ftypmp42MZ" + b"\x07" * 200,
        "image/jpeg",
        16,
        16,
    ),
]


@dataclass(frozen=True)
class Bad:
    name: str
    make: Callable[[], bytes]
    reason: str  # a fragment the error message must contain


BAD = [
    Bad("zero bytes", _fixed(b""), "empty"),
    Bad("one byte", _fixed(b"\xff"), "unknown type"),
    Bad("random bytes", _fixed(bytes(range(256)) * 4), "unknown type"),
    Bad("truncated jpeg", lambda: _rgb(64, 64).jpegsave_buffer()[:400], "truncated"),
    Bad("jpeg header only", lambda: _rgb(8, 8).jpegsave_buffer()[:20], "truncated"),
    Bad("truncated png", lambda: _rgb(64, 64).pngsave_buffer()[:200], "PNG"),
    Bad("bad png crc", _bad_png_crc, "corrupt"),
    Bad("truncated webp", lambda: _rgb(64, 64).webpsave_buffer()[:60], "WebP"),
    Bad("truncated gif", lambda: _rgb(64, 64).gifsave_buffer()[:50], "GIF"),
    Bad("50000x50000 png header", lambda: _png_with_header(50_000, 50_000), "pixels"),
    Bad("60000x60000 jpeg header", lambda: _jpeg_claiming(60_000, 60_000), "pixels"),
    # Within the pixel limit, but the data cannot hold the pixels (decoders fill in grey).
    Bad("sub-1-KB jpeg claiming 6000x6000", lambda: _jpeg_claiming(6000, 6000), "cannot hold"),
    Bad("png claiming 6000x6000", lambda: _png_claiming(6000, 6000), "cannot hold"),
    Bad(
        "jpeg with 40% of its scan cut out",
        lambda: _jpeg_scan_cut(_noisy_photo(240, 160).jpegsave_buffer(Q=85), 0.4),
        "corrupt or truncated",
    ),
    Bad(
        "jpeg cut short with its end marker put back",
        lambda: _cut_short(_noisy_photo(240, 160).jpegsave_buffer(Q=85)) + b"\xff\xd9",
        "corrupt or truncated",
    ),
    Bad(
        "progressive jpeg with 40% of its first scan cut out",
        lambda: _jpeg_scan_cut(_noisy_photo(240, 160).jpegsave_buffer(interlace=True), 0.4),
        "corrupt or truncated",
    ),
    Bad(
        "progressive jpeg with corrupt entropy data",
        lambda: _jpeg_scan_overwritten(_noisy_photo(240, 160).jpegsave_buffer(interlace=True), 200),
        "corrupt or truncated",
    ),
    Bad(
        "png with its pixel data cut (checksums good)",
        lambda: _png_rewritten(_noisy_photo(128, 96).pngsave_buffer(), lambda p: p[:-2000]),
        "corrupt or truncated",
    ),
    Bad(
        "png with corrupt pixel data (checksums good)",
        lambda: _png_rewritten(
            _noisy_photo(128, 96).pngsave_buffer(),
            lambda p: p[:5000] + bytes(range(7, 207)) + p[5200:],
        ),
        "corrupt or truncated",
    ),
    Bad("webp with its bitstream cut (sizes good)", _webp_bitstream_cut, "WebP"),
    Bad("gif with a huge logical screen", _gif_huge_screen, "pixels"),
    Bad("svg", _fixed(b'<svg xmlns="http://www.w3.org/2000/svg"><script/></svg>'), "SVG"),
    Bad(
        "svg with xml prolog",
        _fixed(b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg"/>'),
        "SVG",
    ),
    Bad("html", _fixed(b"<!DOCTYPE html><html><body>hi</body></html>"), "HTML"),
    Bad("pdf", _fixed(b"%PDF-1.7\n1 0 obj\n<<>>\nendobj\n%%EOF"), "PDF"),
    Bad("tiff", lambda: _rgb(8, 8).tiffsave_buffer(), "TIFF"),
    Bad("heic", _fixed(b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + b"\0" * 64), "HEIF"),
    Bad("avif", _fixed(b"\x00\x00\x00\x1cftypavif\x00\x00\x00\x00avifmif1" + b"\0" * 64), "HEIF"),
    Bad("zip", _fixed(b"PK\x03\x04\x14\x00\x00\x00" + b"\0" * 64), "ZIP"),
    Bad("gzip", _fixed(zlib.compress(b"x")[:0] + b"\x1f\x8b\x08\x00" + b"\0" * 32), "gzip"),
    Bad("bmp", _fixed(b"BM" + b"\0" * 64), "BMP"),
    Bad("riff wave", _fixed(b"RIFF\x24\x00\x00\x00WAVEfmt " + b"\0" * 32), "unknown type"),
    Bad(
        "jpeg+zip polyglot",
        lambda: _rgb(16, 16).jpegsave_buffer() + b"PK\x03\x04\x14\x00" + b"\0" * 40,
        "ZIP",
    ),
    Bad(
        "png+windows executable polyglot",
        lambda: _rgb(16, 16).pngsave_buffer() + _PE_STUB,
        "executable",
    ),
    Bad(
        "jpeg+mach-o polyglot",
        lambda: _rgb(16, 16).jpegsave_buffer() + b"\xcf\xfa\xed\xfe" + b"\0" * 60,
        "executable",
    ),
    Bad(
        "gif+shell script polyglot",
        lambda: _rgb(16, 16).gifsave_buffer() + b"\n#!/bin/sh\nrm -rf ~\n",
        "executable",
    ),
    Bad(
        "png+img onerror polyglot",
        lambda: _rgb(16, 16).pngsave_buffer() + b"<img src=x onerror=alert(1)>",
        "markup",
    ),
    Bad(
        "jpeg+svg onload polyglot",
        lambda: _rgb(16, 16).jpegsave_buffer() + b"<svg onload=alert(1)>",
        "markup",
    ),
    Bad(
        "gif+body onload polyglot",
        lambda: _rgb(16, 16).gifsave_buffer() + b"<BODY onload=alert(1)>",
        "markup",
    ),
    Bad(
        "webp+onerror handler",
        lambda: _rgb(16, 16).webpsave_buffer() + b"x onerror =alert(1)",
        "markup",
    ),
    Bad(
        "png+html polyglot",
        lambda: _rgb(16, 16).pngsave_buffer() + b"<html><script>alert(1)</script>",
        "markup",
    ),
    Bad(
        "gif+pdf polyglot",
        lambda: _rgb(16, 16).gifsave_buffer() + b"%PDF-1.4 trailing",
        "PDF",
    ),
    Bad(
        "script in a jpeg comment",
        lambda: (
            _rgb(16, 16).jpegsave_buffer()[:2]
            + b"\xff\xfe\x00\x1b<script>alert(1)</script>"
            + _rgb(16, 16).jpegsave_buffer()[2:]
        ),
        "markup",
    ),
    Bad(
        "png magic on jpeg bytes",
        lambda: b"\x89PNG\r\n\x1a\n" + _rgb(8, 8).jpegsave_buffer(),
        "PNG",
    ),
    Bad("jpeg magic on png bytes", lambda: b"\xff\xd8\xff" + _rgb(8, 8).pngsave_buffer(), "jpeg"),
    Bad("gif magic only", _fixed(b"GIF89a"), "GIF"),
    Bad("script in a png text chunk after the pixels", _png_text_after_pixels, "markup"),
    Bad("html in a webp metadata chunk", _webp_with_markup_chunk, "markup"),
    Bad("webp riff without payload", _fixed(b"RIFF\x04\x00\x00\x00WEBP"), "WebP"),
]


@pytest.fixture(autouse=True, scope="module")
def _locked() -> None:
    lock_down_libvips()


def test_the_corpora_are_large_enough() -> None:
    assert len(BAD) >= 30
    assert len(GOOD) + len(BAD) >= 45


@pytest.mark.parametrize("case", GOOD, ids=[case.name for case in GOOD])
def test_accepted_images_report_true_dimensions(case: Good) -> None:
    data = case.make()
    result = inspect_image_sync(data, max_pixels=MAX_PIXELS, preview_edge=EDGE)
    assert result.format.mime_type == case.mime
    assert (result.width, result.height) == (case.width, case.height)
    assert result.pages == case.pages
    assert result.orientation == case.orientation
    assert result.bytes == len(data)
    # The preview is a clean WebP, upright, within the edge limit, with no metadata.
    preview = pyvips.Image.new_from_buffer(result.preview, "")
    assert sniff(result.preview) is not None and sniff(result.preview).name == "webp"  # type: ignore[union-attr]
    assert (preview.width, preview.height) == (result.preview_width, result.preview_height)
    assert max(preview.width, preview.height) <= EDGE
    portrait = case.height > case.width
    assert (preview.height > preview.width) == portrait or preview.width == preview.height
    assert preview.get_typeof("exif-data") == 0
    assert preview.get_typeof("orientation") == 0 or preview.get("orientation") == 1
    assert preview.interpretation in ("srgb", "b-w")


@pytest.mark.parametrize("case", BAD, ids=[case.name for case in BAD])
def test_refused_files_name_the_reason(case: Bad) -> None:
    with pytest.raises(InvalidImage) as caught:
        inspect_image_sync(case.make(), max_pixels=MAX_PIXELS, preview_edge=EDGE)
    assert caught.value.code == "invalid_image"
    assert case.reason.lower() in caught.value.message.lower()


def test_frames_count_towards_the_pixel_limit() -> None:
    data = _animated_gif(5, size=40)
    inspect_image_sync(data, max_pixels=40 * 40 * 5, preview_edge=EDGE)
    with pytest.raises(InvalidImage, match="5 frames"):
        inspect_image_sync(data, max_pixels=40 * 40 * 5 - 1, preview_edge=EDGE)


def test_large_images_are_shrunk_to_the_preview_edge() -> None:
    result = inspect_image_sync(
        _rgb(3000, 1000).jpegsave_buffer(), max_pixels=MAX_PIXELS, preview_edge=EDGE
    )
    assert (result.preview_width, result.preview_height) == (EDGE, 85)


def _quadrants(width: int, height: int) -> pyvips.Image:
    """Four flat colours, one per quadrant (each exactly representable in a GIF palette)."""
    colours = [(200, 30, 40), (20, 160, 60), (30, 50, 210), (230, 220, 30)]
    tiles = [
        pyvips.Image.black(width // 2, height // 2).add(list(c)).cast("uchar") for c in colours
    ]
    top = tiles[0].join(tiles[1], "horizontal")
    bottom = tiles[2].join(tiles[3], "horizontal")
    return top.join(bottom, "vertical").copy(interpretation="srgb")


@pytest.mark.parametrize(
    "saver", ["jpegsave_buffer", "pngsave_buffer", "webpsave_buffer", "gifsave_buffer"]
)
def test_shrunk_previews_keep_the_colours(saver: str) -> None:
    data = getattr(_quadrants(800, 600), saver)()
    if saver == "gifsave_buffer":
        # The saver flags a transparent colour even when none is used: clear the flag, so this
        # is an opaque GIF (loaded without an alpha band).
        data = re.sub(
            rb"\x21\xf9\x04(.)",
            lambda m: b"\x21\xf9\x04" + bytes([m[1][0] & 0xFE]),
            data,
            flags=re.S,
        )
        assert pyvips.Image.gifload_buffer(data).bands == 3
    result = inspect_image_sync(data, max_pixels=MAX_PIXELS, preview_edge=EDGE)
    preview = pyvips.Image.new_from_buffer(result.preview, "")
    assert (preview.width, preview.height) == (EDGE, 192)
    assert preview.bands == 3  # opaque: no alpha band, and all three colour bands
    for (x, y), colour in zip(
        [(64, 48), (192, 48), (64, 144), (192, 144)],
        [(200, 30, 40), (20, 160, 60), (30, 50, 210), (230, 220, 30)],
        strict=True,
    ):
        found = preview.crop(x - 8, y - 8, 16, 16).stats()
        means = [found(4, band + 1)[0] for band in range(3)]
        assert means == pytest.approx(colour, abs=12), (saver, colour, means)


def test_transparent_gif_previews_keep_their_alpha() -> None:
    picture = _quadrants(800, 600)
    # Alpha 0 in the left half: the GIF saver maps it to its transparent colour.
    alpha = pyvips.Image.black(400, 600).join(pyvips.Image.black(400, 600).add(255), "horizontal")
    data = picture.bandjoin(alpha.cast("uchar")).copy(interpretation="srgb").gifsave_buffer()
    result = inspect_image_sync(data, max_pixels=MAX_PIXELS, preview_edge=EDGE)
    preview = pyvips.Image.new_from_buffer(result.preview, "")
    assert preview.bands == 4
    assert preview.extract_band(3).crop(0, 0, 100, 192).max() == 0
    assert preview.extract_band(3).crop(156, 0, 100, 192).min() == 255


def _rechunk_gif(data: bytes, sizes: list[int]) -> bytes:
    """The same GIF with each frame's LZW data re-split into sub-blocks of ``sizes`` (cycled).

    Encoders write full 255-byte sub-blocks; the format allows any length from 1 to 255.
    """
    flags = data[10]
    position = 13 + (3 * 2 ** ((flags & 7) + 1) if flags & 0x80 else 0)
    out = bytearray(data[:position])

    def blocks(at: int) -> tuple[bytes, int]:
        payload = bytearray()
        while data[at]:
            payload += data[at + 1 : at + 1 + data[at]]
            at += 1 + data[at]
        return bytes(payload), at + 1

    while data[position] != 0x3B:
        if data[position] == 0x21:
            _payload, end = blocks(position + 2)
            out += data[position:end]
            position = end
            continue
        local = data[position + 9]
        header_end = position + 10 + (3 * 2 ** ((local & 7) + 1) if local & 0x80 else 0) + 1
        out += data[position:header_end]
        payload, position = blocks(header_end)
        at, turn = 0, 0
        while at < len(payload):
            piece = payload[at : at + sizes[turn % len(sizes)]]
            out += bytes([len(piece)]) + piece
            at, turn = at + len(piece), turn + 1
        out += b"\x00"
    return bytes(out + b"\x3b")


def _noisy(width: int, height: int) -> pyvips.Image:
    return (
        (pyvips.Image.gaussnoise(width, height, sigma=60, mean=128, seed=5) * [1, 0.8, 0.6])
        .cast("uchar")
        .copy(interpretation="srgb")
    )


@pytest.mark.parametrize("sizes", [[100], [1, 255, 7], [255, 255, 254]])
def test_gifs_with_any_sub_block_lengths_are_walked_to_their_end(sizes: list[int]) -> None:
    original = _noisy(300, 200).gifsave_buffer()
    data = _rechunk_gif(original, sizes)
    assert data != original
    result = inspect_image_sync(data, max_pixels=MAX_PIXELS, preview_edge=EDGE)
    assert (result.width, result.height) == (300, 200)
    # The walk found the real end: what follows it is seen.
    with pytest.raises(InvalidImage, match="polyglot"):
        inspect_image_sync(
            data + b"PK\x03\x04" + bytes(40), max_pixels=MAX_PIXELS, preview_edge=EDGE
        )


def test_a_gif_cut_inside_its_pixel_data_is_truncated() -> None:
    data = _noisy(600, 400).gifsave_buffer()
    for cut in (len(data) // 3, len(data) // 2 + 1, len(data) - 3):
        with pytest.raises(InvalidImage, match="truncated"):
            inspect_image_sync(data[:cut], max_pixels=MAX_PIXELS, preview_edge=EDGE)


def test_other_loaders_are_blocked_after_lock_down() -> None:
    tiff = _rgb(8, 8).tiffsave_buffer()
    with pytest.raises(pyvips.Error):
        pyvips.Image.new_from_buffer(tiff, "")
    with pytest.raises(pyvips.Error):
        pyvips.Image.thumbnail_buffer(tiff, 16)


async def test_inspection_runs_off_the_event_loop() -> None:
    admission = DecodeAdmission(MAX_PIXELS)
    result = await inspect_image(
        _rgb(20, 20).pngsave_buffer(),
        max_pixels=MAX_PIXELS,
        preview_edge=EDGE,
        admission=admission,
    )
    assert result.width == 20
    assert admission.admitted == 1 and admission.high_water == 20 * 20


def test_the_jpeg_decoder_itself_refuses_a_scan_that_ends_early() -> None:
    """Without the size check, decoding the 6000 x 6000 claim still fails (fail_on=warning)."""
    data = _jpeg_claiming(6000, 6000)
    assert len(data) < 1000
    header = ImageHeader(
        format=FORMATS["jpeg"],
        width=6000,
        height=6000,
        pages=1,
        orientation=1,
        has_profile=False,
        transparent=False,
        decode_pixels=36_000_000,
    )
    with pytest.raises(InvalidImage, match="corrupt or truncated"):
        decode_preview(data, header, preview_edge=EDGE)


def test_the_size_check_leaves_room_for_flat_pictures() -> None:
    """The floors (1 bit per JPEG block, deflate's 1032:1) pass the flattest real images."""
    flat = pyvips.Image.black(4000, 3000).new_from_image([90, 120, 200]).cast("uchar")
    flat = flat.copy(interpretation="srgb")
    for data in (
        flat.jpegsave_buffer(Q=75, optimize_coding=True),
        flat.jpegsave_buffer(Q=75, optimize_coding=True, interlace=True),
        flat.pngsave_buffer(compression=9),
        flat.colourspace("b-w").pngsave_buffer(compression=9, bitdepth=1),
    ):
        assert inspect_image_sync(data, max_pixels=MAX_PIXELS, preview_edge=EDGE).width == 4000
