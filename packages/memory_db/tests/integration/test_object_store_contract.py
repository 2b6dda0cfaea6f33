"""One contract, four implementations: in-memory fake, local files, moto's S3, s3rver.

Presigned links are checked where the peer enforces them. moto accepts expired and tampered
presigned URLs. s3rver refuses expired links, but verifies only SigV2 signatures: it accepts any
SigV4 signature (its source says "Signature version 4 calculation is unimplemented"). Our S3
store signs with SigV4 (as AWS requires), so signature-tampering and header-binding cells run on
the fake and the local store, expiry runs on s3rver too, and for S3 we check that what must be
bound is inside the signed part of the URL.

Every store is create-only: moto enforces ``If-None-Match: *`` on PUT, s3rver ignores it, so
there the store's HEAD before the put is what refuses an overwrite (same test, both peers).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import pytest

from memory_db import ChecksumMismatch, InvalidStorageKey, ObjectExists, ObjectNotFound
from memory_db.ids import new_id
from memory_db.storage import namespace_prefix, read_verified

ALL = ["memory", "local", "moto", "s3rver"]
EXPIRING = ["memory", "local", "s3rver"]
HMAC_SIGNED = ["memory", "local"]
# Stores whose create-only write is atomic against a concurrent writer (s3rver ignores
# If-None-Match on PUT: there only the HEAD check guards, which a true race can pass).
ATOMIC_CREATE = ["memory", "local", "moto"]

MakeStore = Callable[[str], Any]


async def _read(store: Any, key: str) -> bytes:
    return b"".join([chunk async for chunk in store.get_stream(key)])


@pytest.mark.parametrize("kind", ALL)
async def test_put_head_get_delete(
    kind: str, make_store: MakeStore, png: Any, new_key: Any
) -> None:
    sut = await make_store(kind)
    key, body = new_key(), png(1)
    digest = hashlib.sha256(body).hexdigest()
    result = await sut.store.put(key, body, content_type="image/png", checksum_sha256=digest)
    assert result.key == key and result.bytes == len(body)
    head = await sut.store.head(key)
    assert head.exists and head.bytes == len(body)
    assert head.content_type == "image/png"
    assert head.checksum_sha256 == digest
    assert await _read(sut.store, key) == body
    assert await read_verified(sut.store, key, digest, max_bytes=1000) == body
    await sut.store.delete(key)
    assert not (await sut.store.head(key)).exists
    with pytest.raises(ObjectNotFound):
        await _read(sut.store, key)
    await sut.store.delete(key)  # idempotent


@pytest.mark.parametrize("kind", ALL)
async def test_checksum_mismatch_is_refused_and_stores_nothing(
    kind: str, make_store: MakeStore, png: Any, new_key: Any
) -> None:
    sut = await make_store(kind)
    key = new_key()
    with pytest.raises(ChecksumMismatch):
        await sut.store.put(key, png(2), content_type="image/png", checksum_sha256="0" * 64)
    assert not (await sut.store.head(key)).exists


@pytest.mark.parametrize("kind", ALL)
async def test_integrity_is_verified_on_read(
    kind: str, make_store: MakeStore, png: Any, new_key: Any
) -> None:
    sut = await make_store(kind)
    key, body = new_key(), png(3)
    digest = hashlib.sha256(body).hexdigest()
    await sut.store.put(key, body, content_type="image/png", checksum_sha256=digest)
    sut.corrupt(key, png(4))
    with pytest.raises(ChecksumMismatch):
        await read_verified(sut.store, key, digest, max_bytes=10_000)


@pytest.mark.parametrize("kind", ALL)
@pytest.mark.parametrize(
    "key",
    [
        "../etc/passwd",
        "test/tenants/alice@example.com/objects/x/original.png",
        "",
        "test/tenants/ans_aaaaaaaaaaaaaaaaaaaaaaaaaa/objects/aob_aaaaaaaaaaaaaaaaaaaaaaaaaa/x.png",
        "test/tenants/ans_aaaaaaaaaaaaaaaaaaaaaaaaaa/objects/aob_aaaaaaaaaaaaaaaaaaaaaaaaaa/original.svg",
        "/test/tenants/ans_aaaaaaaaaaaaaaaaaaaaaaaaaa/objects/aob_aaaaaaaaaaaaaaaaaaaaaaaaaa/original.png",
    ],
)
async def test_keys_not_built_by_the_server_are_refused(
    kind: str, key: str, make_store: MakeStore, png: Any
) -> None:
    sut = await make_store(kind)
    with pytest.raises(InvalidStorageKey):
        await sut.store.put(key, png(5), content_type="image/png")
    with pytest.raises(InvalidStorageKey):
        await sut.store.head(key)
    with pytest.raises(InvalidStorageKey):
        await sut.store.create_signed_get_url(key, 60)


@pytest.mark.parametrize("kind", ALL)
async def test_content_type_must_match_the_key(
    kind: str, make_store: MakeStore, png: Any, new_key: Any
) -> None:
    sut = await make_store(kind)
    key = new_key()
    with pytest.raises(InvalidStorageKey):
        await sut.store.put(key, png(6), content_type="text/html")
    assert not (await sut.store.head(key)).exists


@pytest.mark.parametrize("kind", ALL)
async def test_signed_get_reads_the_object(
    kind: str, make_store: MakeStore, png: Any, new_key: Any
) -> None:
    sut = await make_store(kind)
    key, body = new_key(), png(7)
    await sut.store.put(key, body, content_type="image/png")
    url = await sut.store.create_signed_get_url(key, 60)
    assert url.count("?") == 1
    status, headers, content = await sut.follow_get(url)
    assert status == 200 and content == body
    assert headers["content-type"] == "image/png"
    # An original is only ever a download, even without a name of its own.
    assert headers["content-disposition"] == 'attachment; filename="original.png"'


@pytest.mark.parametrize("kind", ALL)
async def test_signed_get_serves_previews_inline_and_originals_as_named_downloads(
    kind: str, make_store: MakeStore, png: Any, new_key: Any
) -> None:
    sut = await make_store(kind)
    namespace = new_id("ans")
    original, preview = new_key(namespace_id=namespace), new_key("preview", namespace_id=namespace)
    await sut.store.put(original, png(20), content_type="image/png")
    await sut.store.put(preview, png(21), content_type="image/webp")
    name = f"{new_id('ast')}.png"
    status, headers, content = await sut.follow_get(
        await sut.store.create_signed_get_url(original, 60, filename=name)
    )
    assert (status, content) == (200, png(20))
    assert headers["content-type"] == "image/png"
    assert headers["content-disposition"] == f'attachment; filename="{name}"'
    status, headers, content = await sut.follow_get(
        await sut.store.create_signed_get_url(preview, 60)
    )
    assert (status, content) == (200, png(21))
    assert headers["content-type"] == "image/webp"
    assert headers["content-disposition"] == 'inline; filename="preview.webp"'


@pytest.mark.parametrize("kind", ALL)
@pytest.mark.parametrize(
    "name", ["../x.png", "x.jpg", "x y.png", 'x".png', "x.png\r\nSet-Cookie: a", ".png", "é.png"]
)
async def test_download_names_are_plain_with_the_objects_extension(
    kind: str, name: str, make_store: MakeStore, new_key: Any
) -> None:
    sut = await make_store(kind)
    with pytest.raises(InvalidStorageKey):
        await sut.store.create_signed_get_url(new_key(), 60, filename=name)


@pytest.mark.parametrize("kind", EXPIRING)
async def test_signed_get_fails_after_expiry(
    kind: str, make_store: MakeStore, png: Any, new_key: Any
) -> None:
    sut = await make_store(kind)
    key = new_key()
    await sut.store.put(key, png(8), content_type="image/png")
    # SigV4 dates have whole seconds, so a 1 s link can be dead before a busy machine reads it:
    # 3 s leaves room for the first read and still expires quickly.
    url = await sut.store.create_signed_get_url(key, 3)
    assert (await sut.follow_get(url))[0] == 200
    if sut.clock is not None:
        sut.clock.now += 4
    else:
        await asyncio.sleep(4.2)
    assert (await sut.follow_get(url))[0] == 403


@pytest.mark.parametrize("kind", ALL)
@pytest.mark.parametrize("variant", ["original", "staging"])
async def test_a_written_key_is_never_overwritten(
    kind: str, variant: str, make_store: MakeStore, png: Any, new_key: Any
) -> None:
    sut = await make_store(kind)
    key, body, other = new_key(variant), png(30), png(31)
    digest = hashlib.sha256(body).hexdigest()
    await sut.store.put(key, body, content_type="image/png", checksum_sha256=digest)
    # The same bytes again (a retried put) succeed without writing anything new ...
    again = await sut.store.put(key, body, content_type="image/png", checksum_sha256=digest)
    assert again.bytes == len(body)
    # ... other bytes are refused, with or without a declared checksum, and change nothing.
    with pytest.raises(ObjectExists):
        await sut.store.put(key, other, content_type="image/png")
    with pytest.raises(ObjectExists):
        await sut.store.put(
            key, other, content_type="image/png", checksum_sha256=hashlib.sha256(other).hexdigest()
        )
    assert await read_verified(sut.store, key, digest, max_bytes=10_000) == body
    head = await sut.store.head(key)
    assert head.bytes == len(body) and head.checksum_sha256 == digest
    if sut.root is not None:
        leftovers = [p.name for p in (sut.root / key).parent.iterdir() if p.name.endswith(".tmp")]
        assert leftovers == []


@pytest.mark.parametrize("kind", ATOMIC_CREATE)
async def test_concurrent_writers_of_one_key_leave_exactly_one_winner(
    kind: str, make_store: MakeStore, png: Any, new_key: Any
) -> None:
    sut = await make_store(kind)
    for round_ in range(5):
        key = new_key()
        bodies = [png(50 + 4 * round_ + writer) for writer in range(4)]
        outcomes = await asyncio.gather(
            *(sut.store.put(key, body, content_type="image/png") for body in bodies),
            return_exceptions=True,
        )
        winners = [
            body
            for body, outcome in zip(bodies, outcomes, strict=True)
            if not isinstance(outcome, BaseException)
        ]
        assert len(winners) == 1, outcomes
        assert all(isinstance(o, ObjectExists) for o in outcomes if isinstance(o, BaseException))
        assert await _read(sut.store, key) == winners[0]


@pytest.mark.parametrize("kind", ALL)
async def test_listing_a_namespace_shows_its_objects_and_staging_bytes_only(
    kind: str, make_store: MakeStore, png: Any, new_key: Any
) -> None:
    sut = await make_store(kind)
    namespace, neighbour = new_id("ans"), new_id("ans")
    mine = [
        new_key("original", namespace_id=namespace),
        new_key("preview", "webp", namespace_id=namespace),
        new_key("staging", namespace_id=namespace),
    ]
    theirs = new_key("original", namespace_id=neighbour)
    bodies = {key: png(40 + index) for index, key in enumerate([*mine, theirs])}
    for key, body in bodies.items():
        content_type = "image/webp" if key.endswith(".webp") else "image/png"
        await sut.store.put(key, body, content_type=content_type)
    listed = [item async for item in sut.store.list_namespace(namespace_prefix("test", namespace))]
    assert sorted(item.key for item in listed) == sorted(mine)
    assert {item.key: item.bytes for item in listed} == {key: len(bodies[key]) for key in mine}
    for item in listed:
        assert item.modified.tzinfo is not None
        assert abs((item.modified - datetime.now(UTC)).total_seconds()) < 120
    empty = namespace_prefix("test", new_id("ans"))
    assert [item async for item in sut.store.list_namespace(empty)] == []
    await sut.store.delete(mine[2])
    after = [
        item.key async for item in sut.store.list_namespace(namespace_prefix("test", namespace))
    ]
    assert sorted(after) == sorted(mine[:2])


@pytest.mark.parametrize("kind", ALL)
@pytest.mark.parametrize(
    "prefix",
    [
        "",
        "test/",
        "test/tenants/",
        "../",
        "test/tenants/ans_x/",
        "test/tenants/ans_aaaaaaaaaaaaaaaaaaaaaaaaaa",
    ],
)
async def test_listing_takes_only_a_namespace_prefix(
    kind: str, prefix: str, make_store: MakeStore
) -> None:
    sut = await make_store(kind)
    with pytest.raises(InvalidStorageKey):
        _ = [item async for item in sut.store.list_namespace(prefix)]


@pytest.mark.parametrize("kind", ALL)
async def test_signed_puts_exist_only_for_staging_keys(
    kind: str, make_store: MakeStore, new_key: Any
) -> None:
    sut = await make_store(kind)
    for variant, ext in (("original", "png"), ("preview", "webp")):
        with pytest.raises(InvalidStorageKey):
            await sut.store.create_signed_put_url(
                new_key(variant, ext), content_type=f"image/{ext}", content_length=10, expires_in=60
            )
    with pytest.raises(InvalidStorageKey):
        await sut.store.create_signed_get_url(new_key("staging"), 60)


def _tamper(url: str, param: str, change: Callable[[str], str]) -> str:
    parts = urlsplit(url)
    query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    name = next(k for k in query if k.lower() == param.lower())
    query[name] = change(query[name])
    return urlunsplit(parts._replace(query=urlencode(query)))


@pytest.mark.parametrize("kind", HMAC_SIGNED)
async def test_tampered_signed_get_fails(
    kind: str, make_store: MakeStore, png: Any, new_key: Any
) -> None:
    sut = await make_store(kind)
    key, other = new_key(), new_key()
    await sut.store.put(key, png(9), content_type="image/png")
    await sut.store.put(other, png(10), content_type="image/png")
    url = await sut.store.create_signed_get_url(key, 60)
    flipped = _tamper(url, "signature", lambda s: ("0" if s[0] != "0" else "1") + s[1:])
    assert (await sut.follow_get(flipped))[0] == 403
    extended = _tamper(url, "expires", lambda s: str(int(s) + 3600))
    assert (await sut.follow_get(extended))[0] == 403
    # the same signature on another object's key is refused
    other_url = url.replace(key, other)
    assert (await sut.follow_get(other_url))[0] == 403


@pytest.mark.parametrize("kind", HMAC_SIGNED)
async def test_a_link_serves_one_way_only(
    kind: str, make_store: MakeStore, png: Any, new_key: Any
) -> None:
    """A download's name and a preview's inline answer are signed: neither can be changed."""
    sut = await make_store(kind)
    namespace = new_id("ans")
    original, preview = new_key(namespace_id=namespace), new_key("preview", namespace_id=namespace)
    await sut.store.put(original, png(22), content_type="image/png")
    await sut.store.put(preview, png(23), content_type="image/webp")
    download = await sut.store.create_signed_get_url(original, 60, filename="ast_a.png")
    assert (await sut.follow_get(download))[0] == 200
    renamed = _tamper(download, "filename", lambda _name: "ast_b.png")
    assert (await sut.follow_get(renamed))[0] == 403
    unnamed = download.replace("filename=ast_a.png&", "")
    assert "filename" not in unnamed and (await sut.follow_get(unnamed))[0] == 403
    # A preview link's signature does not open the original, named or not, nor the reverse.
    shown = await sut.store.create_signed_get_url(preview, 60)
    assert (await sut.follow_get(shown.replace(preview, original)))[0] == 403
    named = shown.replace("?", "?filename=preview.webp&").replace(preview, original)
    assert (await sut.follow_get(named))[0] == 403
    assert (await sut.follow_get(download.replace(original, preview)))[0] == 403


@pytest.mark.parametrize("kind", HMAC_SIGNED)
async def test_signed_put_is_bound_to_type_and_length(
    kind: str, make_store: MakeStore, png: Any, new_key: Any
) -> None:
    sut = await make_store(kind)
    key, body = new_key("staging"), png(11)
    signed = await sut.store.create_signed_put_url(
        key, content_type="image/png", content_length=len(body), expires_in=60
    )
    wrong_type = {**signed.headers, "Content-Type": "text/html"}
    assert await sut.follow_put(signed.url, wrong_type, body) in (400, 403)
    assert not (await sut.store.head(key)).exists
    assert await sut.follow_put(signed.url, signed.headers, body) == 200
    assert await _read(sut.store, key) == body


@pytest.mark.parametrize("kind", ["moto"])
async def test_s3_objects_are_private(
    kind: str, make_store: MakeStore, png: Any, new_key: Any
) -> None:
    sut = await make_store(kind)
    key = new_key()
    await sut.store.put(key, png(12), content_type="image/png")
    assert sut.peer is not None
    acl = sut.peer.client().get_object_acl(Bucket=sut.bucket, Key=key)
    grantees = [grant["Grantee"].get("URI", "") for grant in acl["Grants"]]
    assert not any("AllUsers" in uri or "AuthenticatedUsers" in uri for uri in grantees)


@pytest.mark.parametrize("kind", ["moto", "s3rver"])
async def test_s3_presigned_urls_sign_what_they_bind(
    kind: str, make_store: MakeStore, new_key: Any
) -> None:
    sut = await make_store(kind)
    key = new_key()
    get_url = await sut.store.create_signed_get_url(key, 300)
    query = {k.lower(): v[0] for k, v in parse_qs(urlsplit(get_url).query).items()}
    assert query["x-amz-algorithm"] == "AWS4-HMAC-SHA256"
    assert query["x-amz-expires"] == "300"
    assert query["response-content-type"] == "image/png"
    assert query["response-content-disposition"] == 'attachment; filename="original.png"'
    assert "x-amz-acl" not in query
    put = await sut.store.create_signed_put_url(
        new_key("staging"), content_type="image/png", content_length=123, expires_in=60
    )
    put_query = {k.lower(): v[0] for k, v in parse_qs(urlsplit(put.url).query).items()}
    assert set(put_query["x-amz-signedheaders"].split(";")) >= {
        "content-length",
        "content-type",
        "host",
    }
    assert put_query["x-amz-expires"] == "60"
    assert put.headers == {"Content-Type": "image/png", "Content-Length": "123"}


async def test_local_files_are_private(make_store: MakeStore, png: Any, new_key: Any) -> None:
    sut = await make_store("local")
    key = new_key()
    await sut.store.put(key, png(13), content_type="image/png")
    assert sut.root is not None
    path = sut.root / key
    assert path.stat().st_mode & 0o777 == 0o600
    directory = path.parent
    while directory != sut.root.parent:
        assert directory.stat().st_mode & 0o077 == 0, directory
        directory = directory.parent
    leftovers = [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []
