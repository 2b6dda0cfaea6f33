"""What the workflows need, built once by an app's bootstrap and shared by every tool call."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from memory_db import Database, MemorySettings
from memory_db.describing import Describer
from memory_db.embedding import Embedder, Embedders
from memory_db.storage import AssetObjectStore
from memory_db.vectors import DEFAULT_ALIAS
from memory_tools.capacity import CallAdmission, DecodeAdmission
from memory_tools.key_activity import KeyActivity
from memory_tools.query_cache import QueryEmbeddingCache, QueryPreviews

if TYPE_CHECKING:
    from memory_tools.ingest.fetch import SafeFetcher


@dataclass(frozen=True)
class MemoryServices:
    """Database, object store and settings of one running server."""

    database: Database
    store: AssetObjectStore
    settings: MemorySettings
    # The key a stdio server acts as (MEMORY_API_KEY); HTTP callers present their own.
    default_api_key: str | None = None
    # Saving and embedding: the configured embedder (its model and dimensions label every job
    # and vector), the URL fetcher, and the alias of the vector index to write.
    embedder: Embedder | None = None
    # Generated image context (ASSET_DESCRIBE_*): new saves queue a describe job, which the
    # worker runs with it; None: off (docs/generated-context.md). Closed by its creator.
    describer: Describer | None = None
    fetcher: SafeFetcher | None = None
    vector_alias: str = DEFAULT_ALIAS
    # Where clients reach this server (MEMORY_PUBLIC_BASE_URL or the bound address): links the
    # server hands out, such as an upload's completeUrl, are absolute on it.
    public_base_url: str | None = None
    # Why the store's signed links cannot be opened by this server's callers (a stdio server
    # with nothing serving its local links); ``None`` when they can. Previews then say so.
    links_unavailable: str | None = None
    # The server was started with --read-only: it offers only read-only tools, and the
    # workflows behind its plain HTTP routes refuse to change anything (policy.require_writable).
    read_only: bool = False
    # Every decode of an untrusted image in this process waits here for its pixels
    # (ASSET_DECODE_BUDGET_PIXELS); made from the settings, one per set of services.
    decode_admission: DecodeAdmission = field(init=False, repr=False, compare=False)
    # Every tool call and HTTP route of this process is admitted here first
    # (MEMORY_MAX_CONCURRENT_CALLS, MEMORY_ADMISSION_WAIT_SECONDS).
    call_admission: CallAdmission = field(init=False, repr=False, compare=False)
    # The embedders of the vector indexes by identity, built on first use: a search and the
    # worker use the one of the index the alias points at (the configured ``embedder`` answers
    # for its own identity). Closed by whoever closes the services (``bootstrap.running``).
    embedders: Embedders = field(init=False, repr=False, compare=False)
    # Search-query vectors of this process (ASSET_QUERY_CACHE_SIZE, _TTL_SECONDS): a repeated
    # query within the TTL sends nothing to the provider.
    query_cache: QueryEmbeddingCache = field(init=False, repr=False, compare=False)
    # The previews made of query images, by the hash of the bytes given (the same bounds).
    query_previews: QueryPreviews = field(init=False, repr=False, compare=False)
    # Calls and searches per key, written by the call runner at most once a minute.
    key_activity: KeyActivity = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "embedders", Embedders(self.settings, self.embedder))
        cache = QueryEmbeddingCache(
            self.settings.asset_query_cache_size, self.settings.asset_query_cache_ttl_seconds
        )
        object.__setattr__(self, "query_cache", cache)
        previews = QueryPreviews(
            self.settings.asset_query_cache_size, self.settings.asset_query_cache_ttl_seconds
        )
        object.__setattr__(self, "query_previews", previews)
        admission = DecodeAdmission(self.settings.decode_budget_pixels)
        object.__setattr__(self, "decode_admission", admission)
        calls = CallAdmission(
            self.settings.memory_max_concurrent_calls, self.settings.memory_admission_wait_seconds
        )
        object.__setattr__(self, "call_admission", calls)
        object.__setattr__(self, "key_activity", KeyActivity())
