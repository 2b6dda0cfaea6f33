"""Which network destinations a fetch may reach: only globally routable unicast addresses.

``ipaddress``'s ``is_global`` is the base (``is_private`` alone misses CGNAT 100.64/10), but it
answers ``True`` for multicast and, in older Pythons, for IPv6 forms that *embed* an IPv4
address. Those forms are unwrapped first (IPv4-mapped, IPv4-compatible, NAT64, 6to4, Teredo) so
that ``2002:7f00:1::`` is judged as the loopback address it routes to.
"""

from __future__ import annotations

import ipaddress
from ipaddress import IPv4Address, IPv6Address
from typing import TypeAlias

IpAddress: TypeAlias = IPv4Address | IPv6Address

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
_V4_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")
_V4_FUTURE_USE = ipaddress.ip_network("240.0.0.0/4")  # 255.255.255.255 (broadcast) included
# Listed explicitly as well as through is_global, whose tables differ between Python releases.
_V4_SPECIAL = tuple(
    ipaddress.ip_network(net)
    for net in (
        "0.0.0.0/8",
        "100.64.0.0/10",
        "192.0.0.0/24",
        "192.0.2.0/24",
        "192.88.99.0/24",
        "198.18.0.0/15",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "240.0.0.0/4",
    )
)
_V6_SPECIAL = tuple(
    ipaddress.ip_network(net)
    for net in ("100::/64", "2001::/23", "2001:db8::/32", "3fff::/20", "5f00::/16")
)


def parse_address(text: str) -> IpAddress | None:
    """The address written in canonical literal form (brackets allowed), else ``None``."""
    candidate = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    try:
        address = ipaddress.ip_address(candidate)
    except ValueError:
        return None
    if isinstance(address, IPv6Address) and address.scope_id is not None:
        return None
    return address


def _embedded_ipv4(address: IPv6Address) -> list[IPv4Address]:
    """IPv4 addresses an IPv6 address routes to or carries (checked as well as the v6 form)."""
    embedded: list[IPv4Address] = []
    if address.ipv4_mapped is not None:
        embedded.append(address.ipv4_mapped)
    if address in _IPV4_COMPATIBLE and int(address) > 1:
        embedded.append(IPv4Address(int(address) & 0xFFFFFFFF))
    if address in _NAT64 or address in _NAT64_LOCAL:
        embedded.append(IPv4Address(int(address) & 0xFFFFFFFF))
    if address.sixtofour is not None:
        embedded.append(address.sixtofour)
    if address.teredo is not None:
        server, client = address.teredo
        embedded.extend((server, client))
    return embedded


def _v4_reason(address: IPv4Address) -> str | None:
    if address.is_unspecified or address in ipaddress.ip_network("0.0.0.0/8"):
        return "an unspecified address"
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address (cloud metadata lives here)"
    if address.is_multicast:
        return "a multicast address"
    if address in ipaddress.ip_network("100.64.0.0/10"):
        return "a carrier-grade NAT address"
    if address.is_private:
        return "a private or reserved address"
    if address.is_reserved or not address.is_global or any(address in n for n in _V4_SPECIAL):
        return "a reserved address"
    return None


def blocked_reason(address: IpAddress) -> str | None:
    """Why a fetch may not connect to ``address``, or ``None`` when it is a public unicast one."""
    if isinstance(address, IPv4Address):
        return _v4_reason(address)
    for inner in _embedded_ipv4(address):
        reason = _v4_reason(inner)
        if reason is not None:
            return f"an IPv6 form of {reason}"
    # ::1 and :: lie inside ::/96 too: named for what they are, not for that form.
    if address.is_unspecified:
        return "an unspecified address"
    if address.is_loopback:
        return "a loopback address"
    if address.ipv4_mapped is not None or address in _IPV4_COMPATIBLE:
        # Even a public IPv4 must be reached as IPv4: mapped forms bypass v6-only filtering.
        return "an IPv4-mapped or IPv4-compatible IPv6 address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_multicast:
        return "a multicast address"
    if address.is_site_local or address in ipaddress.ip_network("fc00::/7"):
        return "a unique-local address"
    if address in _NAT64_LOCAL:
        return "a local-use NAT64 address"
    if address.is_private or address.is_reserved or not address.is_global:
        return "a private or reserved address"
    if any(address in net for net in _V6_SPECIAL):
        return "a private or reserved address"
    return None


def refused_even_in_development(address: IpAddress) -> str | None:
    """Why ``address`` is refused even for an ``ASSET_FETCH_DEV_HOSTS`` pair, or ``None``.

    The development allowance admits loopback and private addresses, never these: no page of
    one's own lives at an unspecified, multicast or reserved address, and link-local is where
    clouds serve their instance metadata (IPv6 forms carrying such an IPv4 address included).
    """
    forms: list[IpAddress] = [address]
    if isinstance(address, IPv6Address):
        forms.extend(_embedded_ipv4(address))
    for form in forms:
        if form.is_unspecified or (isinstance(form, IPv4Address) and form in _V4_THIS_NETWORK):
            return "an unspecified address"
        if form.is_link_local:
            return "a link-local address (cloud metadata lives here)"
        if form.is_multicast:
            return "a multicast address"
        if isinstance(form, IPv4Address) and form in _V4_FUTURE_USE:
            return "a reserved address"
    return None


def is_public_address(address: IpAddress) -> bool:
    """True when ``address`` is a globally routable unicast address."""
    return blocked_reason(address) is None
