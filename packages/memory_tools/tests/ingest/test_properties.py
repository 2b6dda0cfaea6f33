"""Property-based tests (hypothesis): the URL policy, the image sniffer and the cursor codec.

No generated URL or address reaches a private, loopback, link-local, metadata or otherwise
non-public destination, and no input makes these functions raise anything but their stable
refusal. Example counts are modest and the runs derandomized, so CI is quick and repeatable.
"""

from __future__ import annotations

import ipaddress
import string
from datetime import UTC, datetime
from ipaddress import IPv4Address, IPv6Address

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memory_db.ids import new_id
from memory_tools.errors import InvalidImage, InvalidInputFailure, UnsafeUrl
from memory_tools.ingest.addresses import blocked_reason
from memory_tools.ingest.fetch import FetchPolicy, check_url
from memory_tools.ingest.images import FORMATS, inspect_image_sync, sniff
from memory_tools.ingest.network import (
    AddressPolicy,
    MappedResolver,
    SafeNetworkBackend,
    UnsafeDestination,
)
from memory_tools.workflows.assets import decode_cursor, encode_cursor

from ..pictures import picture

PROPERTIES = settings(
    max_examples=100,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
POLICY = FetchPolicy(max_bytes=1 << 20)
METADATA = (IPv4Address("169.254.169.254"), IPv6Address("fd00:ec2::254"))


def _forbidden_v4(address: IPv4Address) -> bool:
    """The oracle, from the standard library alone: anything not plainly global unicast."""
    return (
        not address.is_global
        or address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
        or address in METADATA
    )


def _forbidden(address: IPv4Address | IPv6Address) -> bool:
    if isinstance(address, IPv4Address):
        return _forbidden_v4(address)
    embedded = [address.ipv4_mapped, address.sixtofour]
    if address.teredo is not None:
        embedded.extend(address.teredo)
    if any(inner is not None and _forbidden_v4(inner) for inner in embedded):
        return True
    return (
        not address.is_global
        or address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_site_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
        or address in METADATA
    )


# Addresses from everywhere, weighted towards the interesting ranges.
SPECIAL = st.sampled_from(
    [
        "127.0.0.0/8",
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "169.254.0.0/16",
        "100.64.0.0/10",
        "0.0.0.0/8",
        "224.0.0.0/4",
        "240.0.0.0/4",
        "::1/128",
        "fe80::/10",
        "fc00::/7",
        "::ffff:0:0/96",
        "2002::/16",
        "2001::/32",
        "64:ff9b::/96",
        "64:ff9b:1::/48",
        "ff00::/8",
    ]
).flatmap(
    lambda net: st.integers(0, ipaddress.ip_network(net).num_addresses - 1).map(
        lambda offset: ipaddress.ip_network(net)[offset]
    )
)
ADDRESSES = st.one_of(st.ip_addresses(), SPECIAL)


def _hosts(address: IPv4Address | IPv6Address) -> list[str]:
    """Ways of writing ``address`` in a URL's host, canonical and not."""
    if isinstance(address, IPv6Address):
        return [f"[{address}]", f"[{address.exploded}]"]
    value = int(address)
    return [
        str(address),
        str(value),
        hex(value),
        "0" + oct(value)[2:],
        f"{value >> 24}.{value & 0xFFFFFF}",
    ]


@PROPERTIES
@given(address=ADDRESSES, scheme=st.sampled_from(["https", "http"]), path=st.text(max_size=20))
@example(address=IPv4Address("169.254.169.254"), scheme="https", path="latest/meta-data")
@example(address=IPv6Address("::ffff:127.0.0.1"), scheme="https", path="")
def test_no_literal_address_url_reaches_a_forbidden_destination(
    address: IPv4Address | IPv6Address, scheme: str, path: str
) -> None:
    policy = FetchPolicy(max_bytes=1 << 20, allow_http=True)
    for host in _hosts(address):
        raw = f"{scheme}://{host}/{path}"
        try:
            url = check_url(raw, policy)
        except UnsafeUrl:
            continue
        # Accepted: then it names exactly this public address, written canonically.
        assert not _forbidden(address), raw
        assert ipaddress.ip_address(url.host) == address


@PROPERTIES
@given(
    address=ADDRESSES, name=st.from_regex(r"[a-z][a-z0-9-]{0,20}\.(com|net|org)", fullmatch=True)
)
async def test_no_resolved_address_is_connected_to_when_forbidden(
    address: IPv4Address | IPv6Address, name: str
) -> None:
    """A name that resolves to a forbidden address is refused before any connection is made."""
    if not _forbidden(address):
        return  # a public address: connecting would leave this machine
    assert blocked_reason(address) is not None
    backend = SafeNetworkBackend(MappedResolver({name: [str(address)]}), AddressPolicy())
    with pytest.raises(UnsafeDestination):
        await backend.connect_tcp(name, 443, timeout=1)


@PROPERTIES
@given(
    raw=st.one_of(st.text(max_size=300), st.from_regex(r"[a-z]{2,6}://[^\s]{0,80}", fullmatch=True))
)
def test_arbitrary_text_is_a_url_or_a_clean_refusal(raw: str) -> None:
    try:
        url = check_url(raw, POLICY)
    except UnsafeUrl:
        return
    assert url.scheme == "https" and not url.userinfo and url.host


IMAGE_MAGIC = st.sampled_from(
    [b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"GIF89a", b"GIF87a", b"RIFF\x10\x00\x00\x00WEBP"]
)


@settings(PROPERTIES, max_examples=120)
@given(
    data=st.one_of(
        st.binary(max_size=2048),
        st.tuples(IMAGE_MAGIC, st.binary(max_size=512)).map(lambda parts: parts[0] + parts[1]),
        # A real image with its tail cut off or bytes overwritten.
        st.tuples(
            st.integers(0, 40), st.integers(0, 10_000), st.binary(min_size=1, max_size=64)
        ).map(lambda t: _damaged(*t)),
    )
)
def test_the_sniffer_never_crashes_and_accepts_only_images(data: bytes) -> None:
    announced = sniff(data)
    if announced is None:
        full = (b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"GIF87a", b"GIF89a")
        assert not any(data.startswith(magic) for magic in full)
    try:
        image = inspect_image_sync(data, max_pixels=4_000_000, preview_edge=64)
    except InvalidImage:
        return
    # Accepted: a decodable image of an accepted format whose preview exists.
    assert announced is not None and image.format in FORMATS.values()
    assert image.width > 0 and image.height > 0 and image.preview


def _damaged(seed: int, at: int, patch: bytes) -> bytes:
    original = picture(seed)
    at %= len(original)
    if seed % 2:
        return original[:at]  # truncated
    return original[:at] + patch + original[at + len(patch) :]


IDS = st.builds(lambda _n: new_id("ast"), st.integers(0, 3))
TIMES = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)
ORDERS = st.sampled_from(["newest", "oldest"])


