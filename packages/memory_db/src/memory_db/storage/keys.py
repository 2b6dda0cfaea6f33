"""The object-key builder of §7.2 and the validator that accepts only what it builds.

Keys are ``{env}/tenants/{namespace_id}/objects/{object_id}/original.{ext}`` and
``.../preview.webp``. They contain only the environment prefix, the owner's opaque namespace id
and the server-generated object id: never an identity, a filename, a project or a folder name.
"""

from __future__ import annotations

import re
from typing import Final, Literal

from memory_db.errors import InvalidStorageKey
from memory_db.ids import is_valid_id

ORIGINAL_EXTENSIONS: Final = ("jpg", "png", "webp", "gif")
_ENV_RE: Final = r"[a-z0-9][a-z0-9-]{0,31}"
_KEY_RE: Final = re.compile(
    rf"^(?P<env>{_ENV_RE})/tenants/(?P<ns>ans_[a-z2-7]{{26}})/objects/"
    r"(?P<obj>aob_[a-z2-7]{26})/(?P<file>original\.(?:jpg|png|webp|gif)|preview\.webp)$"
)

Variant = Literal["original", "preview"]


def build_object_key(
    env: str, namespace_id: str, object_id: str, variant: Variant, extension: str = "webp"
) -> str:
    """Build the storage key of one variant of one object."""
    if not re.fullmatch(_ENV_RE, env):
        raise InvalidStorageKey("environment prefix must be 1-32 of [a-z0-9-]")
    if not is_valid_id(namespace_id, "ans"):
        raise InvalidStorageKey("namespace id is not a server-generated namespace id")
    if not is_valid_id(object_id, "aob"):
        raise InvalidStorageKey("object id is not a server-generated object id")
    if variant == "original":
        if extension not in ORIGINAL_EXTENSIONS:
            raise InvalidStorageKey(f"original extension must be one of {ORIGINAL_EXTENSIONS}")
        filename = f"original.{extension}"
    elif variant == "preview":
        filename = "preview.webp"
    else:
        raise InvalidStorageKey("variant must be 'original' or 'preview'")
    return f"{env}/tenants/{namespace_id}/objects/{object_id}/{filename}"


def validate_object_key(key: str) -> str:
    """Return ``key`` if the key builder could have produced it; raise otherwise."""
    if not isinstance(key, str) or _KEY_RE.fullmatch(key) is None:  # pyright: ignore[reportUnnecessaryIsInstance]
        raise InvalidStorageKey("not a server-generated object key")
    return key


def content_type_for_key(key: str) -> str:
    """The only content type a key may be stored or served with."""
    validate_object_key(key)
    suffix = key.rsplit(".", 1)[1]
    return {
        "jpg": "image/jpeg",
        "png": "image/png",
        "webp": "image/webp",
        "gif": "image/gif",
    }[suffix]
