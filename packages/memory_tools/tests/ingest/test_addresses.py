"""The address policy: every non-public form is refused, public unicast is allowed."""

from __future__ import annotations

import pytest

from memory_tools.ingest import blocked_reason, is_public_address
from memory_tools.ingest.addresses import parse_address

BLOCKED = [
    "127.0.0.1",
    "127.255.255.254",
    "10.0.0.1",
    "172.16.5.4",
    "192.168.1.1",
    "169.254.169.254",
    "100.64.0.1",  # CGNAT: is_private misses it
    "100.100.100.200",  # Alibaba metadata, inside CGNAT
    "0.0.0.0",
    "0.1.2.3",
    "224.0.0.1",  # multicast: is_global is True for it
    "239.255.255.250",
    "255.255.255.255",
    "240.0.0.1",
    "192.0.2.10",  # TEST-NET-1
    "198.51.100.7",
    "203.0.113.9",
    "198.18.0.1",  # benchmarking
    "192.0.0.8",
    "::1",
    "::",
    "fe80::1",
    "fc00::1",
    "fd00:ec2::254",  # AWS metadata over IPv6
    "ff02::1",
    "::ffff:127.0.0.1",
    "::ffff:8.8.8.8",  # mapped public is refused too: reach IPv4 as IPv4
    "::127.0.0.1",  # IPv4-compatible
    "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
    "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
    "64:ff9b:1::a00:1",  # local-use NAT64
    "2002:7f00:1::1",  # 6to4 of 127.0.0.1
    "2002:c0a8:101::1",  # 6to4 of 192.168.1.1
    "2001:0:4136:e378:8000:63bf:3fff:fdd2",  # Teredo, client 192.0.2.45
    "2001:db8::1",  # documentation
]

PUBLIC = ["8.8.8.8", "93.184.216.34", "1.1.1.1", "2606:4700:4700::1111", "2a00:1450:4001::200e"]


@pytest.mark.parametrize("text", BLOCKED)
def test_non_public_addresses_are_refused_with_a_reason(text: str) -> None:
    address = parse_address(text)
    assert address is not None
    reason = blocked_reason(address)
    assert reason is not None and reason.startswith(("a ", "an "))
    assert not is_public_address(address)


@pytest.mark.parametrize("text", PUBLIC)
def test_public_unicast_addresses_are_allowed(text: str) -> None:
    address = parse_address(text)
    assert address is not None
    assert blocked_reason(address) is None


@pytest.mark.parametrize("text", ["2130706433", "0x7f.1", "127.1", "localhost", "fe80::1%eth0"])
def test_only_canonical_literals_parse_as_addresses(text: str) -> None:
    assert parse_address(text) is None


def test_bracketed_ipv6_parses() -> None:
    assert parse_address("[::1]") == parse_address("::1")
