"""An httpcore network backend that connects only to addresses it has resolved and checked.

httpcore asks the backend to ``connect_tcp(host, port)`` with the URL's host name. We resolve
the name ourselves, refuse the connection if *any* resolved address is not public (a name that
answers with one public and one private address is refused, not raced), and connect to the
checked numeric address. DNS rebinding between check and connect is therefore impossible: no
second lookup happens. TLS is unaffected: httpcore passes the URL's host name to ``start_tls``
for SNI and certificate verification, whatever address the socket is connected to.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, cast

import anyio
import httpcore

from memory_db import DevHost, host_key
from memory_tools.ingest.addresses import (
    IpAddress,
    blocked_reason,
    parse_address,
    refused_even_in_development,
)


class UnsafeDestination(Exception):
    """The destination is refused by the address policy (raised before any connection)."""

    def __init__(self, host: str, reason: str, address: IpAddress | None = None) -> None:
        self.host = host
        self.reason = reason
        self.address = address  # the refused address, when there is one
        super().__init__(f"{host} resolves to {reason}")


class UnresolvableHost(Exception):
    """The host name has no address."""

    def __init__(self, host: str) -> None:
        self.host = host
        super().__init__(f"{host} could not be resolved")


class Resolver(Protocol):
    """Turns a host name into the addresses it stands for."""

    async def resolve(self, host: str, port: int) -> Sequence[IpAddress]:
        """Every address of ``host`` (empty when there is none)."""
        ...


class SystemResolver:
    """The operating system's resolver (``getaddrinfo``), run off the event loop."""

    async def resolve(self, host: str, port: int) -> Sequence[IpAddress]:
        """Every address ``getaddrinfo`` returns for ``host``."""
        try:
            infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError:
            return []
        addresses: list[IpAddress] = []
        for _family, _type, _proto, _name, sockaddr in infos:
            address = parse_address(str(sockaddr[0]))
            if address is not None and address not in addresses:
                addresses.append(address)
        return addresses


@dataclass(frozen=True)
class MappedResolver:
    """A fixed name → addresses table (tests); names not in it do not resolve."""

    hosts: Mapping[str, Sequence[str]]

    async def resolve(self, host: str, port: int) -> Sequence[IpAddress]:
        """The mapped addresses of ``host``."""
        found = [parse_address(text) for text in self.hosts.get(host.lower().rstrip("."), ())]
        return [address for address in found if address is not None]


@dataclass(frozen=True)
class AddressPolicy:
    """Which resolved addresses may be connected to.

    The default admits public unicast addresses only. ``dev_hosts`` is the development
    allowance (``ASSET_FETCH_DEV_HOSTS``): a connection to exactly one of those ``host:port``
    pairs may reach a loopback or private address (never link-local, multicast or unspecified:
    :func:`~memory_tools.ingest.addresses.refused_even_in_development`); another port of the
    same host, or another host at the same address, is judged like any other destination.
    ``loopback_names`` exists for tests that serve content on 127.0.0.1 under made-up names: it
    admits a loopback address *only* for those exact host names, and only when the resolver
    produced it; a literal ``127.0.0.1`` is still refused.
    """

    loopback_names: frozenset[str] = field(default_factory=frozenset)
    dev_hosts: frozenset[DevHost] = field(default_factory=frozenset)

    def is_dev_host(self, host: str, port: int) -> bool:
        """True when ``host:port`` is one of the development allowance's exact pairs."""
        return bool(self.dev_hosts) and DevHost(host_key(host), port) in self.dev_hosts

    def reason_to_refuse(
        self, host: str, port: int, address: IpAddress, *, literal: bool
    ) -> str | None:
        """Why ``address`` (reached through ``host:port``) is refused, or ``None``."""
        if self.is_dev_host(host, port):
            return refused_even_in_development(address)
        reason = blocked_reason(address)
        if reason is None:
            return None
        if not literal and address.is_loopback and host.lower() in self.loopback_names:
            return None
        return reason


class SafeNetworkBackend(httpcore.AsyncNetworkBackend):
    """Resolve, check every address, then connect to a checked address only."""

    def __init__(
        self,
        resolver: Resolver,
        policy: AddressPolicy,
        *,
        on_connect: Callable[[str, IpAddress], None] | None = None,
    ) -> None:
        self._resolver = resolver
        self._policy = policy
        # httpcore exports a placeholder type for AnyIOBackend when anyio is missing; it is not.
        self._inner = cast(httpcore.AsyncNetworkBackend, httpcore.AnyIOBackend())
        self._on_connect = on_connect

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's backend interface)
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Connect to the first admitted address of ``host``."""
        addresses = await self._admitted(host, port)
        last_error: Exception | None = None
        for address in addresses:
            try:
                stream = await self._inner.connect_tcp(
                    str(address),
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last_error = exc
                continue
            if self._on_connect is not None:
                self._on_connect(host, address)
            return stream
        if last_error is None:  # _admitted never returns an empty list; say so if it did
            raise httpcore.ConnectError(f"no address of {host} to connect to")
        raise last_error

    async def _admitted(self, host: str, port: int) -> list[IpAddress]:
        literal = parse_address(host)
        addresses: Sequence[IpAddress]
        if literal is not None:
            addresses = [literal]
        else:
            addresses = await self._resolver.resolve(host, port)
        if not addresses:
            raise UnresolvableHost(host)
        for address in addresses:
            reason = self._policy.reason_to_refuse(host, port, address, literal=literal is not None)
            if reason is not None:
                raise UnsafeDestination(host, reason, address)
        return list(addresses)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's backend interface)
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Never: a fetch reaches TCP destinations only."""
        raise UnsafeDestination(path, "a Unix socket")

    async def sleep(self, seconds: float) -> None:
        """Delegate to anyio."""
        await self._inner.sleep(seconds)
