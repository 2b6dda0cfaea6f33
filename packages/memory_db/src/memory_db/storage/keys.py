"""Key builders (docs/design.md#object-keys) and validators that accept only what they build.

Three kinds of key live under an owner's namespace prefix ``{env}/tenants/{namespace_id}/``:

- objects: ``objects/{object_id}/original.{ext}`` and ``objects/{object_id}/preview.webp``.
  Only the server writes them, once (create-only), after validating the bytes.
- staging: ``uploads/{reservation_id}/upload.{ext}``. A direct upload's signed PUT writes here,
  never where a validated original lives; completion reads, validates and promotes the bytes
  into an object key and deletes the staging key. The reservation id ties the bytes to their
  upload reservation, so reconciliation can tell live staging bytes from dead ones.
- artifacts: ``artifacts/{artifact_id}/artifact.{ext}``: validated bytes a scraper tool stored
  for its caller until they expire (docs/design.md#artifacts). Written once by the server; never
  served by a signed link (``served_as`` refuses them); the artifact id ties them to their row.

Keys contain only the environment prefix, the owner's opaque namespace id and server-generated
ids: never an identity, a filename, a project or a folder name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

from memory_db.errors import InvalidStorageKey
from memory_db.ids import is_valid_id

ORIGINAL_EXTENSIONS: Final = ("jpg", "png", "webp", "gif")
_ENV_RE: Final = r"[a-z0-9][a-z0-9-]{0,31}"
_PREFIX_RE: Final = rf"(?P<env>{_ENV_RE})/tenants/(?P<ns>ans_[a-z2-7]{{26}})/"
_KEY_RE: Final = re.compile(
    rf"^{_PREFIX_RE}objects/"
    r"(?P<obj>aob_[a-z2-7]{26})/(?P<file>original\.(?:jpg|png|webp|gif)|preview\.webp)$"
)
_STAGING_RE: Final = re.compile(
    rf"^{_PREFIX_RE}uploads/(?P<res>aur_[a-z2-7]{{26}})/upload\.(?:jpg|png|webp|gif)$"
)
_ARTIFACT_RE: Final = re.compile(
    rf"^{_PREFIX_RE}artifacts/(?P<art>art_[a-z2-7]{{26}})/artifact\.(?:jpg|png|webp|gif)$"
)
_NAMESPACE_PREFIX_RE: Final = re.compile(rf"^{_PREFIX_RE}$")

Variant = Literal["original", "preview"]


@dataclass(frozen=True, slots=True)
class ParsedKey:
    """What a storage key names: an object variant, an upload's staging bytes, an artifact."""

    kind: Literal["object", "staging", "artifact"]
    env: str
    namespace_id: str
    object_id: str | None = None  # objects
    reservation_id: str | None = None  # staging
    artifact_id: str | None = None  # artifacts


def _check_common(env: str, namespace_id: str) -> None:
    if not re.fullmatch(_ENV_RE, env):
        raise InvalidStorageKey("environment prefix must be 1-32 of [a-z0-9-]")
    if not is_valid_id(namespace_id, "ans"):
        raise InvalidStorageKey("namespace id is not a server-generated namespace id")


def namespace_prefix(env: str, namespace_id: str) -> str:
    """The prefix under which every key of one owner's namespace lives (ends with ``/``)."""
    _check_common(env, namespace_id)
    return f"{env}/tenants/{namespace_id}/"


def validate_namespace_prefix(prefix: str) -> str:
    """Return ``prefix`` if :func:`namespace_prefix` could have produced it; raise otherwise."""
    if not isinstance(prefix, str) or _NAMESPACE_PREFIX_RE.fullmatch(prefix) is None:  # pyright: ignore[reportUnnecessaryIsInstance]
        raise InvalidStorageKey("not a server-generated namespace prefix")
    return prefix


def build_object_key(
    env: str, namespace_id: str, object_id: str, variant: Variant, extension: str = "webp"
) -> str:
    """Build the storage key of one variant of one object."""
    _check_common(env, namespace_id)
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


def build_staging_key(env: str, namespace_id: str, reservation_id: str, extension: str) -> str:
    """Build the staging key a direct upload's signed PUT writes to."""
    return _tenant_file_key(env, namespace_id, "uploads", reservation_id, "reservation", extension)


def build_artifact_key(env: str, namespace_id: str, artifact_id: str, extension: str) -> str:
    """Build the key of one artifact's bytes."""
    return _tenant_file_key(env, namespace_id, "artifacts", artifact_id, "artifact", extension)


# What each kind of single-file key is called: its id's prefix and its file's stem.
_SINGLE_FILES = {"reservation": ("aur", "upload"), "artifact": ("art", "artifact")}


def _tenant_file_key(
    env: str, namespace_id: str, folder: str, item_id: str, noun: str, extension: str
) -> str:
    """The key of the one file an upload reservation or an artifact holds."""
    _check_common(env, namespace_id)
    id_prefix, stem = _SINGLE_FILES[noun]
    if not is_valid_id(item_id, id_prefix):
        raise InvalidStorageKey(f"{noun} id is not a server-generated {noun} id")
    if extension not in ORIGINAL_EXTENSIONS:
        raise InvalidStorageKey(f"{stem} extension must be one of {ORIGINAL_EXTENSIONS}")
    return f"{env}/tenants/{namespace_id}/{folder}/{item_id}/{stem}.{extension}"


def validate_object_key(key: str) -> str:
    """Return ``key`` if the object key builder could have produced it; raise otherwise."""
    if not isinstance(key, str) or _KEY_RE.fullmatch(key) is None:  # pyright: ignore[reportUnnecessaryIsInstance]
        raise InvalidStorageKey("not a server-generated object key")
    return key


def validate_staging_key(key: str) -> str:
    """Return ``key`` if the staging key builder could have produced it; raise otherwise."""
    if not isinstance(key, str) or _STAGING_RE.fullmatch(key) is None:  # pyright: ignore[reportUnnecessaryIsInstance]
        raise InvalidStorageKey("not a server-generated upload staging key")
    return key


def parse_storage_key(key: str) -> ParsedKey:
    """What ``key`` names; raises ``InvalidStorageKey`` for anything the builders cannot make."""
    if isinstance(key, str):  # pyright: ignore[reportUnnecessaryIsInstance]
        if (match := _KEY_RE.fullmatch(key)) is not None:
            return ParsedKey("object", match["env"], match["ns"], object_id=match["obj"])
        if (match := _STAGING_RE.fullmatch(key)) is not None:
            return ParsedKey("staging", match["env"], match["ns"], reservation_id=match["res"])
        if (match := _ARTIFACT_RE.fullmatch(key)) is not None:
            return ParsedKey("artifact", match["env"], match["ns"], artifact_id=match["art"])
    raise InvalidStorageKey("not a server-generated storage key")


def validate_storage_key(key: str) -> str:
    """Return ``key`` if it is an object, staging or artifact key; raise otherwise."""
    parse_storage_key(key)
    return key


_DOWNLOAD_NAME_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}\.(?:jpg|png|webp|gif)$")


@dataclass(frozen=True, slots=True)
class ServedAs:
    """How a signed read of one key is answered: its content type and disposition headers."""

    content_type: str
    disposition: str

    def bound(self) -> str:
        """The text a signature binds, so neither header can be changed in a link."""
        return f"{self.content_type}\n{self.disposition}"


def served_as(key: str, filename: str | None = None) -> ServedAs:
    """A preview is shown inline; an original is only ever a download (``attachment``).

    ``filename`` names the download (default: the key's own file name); it must be a plain
    name with the key's extension, so the header needs no quoting and cannot smuggle a path.
    Raises ``InvalidStorageKey`` for any other key or name.
    """
    validate_object_key(key)
    own_name = key.rsplit("/", 1)[1]
    name = own_name if filename is None else filename
    if (
        _DOWNLOAD_NAME_RE.fullmatch(name) is None
        or name.rsplit(".", 1)[1] != own_name.rsplit(".", 1)[1]
    ):
        raise InvalidStorageKey("a download name is a plain file name with the object's extension")
    kind = "inline" if own_name == "preview.webp" else "attachment"
    return ServedAs(content_type_for_key(key), f'{kind}; filename="{name}"')


def content_type_for_key(key: str) -> str:
    """The only content type a key may be stored or served with."""
    validate_storage_key(key)
    suffix = key.rsplit(".", 1)[1]
    return {
        "jpg": "image/jpeg",
        "png": "image/png",
        "webp": "image/webp",
        "gif": "image/gif",
    }[suffix]
