"""When and with what a photo was taken: the EXIF fields a save keeps (docs/design.md#capture).

libvips parses an image's EXIF block (libexif) while it reads the header, and exposes each
tag as a string field such as ``exif-ifd2-DateTimeOriginal``::

    2023:03:14 10:11:12 (2023:03:14 10:11:12, ASCII, 20 components, 20 bytes)

that is, the raw value, then in brackets libexif's rendering, the tag's type, its count and
its size. :func:`read_capture` reads the few tags a save keeps from those fields of an image
that :func:`memory_tools.ingest.images.read_header` already opened under its bounds; no IFD is
parsed here. Every tag is taken or ignored on its own: a tag of the wrong type, too long,
with control characters only, or with an impossible value is left out and named in
:attr:`Capture.ignored`, and nothing here ever raises, so hostile EXIF never fails a save.

- ``takenAt``: ``DateTimeOriginal`` (``YYYY:MM:DD HH:MM:SS``), between 1826 (the oldest
  surviving photograph) and a day after now. With ``OffsetTimeOriginal`` (``+HH:MM``, at most
  14 hours) it is an instant; without, the camera's clock had no zone: the time is kept as if
  it were UTC and :attr:`Capture.offset_minutes` is ``None`` (the tools then show it without
  a zone).
- ``camera``: ``Make`` and ``Model``, ASCII, control characters removed, at most
  :data:`MAX_CAMERA_TEXT` characters (a longer one is ignored, not cut).
- ``orientation``: 1-8.
- ``location``: ``GPSLatitude``/``GPSLongitude`` with their ``N``/``S``/``E``/``W`` references,
  within +-90 and +-180. Read always; stored only when the operator keeps locations
  (``ASSET_KEEP_LOCATION``), which the save decides.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta, timezone
from typing import TypeVar

import pyvips

from memory_db import MemorySettings

_T = TypeVar("_T")

MAX_CAMERA_TEXT = 64
# An EXIF field longer than this (its rendering, in characters) is not looked at further.
MAX_FIELD_TEXT = 512
# The oldest surviving photograph is from 1826/27: anything earlier is a clock never set.
EARLIEST_TAKEN = datetime(1826, 1, 1, tzinfo=UTC)
# Ahead of now by at most a day: a camera in a zone ahead of UTC whose time has no offset.
FUTURE_SLACK = timedelta(days=1)
MAX_OFFSET_MINUTES = 14 * 60

_DATE_TAG = "exif-ifd2-DateTimeOriginal"
_OFFSET_TAG = "exif-ifd2-OffsetTimeOriginal"
_MAKE_TAG = "exif-ifd0-Make"
_MODEL_TAG = "exif-ifd0-Model"
_GPS = (
    ("latitude", "exif-ifd3-GPSLatitude", "exif-ifd3-GPSLatitudeRef", "NS", 90.0),
    ("longitude", "exif-ifd3-GPSLongitude", "exif-ifd3-GPSLongitudeRef", "EW", 180.0),
)

# libvips' rendering: the value, then "(human, Type, N components, M bytes)" at the very end.
_RENDERED = re.compile(r"(?s)(?P<head>.*), (?P<type>[A-Za-z]+), \d+ components, \d+ bytes\)")
_DATE = re.compile(r"(\d{4}):(\d{2}):(\d{2}) (\d{2}):(\d{2}):(\d{2})")
_OFFSET = re.compile(r"([+-])(\d{2}):(\d{2})")
_RATIONAL = re.compile(r"(\d{1,10})/(\d{1,10})")


@dataclass(frozen=True)
class Capture:
    """What the EXIF block says about when, with what and where the picture was taken.

    ``taken_at`` is aware: in UTC when the camera named its offset (``offset_minutes``), and
    otherwise the camera's wall-clock time read as UTC (``offset_minutes`` is ``None``).
    ``ignored`` names the tags that were present but refused, for logs and tests.
    """

    taken_at: datetime | None = None
    offset_minutes: int | None = None
    camera_make: str | None = None
    camera_model: str | None = None
    orientation: int | None = None
    latitude: float | None = None
    longitude: float | None = None
    ignored: tuple[str, ...] = field(default=())

    def without_location(self) -> Capture:
        """The same capture with no coordinates (locations are private by default)."""
        return replace(self, latitude=None, longitude=None)

    def columns(self) -> dict[str, object]:
        """The asset columns this capture sets (``memory_db`` ``Asset``'s names)."""
        return {
            "taken_at": self.taken_at,
            "taken_offset_minutes": self.offset_minutes,
            "camera_make": self.camera_make,
            "camera_model": self.camera_model,
            "orientation": self.orientation,
            "latitude": self.latitude,
            "longitude": self.longitude,
        }


def _rendered(image: pyvips.Image, name: str) -> tuple[str, str] | None:
    """``(value, type)`` of one EXIF field, or ``None`` when it is absent or not a string."""
    gtype = image.get_typeof(name)
    if gtype == 0:
        return None
    if gtype not in (pyvips.GValue.refstr_type, pyvips.GValue.gstr_type):
        raise ValueError(name)
    text = image.get(name)
    if not isinstance(text, str) or len(text) > MAX_FIELD_TEXT:
        raise ValueError(name)
    match = _RENDERED.fullmatch(text)
    if match is None:
        raise ValueError(name)
    head, kind = match["head"], match["type"]
    if kind == "ASCII":
        # "value (value": the same text twice, so its length decides where the first ends.
        half, odd = divmod(len(head) - 2, 2)
        value = head[:half]
        if odd or head != f"{value} ({value}":
            raise ValueError(name)
        return value, kind
    value, bracket, _ = head.partition(" (")
    if not bracket:
        raise ValueError(name)
    return value, kind


def _ascii(image: pyvips.Image, name: str) -> str | None:
    found = _rendered(image, name)
    if found is None:
        return None
    value, kind = found
    if kind != "ASCII":
        raise ValueError(name)
    return value


def _camera_text(image: pyvips.Image, name: str) -> str | None:
    value = _ascii(image, name)
    if value is None:
        return None
    # Control and format characters (NUL, escape sequences, bidirectional overrides) become
    # spaces; runs of spaces one.
    shown = "".join(" " if unicodedata.category(c).startswith("C") else c for c in value)
    cleaned = " ".join(shown.split())
    if not cleaned or len(cleaned) > MAX_CAMERA_TEXT:
        raise ValueError(name)
    return cleaned


def _offset(image: pyvips.Image) -> int | None:
    value = _ascii(image, _OFFSET_TAG)
    if value is None:
        return None
    match = _OFFSET.fullmatch(value.strip())
    if match is None:
        raise ValueError(_OFFSET_TAG)
    sign, hours, minutes = match.groups()
    total = int(hours) * 60 + int(minutes)
    if int(minutes) >= 60 or total > MAX_OFFSET_MINUTES:
        raise ValueError(_OFFSET_TAG)
    return -total if sign == "-" else total


def _taken_at(image: pyvips.Image, offset: int | None, now: datetime) -> datetime | None:
    value = _ascii(image, _DATE_TAG)
    if value is None:
        return None
    match = _DATE.fullmatch(value.strip())
    if match is None:
        raise ValueError(_DATE_TAG)
    zone = UTC if offset is None else timezone(timedelta(minutes=offset))
    # datetime refuses month 13, day 45, hour 24 and year 0 itself (ValueError).
    moment = datetime(*(int(part) for part in match.groups()), tzinfo=zone).astimezone(UTC)
    if not EARLIEST_TAKEN <= moment <= now + FUTURE_SLACK:
        raise ValueError(_DATE_TAG)
    return moment


def _coordinate(image: pyvips.Image, tag: str, ref_tag: str, refs: str, bound: float) -> float:
    found, ref = _rendered(image, tag), _ascii(image, ref_tag)
    if found is None or ref is None:
        raise ValueError(tag)
    value, kind = found
    parts = [_RATIONAL.fullmatch(part) for part in value.split()]
    if kind != "Rational" or len(parts) != 3 or ref.strip() not in refs:
        raise ValueError(tag)
    degrees = 0.0
    for scale, part in zip((1, 60, 3600), parts, strict=True):
        if part is None or int(part[2]) == 0:
            raise ValueError(tag)
        degrees += int(part[1]) / int(part[2]) / scale
    if degrees > bound:
        raise ValueError(tag)
    return round(-degrees if ref.strip() == refs[1] else degrees, 6)


def read_capture(image: pyvips.Image, *, now: datetime | None = None) -> Capture:
    """The capture fields of an opened image; refused tags are named in ``ignored``.

    Never raises: each tag is read on its own, and any failure leaves that tag out.
    """
    ignored: list[str] = []
    now = now or datetime.now(UTC)

    def read(name: str, reader: Callable[[], _T | None]) -> _T | None:
        try:
            return reader()
        except (ValueError, OverflowError, pyvips.Error):
            ignored.append(name)
            return None

    offset: int | None = read("OffsetTimeOriginal", lambda: _offset(image))
    taken: datetime | None = read("DateTimeOriginal", lambda: _taken_at(image, offset, now))
    make: str | None = read("Make", lambda: _camera_text(image, _MAKE_TAG))
    model: str | None = read("Model", lambda: _camera_text(image, _MODEL_TAG))
    orientation: int | None = read("Orientation", lambda: _orientation(image))
    coordinates: dict[str, float] = {}
    if all(image.get_typeof(tag) != 0 for _, tag, _, _, _ in _GPS):
        for name, tag, ref_tag, refs, bound in _GPS:
            value: float | None = read(
                name, lambda t=tag, r=ref_tag, s=refs, b=bound: _coordinate(image, t, r, s, b)
            )
            if value is not None:
                coordinates[name] = value
    located = len(coordinates) == 2  # one coordinate alone is no place
    return Capture(
        taken_at=taken,
        offset_minutes=offset if taken is not None else None,
        camera_make=make,
        camera_model=model,
        orientation=orientation,
        latitude=coordinates["latitude"] if located else None,
        longitude=coordinates["longitude"] if located else None,
        ignored=tuple(ignored),
    )


def kept_capture(capture: Capture, settings: MemorySettings) -> Capture:
    """What of ``capture`` an asset stores: everything but the location, unless kept.

    The one place ``ASSET_KEEP_LOCATION`` is read: the save and the ``capture`` job both
    store what this returns.
    """
    return capture if settings.asset_keep_location else capture.without_location()


def _orientation(image: pyvips.Image) -> int | None:
    found = _rendered(image, "exif-ifd0-Orientation")
    if found is None:
        return None
    if found[1] != "Short" or not found[0].strip().isdigit():
        raise ValueError("Orientation")
    value = int(found[0].strip())
    if not 1 <= value <= 8:
        raise ValueError("Orientation")
    return value


__all__ = ["MAX_CAMERA_TEXT", "Capture", "kept_capture", "read_capture"]
