"""Configuration from the environment (pydantic-settings).

Every variable of the image memory with its default, plus those of the standalone product
(``MEMORY_*``, ``ASSET_EMBED_PROVIDER``, ``JINA_*``). Field names are the lower-cased variable
names, so ``ASSET_MAX_BYTES`` is ``settings.asset_max_bytes``. ``docs/configuration.md`` lists them.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import SplitResult, urlsplit

from pydantic import (
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from memory_db.datadir import check_data_dir
from memory_db.dev_hosts import DevHost, parse_dev_host, parse_dev_hosts
from memory_db.errors import ConfigurationError
from memory_db.pg_memory import MIB, PostgresMemory, available_memory_bytes, size_for


def default_data_dir() -> Path:
    """``$XDG_DATA_HOME/mcp-memory``, i.e. ``~/.local/share/mcp-memory`` by default."""
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "share"
    return base / "mcp-memory"


# Settings that become part of a name (an object key, an SQL identifier): field -> the
# pattern it must match whole, and what a mismatch says.
_NAME_PATTERNS = {
    "asset_storage_env_prefix": (
        r"[a-z0-9][a-z0-9-]{0,31}",
        "must be 1-32 lowercase letters, digits or '-' (it starts every key)",
    ),
    "asset_embed_index": (
        r"[a-z][a-z0-9_]{0,62}",
        "must be a lowercase SQL identifier of at most 63 characters",
    ),
}


def _checked_url(value: str | None, problem: Callable[[SplitResult], str | None]) -> str | None:
    """A URL setting: unset stays unset, a good one loses its trailing slash.

    ``problem`` says what is wrong with the URL (the validation error), or ``None``.
    """
    if value is None:
        return None
    found = problem(urlsplit(value))
    if found is not None:
        raise ValueError(found)
    return value.rstrip("/")


def _http_url_problem(parts: SplitResult) -> str | None:
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an http(s) URL with a host"
    if parts.username or parts.password:
        return "must not contain credentials"
    return None


def _provider_url_problem(parts: SplitResult) -> str | None:
    if parts.scheme == "http" and _is_loopback_host(parts.hostname):
        return None
    if parts.scheme != "https" or not parts.hostname:
        return "must be an https URL (http is allowed only for a loopback host)"
    return None


def _is_loopback_host(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# Batches one embedding worker runs at once unless ASSET_EMBED_WORKER_CONCURRENCY says otherwise.
# The neighbours per node an HNSW graph may keep (ASSET_VECTOR_GRAPH_M): the two graphs whose
# search breadth was measured (docs/scaling.md). memory_db.vectors.ddl builds only these.
GRAPH_M_CHOICES = (16, 32)
# 32: a library of 100,000 images holds 200,000 vectors, where a graph of 16 needs a walk of 625
# candidates for the recall a graph of 32 reaches with 175, and from 300,000 vectors no walk
# pgvector allows keeps 16 at recall@10 0.95 (docs/scaling.md). An insert costs more.
DEFAULT_GRAPH_M = 32
DEFAULT_WORKER_CONCURRENCY = 2


class MemorySettings(BaseSettings):
    """All configuration of the image memory, read from environment variables."""

    model_config = SettingsConfigDict(
        case_sensitive=False,
        env_ignore_empty=True,  # `ASSET_EMBED_WORKER_CONCURRENCY=` means "use the default"
        extra="ignore",
        validate_default=True,
    )

    # --- object storage -----------------------------------------------------------------
    asset_storage_provider: Literal["s3", "local"] = "local"
    asset_s3_bucket: str | None = None
    asset_s3_region: str | None = None
    asset_s3_endpoint: str | None = None
    asset_s3_access_key_id: SecretStr | None = None
    asset_s3_secret_access_key: SecretStr | None = None
    asset_s3_force_path_style: bool = False
    asset_storage_env_prefix: str = "production"
    asset_signed_get_ttl_seconds: int = Field(default=300, ge=1, le=3600)
    asset_signed_put_ttl_seconds: int = Field(default=900, ge=1, le=3600)
    # How long a web app sign-in lasts before the browser must sign in again (absolute, from
    # sign-in; revoking the key ends it sooner). docs/web.md#signing-in.
    web_session_ttl_seconds: int = Field(default=43_200, ge=60, le=30 * 86_400)
    # How often the Jobs page reloads its rows while work is queued or running
    # (docs/web.md#jobs); the browser tests shorten it to see polling start and stop sooner.
    web_jobs_poll_milliseconds: int = Field(default=1500, ge=100, le=60_000)

    # --- ingest limits ------------------------------------------------------------------
    asset_max_bytes: int = Field(default=20_971_520, ge=1, le=1_073_741_824)
    asset_max_decoded_pixels: int = Field(default=40_000_000, ge=1, le=1_000_000_000)
    # Pixels decoded at once in one process; unset: twice ASSET_MAX_DECODED_PIXELS.
    asset_decode_budget_pixels: int | None = Field(default=None, ge=1, le=10_000_000_000)
    asset_preview_max_edge: int = Field(default=2048, ge=64, le=8192)
    asset_delete_grace_hours: int = Field(default=168, ge=0, le=24 * 365)
    asset_fetch_allow_http: bool = False
    asset_fetch_allowed_ports: Annotated[list[int], NoDecode] = Field(
        default_factory=lambda: [80, 443]
    )
    asset_fetch_timeout_seconds: float = Field(default=60.0, gt=0, le=600)
    asset_fetch_max_redirects: int = Field(default=5, ge=0, le=10)
    # Development only: exact host:port pairs fetched even at loopback/private addresses
    # (memory_db.dev_hosts; docs/configuration.md#trying-pages-on-your-own-machine).
    asset_fetch_dev_hosts: Annotated[tuple[DevHost, ...], NoDecode] = ()
    asset_upload_reservation_seconds: int = Field(default=3600, ge=60, le=86_400)

    # --- embeddings ---------------------------------------------------------------------
    asset_embed_index: str = "memory_assets_v1"
    asset_embed_model: str = "jina-embeddings-v5-omni-small"
    asset_embed_dim: int = Field(default=1024, ge=1, le=4096)
    asset_embed_worker_concurrency: int | None = Field(default=None, ge=1, le=64)
    # The nice value (0-19) of the threads that run the worker's CPU work (OCR and the
    # Tesseract it starts, embedding batches): searches get the CPU first (memory_db.priority).
    memory_worker_nice: int = Field(default=10, ge=0, le=19)
    asset_worker_sweep_seconds: float = Field(default=30.0, ge=0.5, le=3600.0)
    # How often a worker's sweep also reconciles the store and the accounts; 0: never.
    asset_worker_reconcile_seconds: float = Field(default=600.0, ge=0.0, le=86_400.0)
    asset_embed_fused_mode: Literal["combine", "native"] = "combine"
    asset_embed_fused_image_weight: float = Field(default=0.5, ge=0.0, le=1.0)
    asset_embed_vector_type: Literal["halfvec", "vector"] = "halfvec"
    # Neighbours per node of a new index's HNSW graph (docs/vector-index.md): 32 finds as much
    # with a fifth of the walk at 300,000 vectors, but every insert costs about 3.4x the CPU.
    asset_vector_graph_m: int = DEFAULT_GRAPH_M
    # Where the clip provider's models live, one directory per model (default: data dir/models).
    asset_embed_model_dir: Path | None = None
    # The per-process cache of search-query vectors and query-image previews
    # (memory_tools.query_cache): entries kept (least recently used evicted) and how long each
    # lives; either at 0 turns it off.
    asset_query_cache_size: int = Field(default=512, ge=0, le=100_000)
    asset_query_cache_ttl_seconds: float = Field(default=600.0, ge=0.0, le=86_400.0)

    # --- generated image context (docs/generated-context.md): off unless a URL is set -----
    asset_describe_base_url: str | None = None
    asset_describe_api_key: Annotated[list[SecretStr], NoDecode] = Field(default_factory=list)
    asset_describe_model: str | None = Field(default=None, min_length=1, max_length=200)
    # How long a describe key the provider refused (401) rests before it is tried again.
    asset_describe_key_cooldown_seconds: float = Field(default=300.0, ge=1.0, le=86_400.0)
    # --- text in images (docs/ocr.md) --------------------------------------------------
    # Which new saves get an OCR job: none, screenshots (page screenshots and lossless PNG or
    # WebP files, what screen captures and charts are saved as), or every image.
    asset_ocr: Literal["off", "screenshots", "all"] = "screenshots"
    asset_ocr_timeout_seconds: float = Field(default=30.0, ge=1.0, le=600.0)
    # GPS coordinates from a photo's EXIF are not stored unless the operator turns this on
    # (docs/design.md#capture): a location is private by default.
    asset_keep_location: bool = False
    # Two images of one vault whose visual vectors are at most this cosine distance apart
    # (pgvector's ``<=>``) are near-duplicates (docs/design.md#near-duplicates). Measured for
    # the default ``local`` embedder; another embedder needs its own figure
    # (docs/configuration.md). Read only by ``memory_tools.workflows.duplicates``.
    asset_near_duplicate_distance: float = Field(default=0.01, ge=0.0, le=1.0)

    # --- scraper artifacts (docs/design.md#artifacts) ----------------------------------
    # How long a stored artifact can be saved; the worker's sweep then deletes it.
    scraper_artifact_ttl_seconds: int = Field(default=3600, ge=1, le=7 * 86_400)
    # Artifacts count against no quota until saved; instead each owner holds at most this many
    # live artifacts, and at most this many bytes of them (one more is ``quota_exceeded``).
    scraper_artifact_max_live: int = Field(default=100, ge=1, le=10_000)
    scraper_artifact_max_live_bytes: int = Field(default=536_870_912, ge=1, le=1_099_511_627_776)

    # --- page screenshots (docs/design.md#screenshots) ----------------------------------
    # The Chromium executable; unset: ``chromium`` or ``chromium-browser`` on PATH. None found:
    # scrape_page_screenshot is not offered.
    scraper_chromium_path: Path | None = None
    # One screenshot, from the first request to the PNG: navigation, settling and capture.
    scraper_screenshot_timeout_seconds: float = Field(default=30.0, ge=1.0, le=300.0)
    # Bytes the page may fetch in all (document, scripts, images ...); past it, requests fail.
    scraper_screenshot_max_page_bytes: int = Field(default=26_214_400, ge=65_536, le=268_435_456)
    # The tallest full-page screenshot, in CSS pixels (lower still if the decode limit says so).
    scraper_screenshot_max_height: int = Field(default=8000, ge=200, le=32_000)
    # Pages rendered at once in one process (each is a Chromium renderer: ~100-300 MB).
    scraper_screenshot_concurrency: int = Field(default=2, ge=1, le=16)
    # The data-segment limit (RLIMIT_DATA) of every Chromium process: a page that asks for more
    # (e.g. 40 canvases of 8000x8000) fails its allocations instead of growing the browser to
    # many GB (measured: 11 GB unbounded, 1.9 GB for the whole browser at 1 GiB).
    scraper_screenshot_max_process_bytes: int = Field(default=2**30, ge=2**28, le=2**36)

    # --- feature flags (on by default: docs/design.md#decision-feature-switches) --------
    asset_feature_enabled: bool = True
    asset_search_enabled: bool = True

    # --- the standalone product ---------------------------------------------------------
    memory_data_dir: Path = Field(default_factory=default_data_dir)
    memory_database_url: SecretStr | None = None
    memory_api_key: SecretStr | None = None
    memory_public_base_url: str | None = None
    # Where a stdio server's signed links (local store) are served: on a loopback port of its
    # own (``loopback``), or nowhere (``off``: previews then say why they are unavailable,
    # unless MEMORY_PUBLIC_BASE_URL names a running HTTP server sharing the signing secret).
    memory_stdio_links: Literal["loopback", "off"] = "loopback"
    memory_signing_secret: SecretStr | None = None
    # The key that signs backups (HMAC-SHA256 of the manifest); unset: backup.key in the data
    # directory. Kept outside every backup: whoever can write a backup store cannot forge one.
    memory_backup_key_file: Path | None = None
    memory_default_quota_bytes: int = Field(default=10 * 1024**3, ge=0)
    # Calls (tool calls, HTTP routes) one process runs at once; the rest wait their turn.
    memory_max_concurrent_calls: int = Field(default=8, ge=1, le=1024)
    memory_admission_wait_seconds: float = Field(default=10.0, gt=0, le=300)
    # Connections per process; unset: sized from the calls and worker slots (db_pool_size).
    memory_db_pool_size: int | None = Field(default=None, ge=1, le=1000)
    memory_db_pool_overflow: int = Field(default=8, ge=0, le=1000)
    # The embedded PostgreSQL's memory (memory_db.pg_memory, docs/configuration.md): computed
    # from MEMORY_PG_MEMORY_MB (default: the machine's memory or its cgroup's limit), each
    # figure overridable. Unused with MEMORY_DATABASE_URL.
    memory_pg_memory_mb: int | None = Field(default=None, ge=256, le=16 * 1024 * 1024)
    memory_pg_shared_buffers_mb: int | None = Field(default=None, ge=16, le=1024 * 1024)
    memory_pg_effective_cache_size_mb: int | None = Field(default=None, ge=16, le=16 * 1024 * 1024)
    memory_pg_work_mem_mb: int | None = Field(default=None, ge=1, le=64 * 1024)
    memory_pg_maintenance_work_mem_mb: int | None = Field(default=None, ge=16, le=1024 * 1024)
    memory_log_format: Literal["auto", "console", "json"] = "auto"
    memory_log_level: Literal["debug", "info", "warning", "error"] = "info"
    # The operator commands (admin, migrate, backup, import ...) print their results and
    # progress; their log lines below this level (the embedded server starting, one line per
    # saved image) would only bury them.
    memory_cli_log_level: Literal["debug", "info", "warning", "error"] = "warning"
    asset_embed_provider: Literal["local", "jina", "clip"] = "local"
    jina_api_keys: Annotated[list[SecretStr], NoDecode] = Field(default_factory=list)
    jina_base_url: str = "https://api.jina.ai/v1"

    @field_validator(*_NAME_PATTERNS)
    @classmethod
    def _name_pattern(cls, value: str, info: ValidationInfo) -> str:
        pattern, message = _NAME_PATTERNS[str(info.field_name)]
        if not re.fullmatch(pattern, value):
            raise ValueError(message)
        return value

    @field_validator("asset_vector_graph_m")
    @classmethod
    def _measured_graph(cls, value: int) -> int:
        # An int checked here, not a Literal: pydantic does not read "32" from the environment
        # as the literal 32.
        if value not in GRAPH_M_CHOICES:
            raise ValueError(f"must be {' or '.join(map(str, GRAPH_M_CHOICES))}, not {value}")
        return value

    @field_validator("asset_s3_endpoint", "memory_public_base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        return _checked_url(value, _http_url_problem)

    @field_validator("jina_base_url", "asset_describe_base_url")
    @classmethod
    def _provider_url(cls, value: str | None) -> str | None:
        return _checked_url(value, _provider_url_problem)

    @field_validator(
        "jina_api_keys", "asset_describe_api_key", "asset_fetch_allowed_ports", mode="before"
    )
    @classmethod
    def _split_commas(cls, value: Any) -> Any:
        # A list from the environment is written comma-separated: "k1,k2", "443,8443".
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("asset_fetch_allowed_ports")
    @classmethod
    def _ports(cls, value: list[int]) -> list[int]:
        if not value:
            raise ValueError("needs at least one port")
        for port in value:
            if not 1 <= port <= 65535:
                raise ValueError(f"{port} is not a TCP port")
        return sorted(set(value))

    @field_validator("asset_fetch_dev_hosts", mode="before")
    @classmethod
    def _dev_hosts(cls, value: Any) -> Any:
        if isinstance(value, str):
            return parse_dev_hosts(value)
        if isinstance(value, list | tuple) and all(isinstance(item, str) for item in value):
            return parse_dev_hosts(",".join(value)) if value else ()  # pyright: ignore[reportUnknownArgumentType]
        return value

    @field_validator("asset_fetch_dev_hosts")
    @classmethod
    def _canonical_dev_hosts(cls, value: tuple[DevHost, ...]) -> tuple[DevHost, ...]:
        # Pairs given as tuples (not text) are checked and written canonically too.
        return tuple(dict.fromkeys(parse_dev_host(str(DevHost(*entry))) for entry in value))

    @field_validator("memory_database_url")
    @classmethod
    def _database_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return None
        scheme = urlsplit(value.get_secret_value()).scheme
        if scheme not in ("postgresql", "postgres", "postgresql+asyncpg"):
            raise ValueError("must be a postgresql:// URL")
        return value

    @field_validator("memory_data_dir")
    @classmethod
    def _data_dir(cls, value: Path) -> Path:
        value = value.expanduser()
        if not value.is_absolute():
            value = Path.cwd() / value
        check_data_dir(value)
        return value

    @field_validator("asset_embed_model_dir")
    @classmethod
    def _model_dir(cls, value: Path | None) -> Path | None:
        if value is None:
            return None
        value = value.expanduser()
        return value if value.is_absolute() else Path.cwd() / value

    @model_validator(mode="after")
    def _cross_field(self) -> MemorySettings:
        if self.asset_storage_provider == "s3":
            missing = [
                name.upper()
                for name in ("asset_s3_bucket", "asset_s3_region")
                if not getattr(self, name)
            ]
            if missing:
                raise ValueError(f"ASSET_STORAGE_PROVIDER=s3 needs {', '.join(missing)}")
        if self.asset_embed_provider == "jina" and not self.jina_api_keys:
            raise ValueError("ASSET_EMBED_PROVIDER=jina needs JINA_API_KEYS (comma-separated)")
        if self.asset_describe_base_url is not None and not self.asset_describe_model:
            raise ValueError("ASSET_DESCRIBE_BASE_URL needs ASSET_DESCRIBE_MODEL")
        if (self.asset_s3_access_key_id is None) != (self.asset_s3_secret_access_key is None):
            raise ValueError(
                "set both ASSET_S3_ACCESS_KEY_ID and ASSET_S3_SECRET_ACCESS_KEY, or neither"
            )
        return self

    @property
    def postgres_dir(self) -> Path:
        """Where the embedded PostgreSQL keeps its data."""
        return self.memory_data_dir / "postgres"

    @property
    def backup_key_path(self) -> Path:
        """The backup signing key's file (``MEMORY_BACKUP_KEY_FILE``, else in the data dir)."""
        if self.memory_backup_key_file is not None:
            return self.memory_backup_key_file.expanduser()
        return self.memory_data_dir / "backup.key"

    @property
    def objects_dir(self) -> Path:
        """Where the local object store keeps its files."""
        return self.memory_data_dir / "objects"

    @property
    def model_dir(self) -> Path:
        """Where the clip provider's model directories are (``ASSET_EMBED_MODEL_DIR``)."""
        return self.asset_embed_model_dir or self.memory_data_dir / "models"

    @property
    def uses_embedded_database(self) -> bool:
        """True when no ``MEMORY_DATABASE_URL`` is set."""
        return self.memory_database_url is None

    @property
    def worker_concurrency(self) -> int:
        """Batches an embedding worker runs at once: ``ASSET_EMBED_WORKER_CONCURRENCY`` or 2."""
        return self.asset_embed_worker_concurrency or DEFAULT_WORKER_CONCURRENCY

    @property
    def db_pool_size(self) -> int:
        """Pooled connections per process: ``MEMORY_DB_POOL_SIZE``, or enough for full load.

        A task holds at most one connection at a time, so one per admitted call, two per
        worker slot (its batch and the batch's lease heartbeat; the slots that embed and the
        one lane of OCR and other kinds), two for the worker's LISTEN
        connection and its sweep, one for the LISTEN connection of calls waiting on an
        asset's state (``Database.asset_states``) and one for the LISTEN connection of the key
        cache (``Database.access_changes``) mean an admitted call never waits for a
        connection. Unused connections are never opened, so the size costs nothing until the
        load is there.
        """
        if self.memory_db_pool_size is not None:
            return self.memory_db_pool_size
        return self.memory_max_concurrent_calls + 2 * (self.worker_concurrency + 1) + 4

    @property
    def embedded_postgres_memory(self) -> PostgresMemory:
        """The embedded PostgreSQL's memory settings: computed, then each override applied."""
        if self.memory_pg_memory_mb is not None:
            computed = size_for(self.memory_pg_memory_mb * MIB)
        else:
            computed = size_for(available_memory_bytes())
        return PostgresMemory(
            shared_buffers_mb=self.memory_pg_shared_buffers_mb or computed.shared_buffers_mb,
            effective_cache_size_mb=(
                self.memory_pg_effective_cache_size_mb or computed.effective_cache_size_mb
            ),
            work_mem_mb=self.memory_pg_work_mem_mb or computed.work_mem_mb,
            maintenance_work_mem_mb=(
                self.memory_pg_maintenance_work_mem_mb or computed.maintenance_work_mem_mb
            ),
        )

    @property
    def decode_budget_pixels(self) -> int:
        """Pixels decoded at once: ``ASSET_DECODE_BUDGET_PIXELS``, or twice the pixel limit."""
        if self.asset_decode_budget_pixels is not None:
            return self.asset_decode_budget_pixels
        return 2 * self.asset_max_decoded_pixels


def load_settings(**overrides: Any) -> MemorySettings:
    """Read settings from the environment; raise ``ConfigurationError`` naming each variable."""
    try:
        return MemorySettings(**overrides)
    except ValidationError as exc:
        problems: list[str] = []
        for error in exc.errors():
            loc = [str(part) for part in error["loc"] if part != "__root__"]
            message = str(error["msg"]).removeprefix("Value error, ")
            if loc:
                problems.append(f"{loc[0].upper()}: {message}")
            else:
                problems.append(message)
        raise ConfigurationError("invalid configuration: " + "; ".join(problems)) from None
