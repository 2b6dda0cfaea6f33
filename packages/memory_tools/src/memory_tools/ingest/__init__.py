"""Saving images (docs/design.md#saving): safe fetching, validation, previews, the workflow."""

from memory_tools.ingest.addresses import blocked_reason, is_public_address
from memory_tools.ingest.fetch import FetchedBody, FetchPolicy, SafeFetcher, check_url
from memory_tools.ingest.network import AddressPolicy, MappedResolver, Resolver, SystemResolver

__all__ = [
    "AddressPolicy",
    "FetchPolicy",
    "FetchedBody",
    "MappedResolver",
    "Resolver",
    "SafeFetcher",
    "SystemResolver",
    "blocked_reason",
    "check_url",
    "is_public_address",
]
