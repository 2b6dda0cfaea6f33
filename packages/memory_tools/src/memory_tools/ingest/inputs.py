"""Normalising the caller's save input: tags, title, source reference, URLs, base64.

Everything here is pure and runs before any database or network work, so bad input is refused
with ``invalid_input`` and changes nothing.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import unicodedata
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from memory_db.repositories import drop_forbidden_characters, has_forbidden_characters
from memory_db.schema import MAX_FILE_NAME
from memory_tools.errors import InvalidInputFailure
from memory_tools.text import refuse_nul

MAX_TAGS = 32
MAX_TAG_LENGTH = 64
MAX_TITLE = 240
MAX_DESCRIPTION = 4000
MAX_ALT_TEXT = 2000
MAX_SOURCE_REF_KEYS = 20
MAX_SOURCE_REF_BYTES = 4096
MAX_IDEMPOTENCY_KEY = 200
# What a caller may send as ``fileName`` (a full path included); what is kept is its base name,
# at most ``MAX_FILE_NAME`` characters (memory_db.schema).
MAX_FILE_NAME_INPUT = 4096
# Names that carry credentials: never stored, neither as sourceRef keys nor as URL parameters.
SECRET_NAME = re.compile(
    r"pass(word)?|secret|token|api[-_]?key|^key$|auth|cookie|session|signature|^sig$|"
    r"credential|x-amz-|x-goog-|jwt|bearer|private",
    re.IGNORECASE,
)
_SOURCE_REF_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
_DATA_URL = re.compile(r"^data:image/[a-z0-9.+-]+;base64,", re.IGNORECASE)


def clean_text(value: str | None, field: str, limit: int) -> str | None:
    """Trimmed text without invisible characters, ``None`` when blank; refuse over ``limit``.

    NUL and unpaired surrogates are refused; every other character a name refuses (controls
    C0/DEL/C1, format characters such as bidi overrides and zero-width space, line separators)
    is dropped, except tab and line breaks (``drop_forbidden_characters``).
    """
    if value is None:
        return None
    refuse_nul(value, field)
    cleaned = drop_forbidden_characters(unicodedata.normalize("NFC", value)).strip()
    if not cleaned:
        return None
    if len(cleaned) > limit:
        raise InvalidInputFailure(f"{field}: at most {limit} characters")
    return cleaned


# A path's separators, POSIX and Windows alike: a browser sends a base name, an HTTP or MCP
# caller may send ``C:\\Users\\me\\beach.jpg`` or ``../../etc/passwd``.
_PATH_SEPARATORS = re.compile(r"[/\\]")
_MAX_EXTENSION = 5


def _split_extension(name: str) -> tuple[str, str | None]:
    """The stem and the extension of a file name: ``("IMG_0423", "JPG")``.

    The extension is a short run of ASCII letters and digits after the last dot; ``(name, None)``
    when there is none, or when nothing but dots and spaces stands before it.
    """
    stem, dot, ext = name.rpartition(".")
    if (
        dot
        and 1 <= len(ext) <= _MAX_EXTENSION
        and ext.isascii()
        and ext.isalnum()
        and stem.strip(". \t")
    ):
        return stem, ext
    return name, None


def file_name(value: str | None) -> str | None:
    """The base name of the file a caller uploaded, cleaned as a title is; ``None`` when empty.

    Control characters are dropped and NUL refused (:func:`clean_text`); only what follows the
    last slash or backslash is kept, and ``.`` or ``..`` count as no name. A name longer than
    ``MAX_FILE_NAME`` characters is cut, keeping its extension: a file name is not words the
    caller chose for us, so it is bounded rather than refused.
    """
    if value is None:
        return None
    if len(value) > MAX_FILE_NAME_INPUT:
        raise InvalidInputFailure(f"fileName: at most {MAX_FILE_NAME_INPUT} characters")
    cleaned = clean_text(value, "fileName", MAX_FILE_NAME_INPUT)
    if cleaned is None:
        return None
    base = _PATH_SEPARATORS.split(cleaned)[-1].strip()
    if base in ("", ".", ".."):
        return None
    if len(base) > MAX_FILE_NAME:
        stem, ext = _split_extension(base)
        if ext is None:
            base = base[:MAX_FILE_NAME].rstrip()
        else:
            base = f"{stem[: MAX_FILE_NAME - len(ext) - 1].rstrip()}.{ext}"
    return base


def title_from_file_name(name: str | None) -> str | None:
    """The default title a file name gives: the name without its extension, spaces collapsed.

    ``IMG_0423.JPG`` → ``IMG_0423``; ``.jpg`` and other names with nothing before the dot stay
    whole; cut at ``MAX_TITLE`` characters. ``None`` when nothing is left.
    """
    if not name:
        return None
    stem, _ext = _split_extension(name)
    title = " ".join(stem.split())
    if len(title) > MAX_TITLE:
        title = title[:MAX_TITLE].rstrip()
    return title or None


def canonical_tags(tags: list[str] | None, field: str = "tags") -> list[str]:
    """Lower-case, whitespace-collapsed, de-duplicated tags in the caller's order.

    Invisible characters are dropped as in :func:`clean_text`; a tag left empty is refused.
    ``field`` names the parameter in the refusal (``addTags``, ``removeTags``).
    """
    if not tags:
        return []
    if len(tags) > MAX_TAGS:
        raise InvalidInputFailure(f"{field}: at most {MAX_TAGS} tags")
    seen: list[str] = []
    for raw in tags:
        refuse_nul(raw, field)
        tag = " ".join(
            drop_forbidden_characters(unicodedata.normalize("NFKC", raw)).split()
        ).lower()
        if not tag:
            raise InvalidInputFailure(f"{field}: a tag is empty")
        if len(tag) > MAX_TAG_LENGTH:
            raise InvalidInputFailure(f"{field}: a tag is longer than {MAX_TAG_LENGTH} characters")
        if tag not in seen:
            seen.append(tag)
    return seen


def scrub_url(raw: str) -> str:
    """``raw`` without fragment, user info and credential-like query parameters."""
    parts = urlsplit(raw)
    host = parts.hostname or ""
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    if ":" in host:
        netloc = f"[{host}]" if parts.port is None else f"[{host}]:{parts.port}"
    query = urlencode(
        [
            (k, v)
            for k, v in parse_qsl(parts.query, keep_blank_values=True)
            if not SECRET_NAME.search(k)
        ]
    )
    return urlunsplit((parts.scheme.lower(), netloc, parts.path, query, ""))


def source_ref(value: dict[str, Any] | None) -> dict[str, Any]:
    """A bounded provenance object: simple values, no credentials, URLs scrubbed."""
    if not value:
        return {}
    if len(value) > MAX_SOURCE_REF_KEYS:
        raise InvalidInputFailure(f"sourceRef: at most {MAX_SOURCE_REF_KEYS} keys")
    clean: dict[str, Any] = {}
    for key, item in value.items():
        if not _SOURCE_REF_KEY.match(key):
            raise InvalidInputFailure(f"sourceRef: key {key[:40]!r} must be a plain identifier")
        if SECRET_NAME.search(key):
            raise InvalidInputFailure(f"sourceRef: key {key!r} looks like a credential")
        if isinstance(item, str):
            text = clean_text(item, f"sourceRef.{key}", 2000) or ""
            if re.match(r"^https?://", text, re.IGNORECASE):
                try:
                    text = scrub_url(text)
                except ValueError:
                    raise InvalidInputFailure(f"sourceRef.{key}: not a valid URL") from None
            clean[key] = text
        elif item is None or isinstance(item, bool | int | float):
            clean[key] = item
        else:
            raise InvalidInputFailure(f"sourceRef.{key}: only strings, numbers and booleans")
    if len(json.dumps(clean).encode("utf-8")) > MAX_SOURCE_REF_BYTES:
        raise InvalidInputFailure(f"sourceRef: at most {MAX_SOURCE_REF_BYTES} bytes")
    return clean


def base64_length_limit(limit: int) -> int:
    """The most base64 characters an image of ``limit`` bytes may take (with some room)."""
    return (limit // 3 + 1) * 4 + 200


def too_large_for_base64(limit: int, *, searching: bool = False) -> str:
    """Why an ``imageBase64`` over ``ASSET_MAX_BYTES`` is refused, and where to go instead."""
    larger = f"the image is larger than the ASSET_MAX_BYTES limit of {limit} bytes"
    size = f"{limit / 2**20:.4g} MiB"
    if searching:
        return (
            f"{larger} ({size}), which a query image must fit as well; store large images with "
            "the direct-upload route POST /uploads and search by their assetId"
        )
    return (
        f"{larger} ({size}). Send large images with the direct-upload route POST /uploads "
        "instead of imageBase64; images over ASSET_MAX_BYTES are refused on every route"
    )


def decode_base64(value: str, limit: int, *, searching: bool = False) -> bytes:
    """The bytes of standard or URL-safe base64 (a ``data:image/...;base64,`` prefix allowed).

    ``searching``: the image is a query image, which the refusal of an oversized one says.
    """
    text = _DATA_URL.sub("", value.strip(), count=1)
    text = "".join(text.split())
    if len(text) > (limit // 3 + 1) * 4 + 4:
        raise InvalidInputFailure(
            f"imageBase64: {too_large_for_base64(limit, searching=searching)}"
        )
    if "-" in text or "_" in text:
        text = text.replace("-", "+").replace("_", "/")
    text += "=" * (-len(text) % 4)
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInputFailure("imageBase64: not valid base64") from None
    return _bounded(
        data,
        limit,
        empty="imageBase64: empty",
        size="imageBase64: {} bytes decoded",
        searching=searching,
    )


def query_image_bytes(data: bytes, limit: int) -> bytes:
    """A query image given as bytes (a file field): not empty, at most ``limit`` bytes."""
    return _bounded(
        data, limit, empty="image: the file is empty", size="image: {} bytes", searching=True
    )


def _bounded(data: bytes, limit: int, *, empty: str, size: str, searching: bool) -> bytes:
    """``data`` unless it is empty or over ``limit`` bytes.

    The refusals begin with ``empty``, and with ``size`` given the byte count: each input
    names its own field.
    """
    if not data:
        raise InvalidInputFailure(empty)
    if len(data) > limit:
        too_large = too_large_for_base64(limit, searching=searching)
        raise InvalidInputFailure(f"{size.format(len(data))}; {too_large}")
    return data


def idempotency_key(value: str | None) -> str | None:
    """A bounded, printable idempotency key."""
    if value is None:
        return None
    if not 1 <= len(value) <= MAX_IDEMPOTENCY_KEY or has_forbidden_characters(value):
        raise InvalidInputFailure(f"idempotencyKey: 1-{MAX_IDEMPOTENCY_KEY} printable characters")
    return value