@PROPERTIES
@given(created=TIMES, asset_id=IDS, order=ORDERS)
def test_cursors_round_trip(created: datetime, asset_id: str, order: str) -> None:
    assert decode_cursor(encode_cursor(created, asset_id, order), order) == (created, asset_id)


@PROPERTIES
@given(
    created=TIMES,
    asset_id=IDS,
    order=ORDERS,
    at=st.integers(0, 200),
    char=st.sampled_from(string.ascii_letters + string.digits + "-_=.!%"),
    cut=st.booleans(),
)
def test_tampered_cursors_are_refused_with_the_stable_code(
    created: datetime, asset_id: str, order: str, at: int, char: str, cut: bool
) -> None:
    cursor = encode_cursor(created, asset_id, order)
    at %= len(cursor)
    tampered = cursor[:at] if cut else cursor[:at] + char + cursor[at + 1 :]
    try:
        decoded = decode_cursor(tampered, order)
    except InvalidInputFailure as refused:
        assert refused.code == "invalid_input" and str(refused).startswith("invalid_input: cursor")
        return
    # Not refused: base64 has slack in its last character; it must decode to a valid position.
    assert decoded[0].tzinfo is not None and decoded[1].startswith("ast_")


@PROPERTIES
@given(raw=st.text(max_size=200), order=ORDERS)
def test_arbitrary_text_is_no_cursor(raw: str, order: str) -> None:
    try:
        created, asset_id = decode_cursor(raw, order)
    except InvalidInputFailure as refused:
        assert refused.code == "invalid_input"
        return
    assert created.tzinfo is not None and asset_id.startswith("ast_")
