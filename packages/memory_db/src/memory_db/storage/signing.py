"""HMAC-signed, expiring links for stores that have no signing of their own (local, in-memory).

A GET link authorises one key until one instant, answered with one content type and one
disposition (a preview inline, an original as a download: ``keys.served_as``); a PUT link
additionally binds the content type and the exact length. The signature covers every bound
value, so changing the key, the expiry, the download name or a bound header invalidates it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlencode

from memory_db.errors import SignatureError
from memory_db.storage.keys import (
    ServedAs,
    content_type_for_key,
    served_as,
    validate_staging_key,
)
from memory_db.storage.protocol import SignedPut

Clock = Callable[[], float]


def _is_expiry(value: str) -> bool:
    """ASCII digits only: ``str.isdigit`` also accepts '²' or Arabic-Indic digits."""
    return 0 < len(value) <= 12 and value.isascii() and value.isdigit()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


@dataclass(frozen=True)
class UrlSigner:
    """Signs and verifies object links with a server-side secret."""

    secret: bytes
    clock: Clock = time.time

    def __post_init__(self) -> None:
        if len(self.secret) < 32:
            raise ValueError("signing secret must be at least 32 bytes")

    def _mac(self, *parts: str) -> str:
        message = "\n".join(parts).encode("utf-8")
        return _b64(hmac.new(self.secret, message, hashlib.sha256).digest())

    def sign_get(self, key: str, expires_in: int, *, served: str = "") -> dict[str, str]:
        """Query parameters authorising a GET of ``key`` for ``expires_in`` seconds.

        ``served`` (``ServedAs.bound()``: the answer's content type and disposition) is bound
        too: the same key served another way needs another signature.
        """
        if expires_in <= 0:
            raise ValueError("expires_in must be positive")
        expires = int(self.clock()) + expires_in
        return {"expires": str(expires), "signature": self._mac("GET", key, served, str(expires))}

    def sign_put(
        self, key: str, content_type: str, content_length: int, expires_in: int
    ) -> dict[str, str]:
        """Query parameters authorising a PUT of exactly this type and length."""
        if expires_in <= 0 or content_length <= 0:
            raise ValueError("expires_in and content_length must be positive")
        expires = int(self.clock()) + expires_in
        mac = self._mac("PUT", key, content_type, str(content_length), str(expires))
        return {"expires": str(expires), "signature": mac}

    def _check(self, expected: str, presented: str, expires: str) -> None:
        # compare_digest refuses non-ASCII text with a TypeError: compare bytes instead, so any
        # presented value is simply a signature that does not match.
        if not hmac.compare_digest(expected.encode(), presented.encode("utf-8", "replace")):
            raise SignatureError("the link signature does not match")
        if int(expires) < self.clock():
            raise SignatureError("the link has expired")

    def verify_get(self, key: str, expires: str, signature: str, *, served: str = "") -> None:
        """Raise ``SignatureError`` unless the GET link is authentic, unexpired and ``served``."""
        if not _is_expiry(expires):
            raise SignatureError("the link is malformed")
        self._check(self._mac("GET", key, served, expires), signature, expires)

    def verify_put(
        self, key: str, content_type: str, content_length: int, expires: str, signature: str
    ) -> None:
        """Raise ``SignatureError`` unless the PUT link matches these exact values."""
        if not _is_expiry(expires):
            raise SignatureError("the link is malformed")
        mac = self._mac("PUT", key, content_type, str(content_length), expires)
        self._check(mac, signature, expires)


def signed_url(base: str, key: str, params: dict[str, str]) -> str:
    """``{base}/{key}?{params}``."""
    return f"{base.rstrip('/')}/{key}?{urlencode(params)}"


class HmacLinks:
    """Signed-link methods for stores without a signing service of their own.

    A store mixing this in sets ``signer`` and ``links_base`` (where its links point); the
    memory server's object route calls ``verify_signed_get`` / ``verify_signed_put``.
    """

    signer: UrlSigner
    links_base: str

    async def create_signed_get_url(
        self, key: str, expires_in: int, *, filename: str | None = None
    ) -> str:
        """An HMAC-signed link reading ``key`` until ``expires_in`` seconds from now.

        A preview is served inline, an original as a download named ``filename``
        (``keys.served_as``); the signature binds both headers and the name.
        """
        served = served_as(key, filename)
        params = self.signer.sign_get(key, expires_in, served=served.bound())
        if filename is not None:
            params = {"expires": params["expires"], "filename": filename, **params}
        return signed_url(self.links_base, key, params)

    async def create_signed_put_url(
        self, key: str, *, content_type: str, content_length: int, expires_in: int
    ) -> SignedPut:
        """An HMAC-signed upload link to a staging key, bound to type and exact length."""
        validate_staging_key(key)
        if content_type != content_type_for_key(key):
            raise SignatureError(f"this key only accepts {content_type_for_key(key)}")
        params = self.signer.sign_put(key, content_type, content_length, expires_in)
        return SignedPut(
            url=signed_url(self.links_base, key, params),
            method="PUT",
            headers={"Content-Type": content_type, "Content-Length": str(content_length)},
            expires_in=expires_in,
        )

    def verify_signed_get(
        self, key: str, expires: str, signature: str, filename: str | None = None
    ) -> ServedAs:
        """Check a presented GET link; how to serve it, or ``SignatureError``/``InvalidStorageKey``.

        ``filename`` is the link's download name (its ``filename`` parameter), if it has one.
        """
        served = served_as(key, filename)
        self.signer.verify_get(key, expires, signature, served=served.bound())
        return served

    def verify_signed_put(
        self, key: str, content_type: str, content_length: int, expires: str, signature: str
    ) -> None:
        """Check a presented PUT link against the exact type and length presented."""
        validate_staging_key(key)
        self.signer.verify_put(key, content_type, content_length, expires, signature)
