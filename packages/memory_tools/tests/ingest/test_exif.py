"""When and with what a photo was taken (docs/design.md#capture): EXIF read at save, tag by tag.

Good files (JPEG, WebP and PNG written by libvips, with and without an offset) give their
capture fields; the hostile corpus (absurd dates, oversized, NUL and control characters, wrong
types, malformed and looping IFDs, impossible coordinates) loses only the refused tags, and
every one of its files is still accepted with a preview that carries no EXIF.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
import pyvips

from memory_db import MemorySettings
from memory_tools.ingest.exif import Capture, kept_capture
from memory_tools.ingest.images import inspect_image_sync

from .exif_corpus import (
    ASCII,
    DATE_ORIGINAL,
    GPS_LAT,
    GPS_LAT_REF,
    GPS_LON,
    GPS_LON_REF,
    LONG,
    MAKE,
    MODEL,
    OFFSET_ORIGINAL,
    ORIENTATION,
    RATIONAL,
    SHORT,
    Entry,
    Tiff,
    ascii_value,
    jpeg_with_exif,
    rationals,
    with_fields,
)

TAKEN = {
    "exif-ifd0-Make": "Canon",
    "exif-ifd0-Model": "EOS 5D Mark IV",
    "exif-ifd2-DateTimeOriginal": "2023:03:14 10:11:12",
}
OFFSET = {"exif-ifd2-OffsetTimeOriginal": "+01:00"}
GPS = {
    "exif-ifd3-GPSLatitudeRef": "S",
    "exif-ifd3-GPSLatitude": "33/1 51/1 3540/100",
    "exif-ifd3-GPSLongitudeRef": "E",
    "exif-ifd3-GPSLongitude": "151/1 12/1 3000/100",
}
SAVERS: dict[str, Callable[[pyvips.Image], bytes]] = {
    "jpeg": lambda image: image.jpegsave_buffer(Q=85),
    "webp": lambda image: image.webpsave_buffer(Q=85),
    "png": lambda image: image.pngsave_buffer(),
}


def _capture(data: bytes) -> Capture:
    inspected = inspect_image_sync(data, max_pixels=10**6, preview_edge=64)
    # Whatever the EXIF said, the preview carries none of it.
    assert pyvips.Image.new_from_buffer(inspected.preview, "").get_typeof("exif-data") == 0
    return inspected.capture


@pytest.mark.parametrize("saver", SAVERS)
def test_an_instant_with_its_offset_camera_and_orientation(saver: str) -> None:
    capture = _capture(SAVERS[saver](with_fields(TAKEN | OFFSET | GPS, orientation=6)))
    assert capture.taken_at == datetime(2023, 3, 14, 9, 11, 12, tzinfo=UTC)
    assert capture.offset_minutes == 60
    assert (capture.camera_make, capture.camera_model) == ("Canon", "EOS 5D Mark IV")
    assert capture.orientation == 6
    assert (capture.latitude, capture.longitude) == (-33.859833, 151.208333)
    assert capture.ignored == ()


@pytest.mark.parametrize("saver", SAVERS)
def test_a_time_without_offset_is_the_wall_clock_read_as_utc(saver: str) -> None:
    capture = _capture(SAVERS[saver](with_fields(TAKEN)))
    assert capture.taken_at == datetime(2023, 3, 14, 10, 11, 12, tzinfo=UTC)
    assert capture.offset_minutes is None


def test_a_negative_offset_and_no_exif_at_all() -> None:
    west = with_fields(TAKEN | {"exif-ifd2-OffsetTimeOriginal": "-05:30"})
    capture = _capture(west.jpegsave_buffer())
    assert capture.taken_at == datetime(
        2023, 3, 14, 10, 11, 12, tzinfo=timezone(-timedelta(hours=5, minutes=30))
    )
    assert capture.offset_minutes == -330
    plain = pyvips.Image.black(8, 8).jpegsave_buffer(keep=pyvips.enums.ForeignKeep.NONE)
    assert _capture(plain) == Capture()
    assert _capture(pyvips.Image.black(8, 8).gifsave_buffer()) == Capture()


def test_the_location_is_kept_only_when_the_operator_says_so(tmp_path: Any) -> None:
    capture = _capture(with_fields(TAKEN | GPS).jpegsave_buffer())
    off = MemorySettings(memory_data_dir=tmp_path)
    on = MemorySettings(memory_data_dir=tmp_path, asset_keep_location=True)
    assert kept_capture(capture, off).columns()["latitude"] is None
    assert kept_capture(capture, off).columns()["longitude"] is None
    assert kept_capture(capture, off).camera_make == "Canon"
    assert kept_capture(capture, on).columns()["latitude"] == -33.859833


# --- the hostile corpus ----------------------------------------------------------------------


@dataclass(frozen=True)
class Hostile:
    """A file whose EXIF is refused in part: what is ignored and what is still read."""

    name: str
    make: Callable[[], bytes]
    ignored: tuple[str, ...]
    kept: dict[str, object]


def _fields(fields: dict[str, str], orientation: int | None = None) -> Callable[[], bytes]:
    return lambda: with_fields(fields, orientation).jpegsave_buffer(Q=85)


def _tiff(tiff: Tiff) -> Callable[[], bytes]:
    return lambda: jpeg_with_exif(tiff.build())


_GOOD_DATE = Entry(DATE_ORIGINAL, ASCII, ascii_value(b"2021:07:04 18:30:00"))
_CANON = Entry(MAKE, ASCII, ascii_value(b"Canon"))
_WHEN = datetime(2021, 7, 4, 18, 30, tzinfo=UTC)


def _looping_tiff() -> bytes:
    # IFD0's Exif pointer points back at IFD0 itself.
    tiff = bytearray(Tiff([_CANON], exif=[_GOOD_DATE]).build())
    exif_pointer = tiff.find(struct.pack("<HH", 0x8769, LONG))
    tiff[exif_pointer + 8 : exif_pointer + 12] = struct.pack("<I", 8)
    return jpeg_with_exif(bytes(tiff))


def _truncated_ifd() -> bytes:
    # IFD0 claims 4,000 entries; the block ends after one.
    tiff = bytearray(Tiff([_CANON]).build())
    tiff[8:10] = struct.pack("<H", 4000)
    return jpeg_with_exif(bytes(tiff))


HOSTILE = [
    Hostile(
        "year 0",
        _fields({"exif-ifd2-DateTimeOriginal": "0000:00:00 00:00:00"}),
        ("DateTimeOriginal",),
        {},
    ),
    Hostile(
        "year 9999",
        _fields({"exif-ifd2-DateTimeOriginal": "9999:12:31 23:59:59"}),
        ("DateTimeOriginal",),
        {},
    ),
    Hostile(
        "2099-13-45",
        _fields(TAKEN | {"exif-ifd2-DateTimeOriginal": "2099:13:45 10:00:00"}),
        ("DateTimeOriginal",),
        {"camera_make": "Canon"},
    ),
    Hostile(
        "before photography",
        _fields({"exif-ifd2-DateTimeOriginal": "1700:01:01 00:00:00"}),
        ("DateTimeOriginal",),
        {},
    ),
    Hostile(
        "a date that is text",
        _fields({"exif-ifd2-DateTimeOriginal": "yesterday at noon"}),
        ("DateTimeOriginal",),
        {},
    ),
    Hostile(
        "an offset of 23 hours",
        _fields(TAKEN | {"exif-ifd2-OffsetTimeOriginal": "+23:00"}),
        ("OffsetTimeOriginal",),
        {"taken_at": datetime(2023, 3, 14, 10, 11, 12, tzinfo=UTC), "offset_minutes": None},
    ),
    Hostile(
        "an oversized make",
        _fields(TAKEN | {"exif-ifd0-Make": "C" * 300}),
        ("Make",),
        {"camera_model": "EOS 5D Mark IV"},
    ),
    Hostile("a make longer than 64", _fields({"exif-ifd0-Make": "Canon " * 12}), ("Make",), {}),
    Hostile(
        "control characters only", _fields({"exif-ifd0-Model": "\x01\x02\x1b\x7f"}), ("Model",), {}
    ),
    Hostile(
        "a bidirectional override",
        _fields({"exif-ifd0-Model": "EOS\u202egpj.exe"}),
        (),
        # EXIF ASCII is 7-bit: libexif shows other bytes as "?", so no override gets through.
        {"camera_model": "EOS?gpj.exe"},
    ),
    Hostile(
        "control characters inside",
        _fields({"exif-ifd0-Model": "EOS\x1b[31m 5D"}),
        (),
        {"camera_model": "EOS [31m 5D"},
    ),
    Hostile(
        "a NUL inside the make",
        _tiff(Tiff([Entry(MAKE, ASCII, b"Can\x00on\x00")])),
        (),
        {"camera_make": "Can"},
    ),
    Hostile(
        "a make of the wrong type",
        _tiff(Tiff([Entry(MAKE, SHORT, b"\x01\x00")], exif=[_GOOD_DATE])),
        ("Make",),
        {"taken_at": _WHEN},
    ),
    Hostile(
        "a date of the wrong type",
        _tiff(Tiff([_CANON], exif=[Entry(DATE_ORIGINAL, LONG, b"\x01\x00\x00\x00")])),
        ("DateTimeOriginal",),
        {"camera_make": "Canon"},
    ),
    Hostile(
        "orientation 9", _tiff(Tiff([Entry(ORIENTATION, SHORT, b"\x09\x00")])), ("Orientation",), {}
    ),
    Hostile(
        "orientation as text",
        _tiff(Tiff([Entry(ORIENTATION, ASCII, b"six\x00")])),
        ("Orientation",),
        {},
    ),
    Hostile(
        "a value past the block",
        _tiff(Tiff([Entry(MODEL, ASCII, b"\0" * 4, count=5000), _CANON])),
        (),
        {"camera_make": "Canon"},
    ),
    Hostile("an IFD that loops", _looping_tiff, (), {}),
    Hostile("an IFD cut short", _truncated_ifd, (), {}),
    Hostile(
        "latitude 95",
        _tiff(
            Tiff(
                [_CANON],
                gps=[
                    Entry(GPS_LAT_REF, ASCII, b"N\x00"),
                    Entry(GPS_LAT, RATIONAL, rationals((95, 1), (0, 1), (0, 1))),
                    Entry(GPS_LON_REF, ASCII, b"E\x00"),
                    Entry(GPS_LON, RATIONAL, rationals((10, 1), (0, 1), (0, 1))),
                ],
            )
        ),
        ("latitude",),
        {"camera_make": "Canon", "latitude": None, "longitude": None},
    ),
    Hostile(
        "a zero denominator",
        _tiff(
            Tiff(
                [],
                gps=[
                    Entry(GPS_LAT_REF, ASCII, b"N\x00"),
                    Entry(GPS_LAT, RATIONAL, rationals((10, 0), (0, 1), (0, 1))),
                    Entry(GPS_LON_REF, ASCII, b"E\x00"),
                    Entry(GPS_LON, RATIONAL, rationals((10, 1), (0, 1), (0, 1))),
                ],
            )
        ),
        ("latitude",),
        {"latitude": None},
    ),
    Hostile(
        "a reference that is no compass point",
        _tiff(
            Tiff(
                [],
                gps=[
                    Entry(GPS_LAT_REF, ASCII, b"Q\x00"),
                    Entry(GPS_LAT, RATIONAL, rationals((10, 1), (0, 1), (0, 1))),
                    Entry(GPS_LON_REF, ASCII, b"E\x00"),
                    Entry(GPS_LON, RATIONAL, rationals((10, 1), (0, 1), (0, 1))),
                ],
            )
        ),
        ("latitude",),
        {"latitude": None},
    ),
    Hostile(
        "an offset that is text",
        _tiff(Tiff([], exif=[_GOOD_DATE, Entry(OFFSET_ORIGINAL, ASCII, b"noon\x00")])),
        ("OffsetTimeOriginal",),
        {"taken_at": _WHEN, "offset_minutes": None},
    ),
]


@pytest.mark.parametrize("case", HOSTILE, ids=lambda case: case.name)
def test_hostile_exif_loses_only_its_refused_tags_and_the_image_is_accepted(case: Hostile) -> None:
    capture = _capture(case.make())  # never raises: the save goes on
    for name in case.ignored:
        assert name in capture.ignored, capture
    for name, value in case.kept.items():
        assert getattr(capture, name) == value, (name, capture)
    # What is stored always fits the table's checks.
    if capture.camera_make is not None:
        assert 1 <= len(capture.camera_make) <= 64 and capture.camera_make.isprintable()
    if capture.taken_at is not None:
        assert capture.taken_at.year >= 1826
    assert capture.orientation in (None, *range(1, 9))


def test_a_future_date_is_refused_relative_to_now() -> None:
    soon = datetime.now(UTC) + timedelta(days=3)
    capture = _capture(
        with_fields(
            {"exif-ifd2-DateTimeOriginal": soon.strftime("%Y:%m:%d %H:%M:%S")}
        ).jpegsave_buffer()
    )
    assert capture.taken_at is None and capture.ignored == ("DateTimeOriginal",)
