"""HMAC link signing, and the signing key every process of one data directory shares."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from memory_db import ConfigurationError, MemorySettings, SignatureError
from memory_db.runtime import load_signing_secret
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


def _load_together(settings: MemorySettings, n: int) -> tuple[list[bytes], list[Exception]]:
    start = threading.Barrier(n)
    keys: list[bytes] = []
    errors: list[Exception] = []

    def load() -> None:
        start.wait()
        try:
            keys.append(load_signing_secret(settings))
        except ConfigurationError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=load) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return keys, errors


def test_processes_starting_together_share_one_signing_key(tmp_path: Path) -> None:
    # Servers started at once on a new data directory (`serve --processes N`, or several behind
    # a proxy) race to create the key; none may read it half-written or make another one.
    for attempt in range(30):
        settings = MemorySettings(memory_data_dir=tmp_path / str(attempt))
        keys, errors = _load_together(settings, 8)
        assert errors == [] and len(keys) == 8 and len(set(keys)) == 1
        assert len(keys[0]) >= 32
        assert [p.name for p in settings.memory_data_dir.iterdir()] == ["signing.key"]
