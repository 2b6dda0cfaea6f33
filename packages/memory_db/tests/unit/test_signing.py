"""HMAC link signing."""

from __future__ import annotations

import pytest

from memory_db import SignatureError
from memory_db.storage import UrlSigner

SECRET = b"s" * 32


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_get_link_valid_until_expiry_then_refused() -> None:
    clock = Clock()
    signer = UrlSigner(SECRET, clock)
    params = signer.sign_get("k", 10)
    signer.verify_get("k", params["expires"], params["signature"])
    clock.now += 10
    signer.verify_get("k", params["expires"], params["signature"])
    clock.now += 1
    with pytest.raises(SignatureError, match="expired"):
        signer.verify_get("k", params["expires"], params["signature"])


@pytest.mark.parametrize("change", ["key", "expires", "signature", "secret"])
def test_any_change_invalidates_the_link(change: str) -> None:
    signer = UrlSigner(SECRET, Clock())
    params = signer.sign_get("k", 10)
    key, expires, signature = "k", params["expires"], params["signature"]
    if change == "key":
        key = "k2"
    elif change == "expires":
        expires = str(int(expires) + 100)
    elif change == "signature":
        signature = signature[:-1] + ("A" if signature[-1] != "A" else "B")
    else:
        signer = UrlSigner(b"t" * 32, signer.clock)
    with pytest.raises(SignatureError):
        signer.verify_get(key, expires, signature)


@pytest.mark.parametrize("expires", ["", "abc", "-5", "1" * 13])
def test_malformed_expiry_is_refused(expires: str) -> None:
    signer = UrlSigner(SECRET, Clock())
    with pytest.raises(SignatureError):
        signer.verify_get("k", expires, "sig")


def test_put_link_binds_type_and_length() -> None:
    signer = UrlSigner(SECRET, Clock())
    params = signer.sign_put("k", "image/png", 10, 60)
    signer.verify_put("k", "image/png", 10, params["expires"], params["signature"])
    with pytest.raises(SignatureError):
        signer.verify_put("k", "text/html", 10, params["expires"], params["signature"])
    with pytest.raises(SignatureError):
        signer.verify_put("k", "image/png", 11, params["expires"], params["signature"])
    with pytest.raises(SignatureError):  # a PUT signature is not a GET signature
        signer.verify_get("k", params["expires"], params["signature"])


def test_short_secret_and_nonpositive_ttl_are_refused() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        UrlSigner(b"short")
    with pytest.raises(ValueError, match="positive"):
        UrlSigner(SECRET).sign_get("k", 0)
