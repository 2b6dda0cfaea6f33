"""``ASSET_FETCH_DEV_HOSTS``: the exact ``host:port`` pairs a development server may fetch.

The fetcher (and the headless browser, whose every request goes through it) refuses loopback
and private addresses. To try ``sourceUrl`` saves or the scraper tools against a page served on
the developer's own machine, this setting names exact ``host:port`` pairs that are reachable
anyway, over ``http`` or ``https``. Nothing else is: not another port of the same host, not a
redirect to any other private address.

The setting is parsed here, strictly (a bad entry is a start-up error naming it), and the host
is written in one canonical form (:func:`host_key`) that the fetcher compares URLs against.
"""

from __future__ import annotations

import ipaddress
import re
from typing import NamedTuple

# One DNS label: letters, digits and inner hyphens, 1-63 characters.
_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")


class DevHost(NamedTuple):
    """One allowed destination: a canonical host (:func:`host_key`) and a TCP port."""

    host: str
    port: int

    def __str__(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"{shown}:{self.port}"


def host_key(host: str) -> str:
    """``host`` in the form dev hosts are compared in.

    An IP address in its canonical form without brackets (``::1``, ``127.0.0.1``), a name in
    lower case without a trailing dot. Used for the setting and for every URL checked against it.
    """
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        return str(ipaddress.ip_address(bare))
    except ValueError:
        return host.lower().rstrip(".")


def parse_dev_host(entry: str) -> DevHost:
    """One ``host:port`` entry, or ``ValueError`` saying what is wrong with it."""
    text = entry.strip()
    if not text:
        raise ValueError("an entry is empty (write host:port, comma-separated)")
    if "/" in text or "@" in text or "*" in text:
        raise ValueError(
            f"{text!r}: write host:port only (no scheme, path, user or wildcard), "
            "e.g. 127.0.0.1:8000"
        )
    if text.startswith("["):
        closing = text.find("]")
        if closing < 0 or text[closing + 1 : closing + 2] != ":":
            raise ValueError(f"{text!r}: write an IPv6 address as [address]:port, e.g. [::1]:8000")
        host, port_text = text[1:closing], text[closing + 2 :]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep or not host:
            raise ValueError(f"{text!r}: needs a port, e.g. {text}:8000")
        if ":" in host:
            raise ValueError(f"{text!r}: write an IPv6 address in brackets, e.g. [::1]:8000")
    if not port_text.isascii() or not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"{text!r}: the port must be a number from 1 to 65535")
    return DevHost(_checked_host(text, host, bracketed=text.startswith("[")), int(port_text))


def _checked_host(entry: str, host: str, *, bracketed: bool) -> str:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if address is not None:
        if bracketed != (address.version == 6):
            raise ValueError(f"{entry!r}: only IPv6 addresses are written in brackets")
        if address.is_unspecified or address.is_multicast or address.is_link_local:
            # Never a page of one's own: 0.0.0.0 is no destination, link-local holds the
            # cloud's metadata service.
            raise ValueError(f"{entry!r}: an unspecified, multicast or link-local address")
        if address.version == 6 and address.ipv4_mapped is not None:
            raise ValueError(f"{entry!r}: write the IPv4 address itself")
        return str(address)
    if bracketed:
        raise ValueError(f"{entry!r}: {host!r} is not an IPv6 address")
    name = host.lower().rstrip(".")
    labels = name.split(".")
    if len(name) > 253 or not all(_LABEL.match(label) for label in labels):
        raise ValueError(f"{entry!r}: {host!r} is neither an IP address nor a host name")
    if _NUMERIC_LABEL.match(labels[-1]):
        raise ValueError(f"{entry!r}: write IP addresses as canonical dotted-decimal literals")
    return name


def parse_dev_hosts(value: str) -> tuple[DevHost, ...]:
    """Every entry of a comma-separated ``host:port`` list, in order, without repeats."""
    found: list[DevHost] = []
    for entry in value.split(","):
        parsed = parse_dev_host(entry)
        if parsed not in found:
            found.append(parsed)
    return tuple(found)
