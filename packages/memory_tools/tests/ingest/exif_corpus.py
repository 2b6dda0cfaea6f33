"""Generated images with EXIF, good and hostile, for the capture tests (no binary blobs).

Good files are written by libvips from fields set on an image (it builds the EXIF block);
hostile ones carry an EXIF block built here byte by byte (a TIFF header and IFDs), spliced
into a JPEG as its APP1 segment, so that wrong types, NULs, bad offsets and loops exist.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import pyvips

ASCII, SHORT, LONG, RATIONAL = 2, 3, 4, 5
_SIZES = {ASCII: 1, SHORT: 2, LONG: 4, RATIONAL: 8}
MAKE, MODEL, ORIENTATION, EXIF_IFD, GPS_IFD = 0x010F, 0x0110, 0x0112, 0x8769, 0x8825
DATE_ORIGINAL, OFFSET_ORIGINAL = 0x9003, 0x9011
GPS_LAT_REF, GPS_LAT, GPS_LON_REF, GPS_LON = 1, 2, 3, 4


def picture(width: int = 24, height: int = 16) -> pyvips.Image:
    """A small colourful picture with no metadata."""
    x = pyvips.Image.xyz(width, height)
    red = (x[0] * 10 % 256).cast("uchar")
    return red.bandjoin([(x[1] * 15 % 256).cast("uchar"), red]).copy(interpretation="srgb")


def with_fields(fields: dict[str, str], orientation: int | None = None) -> pyvips.Image:
    """``picture()`` carrying EXIF string fields (``exif-ifd0-Make``...) libvips writes out."""
    image = picture().copy()
    for name, value in fields.items():
        image.set_type(pyvips.GValue.gstr_type, name, value)
    if orientation is not None:
        image.set_type(pyvips.GValue.gint_type, "orientation", orientation)
    return image


@dataclass
class Entry:
    """One IFD entry: its tag, type, count and raw value bytes (placed after the IFD)."""

    tag: int
    kind: int
    value: bytes
    count: int | None = None


@dataclass
class Tiff:
    """A little-endian TIFF block: IFD0, an optional Exif IFD and GPS IFD."""

    ifd0: list[Entry] = field(default_factory=list[Entry])
    exif: list[Entry] | None = None
    gps: list[Entry] | None = None

    def build(self) -> bytes:
        """The bytes, with the sub-IFD pointers filled in."""
        ifd0 = list(self.ifd0)
        # Lay out: header (8), IFD0, its data, Exif IFD, its data, GPS IFD, its data.
        blocks: list[tuple[str, list[Entry]]] = [("ifd0", ifd0)]
        if self.exif is not None:
            ifd0.append(Entry(EXIF_IFD, LONG, b"\0\0\0\0"))
            blocks.append(("exif", self.exif))
        if self.gps is not None:
            ifd0.append(Entry(GPS_IFD, LONG, b"\0\0\0\0"))
            blocks.append(("gps", self.gps))
        offsets: dict[str, int] = {}
        position = 8
        for name, entries in blocks:
            offsets[name] = position
            position += 2 + 12 * len(entries) + 4
            position += sum(len(e.value) for e in entries if len(e.value) > 4)
        out = bytearray(b"II*\x00" + struct.pack("<I", 8))
        for name, entries in blocks:
            for entry in entries:
                if entry.tag == EXIF_IFD and "exif" in offsets:
                    entry.value = struct.pack("<I", offsets["exif"])
                if entry.tag == GPS_IFD and "gps" in offsets:
                    entry.value = struct.pack("<I", offsets["gps"])
            out += _ifd(entries, offsets[name])
        return bytes(out)


def _ifd(entries: list[Entry], at: int) -> bytes:
    data_at = at + 2 + 12 * len(entries) + 4
    head = bytearray(struct.pack("<H", len(entries)))
    data = bytearray()
    for entry in entries:
        count = entry.count
        if count is None:
            count = len(entry.value) // _SIZES[entry.kind]
        if len(entry.value) > 4:
            head += struct.pack("<HHII", entry.tag, entry.kind, count, data_at + len(data))
            data += entry.value
        else:
            head += struct.pack("<HHI", entry.tag, entry.kind, count) + entry.value.ljust(4, b"\0")
    return bytes(head + struct.pack("<I", 0) + data)


def ascii_value(text: bytes) -> bytes:
    """An ASCII value with its terminating NUL."""
    return text + b"\0"


def rationals(*pairs: tuple[int, int]) -> bytes:
    """RATIONAL values."""
    return b"".join(struct.pack("<II", n, d) for n, d in pairs)


def jpeg_with_exif(tiff: bytes) -> bytes:
    """``picture()`` as a JPEG whose APP1 segment holds ``tiff`` as its EXIF."""
    plain = picture().jpegsave_buffer(Q=80, keep=pyvips.enums.ForeignKeep.NONE)
    payload = b"Exif\x00\x00" + tiff
    segment = b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload
    return plain[:2] + segment + plain[2:]
