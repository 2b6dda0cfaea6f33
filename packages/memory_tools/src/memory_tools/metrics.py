"""Prometheus metrics (prometheus-client) in one registry of their own (docs/observability.md).

Each fact is counted once, where the workflow learns it (the save plan, the worker, the
searcher, the purge), so the MCP tools, the web app, the HTTP routes and the CLI count alike.
Label values come only from small fixed sets (source kinds, outcomes, stable error codes,
models, tasks, query kinds): never an id, an owner, a key or a URL. :func:`bounded` folds
anything else into ``other``.

The queue's gauges (depth, oldest waiting job, stale leases) are not kept here: they are read
from the database when ``/metrics`` is scraped (:func:`render`), so every process reports the
same truth.

**Several processes.** ``serve --processes N`` starts its children with
``PROMETHEUS_MULTIPROC_DIR`` set to a fresh directory (:func:`prepare_multiprocess_dir`), so
prometheus-client writes each child's values to files there and any child's ``/metrics``
answers the sum over all of them, the embedding worker child included. There are no
process-local gauges, so no gauge needs a multiprocess mode. A separate ``memory-server
worker`` serves its own on ``--metrics-port``.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Generator, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from memory_db import schema
from memory_db.embedding import EmbedValue, ImageInput, TextInput
from memory_db.repositories import QueueHealth
from memory_tools.errors import ToolFailure

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# No ``*_created`` timestamp series beside every counter: nothing here reads them, and they
# double the size of a scrape.
disable_created_metrics()
REGISTRY = CollectorRegistry(auto_describe=True)

# The only values a label may take; anything else is counted as "other".
SOURCE_KINDS = frozenset(schema.SOURCE_KINDS)
SAVE_OUTCOMES = frozenset({"created", "deduplicated", "replayed", "refused", "failed"})
VALIDATION_CODES = frozenset(
    {"invalid_input", "unsafe_url", "fetch_failed", "not_html", "invalid_image"}
)
QUERY_KINDS = frozenset({"text", "image", "fused"})
TASKS = frozenset({"retrieval.passage", "retrieval.query"})
_MAX_LABEL = 48

# Embedding calls take from a millisecond (local) to tens of seconds (a provider under load).
_EMBED_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_SEARCH_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Candidates a search weighed before the reload: up to two overfetched lists plus word hits.
_CANDIDATE_BUCKETS = (0, 1, 5, 10, 25, 50, 100, 200, 400, 800)


def bounded(value: str | None, allowed: frozenset[str] | None = None) -> str:
    """``value`` as a label value: from ``allowed`` (when given), short and plain, else other."""
    if not value:
        return "none"
    if allowed is not None:
        return value if value in allowed else "other"
    plain = value.replace("_", "").replace("-", "").replace(".", "").isalnum()
    return value if plain and len(value) <= _MAX_LABEL and value.isascii() else "other"


# --- saves and assets ----------------------------------------------------------------------

SAVES = Counter(
    "memory_saves",
    "Save requests that reached the save plan, by source kind and outcome "
    "(created, deduplicated, replayed, refused, failed).",
    ["source_kind", "outcome"],
    registry=REGISTRY,
)
ASSETS_READY = Counter(
    "memory_assets_ready",
    "Assets that became ready (their visual vector is in the index), by source kind.",
    ["source_kind"],
    registry=REGISTRY,
)
ASSETS_FAILED = Counter(
    "memory_assets_failed",
    "Assets whose visual embedding failed for good, by source kind.",
    ["source_kind"],
    registry=REGISTRY,
)
ASSETS_DELETED = Counter(
    "memory_assets_deleted",
    "Assets deleted (moved to the trash), by source kind.",
    ["source_kind"],
    registry=REGISTRY,
)
UPLOADED_BYTES = Counter(
    "memory_uploaded_bytes",
    "Bytes written to the object store by saves (originals and previews).",
    registry=REGISTRY,
)
DEDUPLICATED_BYTES = Counter(
    "memory_deduplicated_bytes",
    "Bytes of saved images that were not stored again because the owner already had them.",
    registry=REGISTRY,
)
PURGED_BYTES = Counter(
    "memory_purged_bytes",
    "Bytes deleted from the object store when deleted objects were purged.",
    registry=REGISTRY,
)
RESERVATION_FAILURES = Counter(
    "memory_upload_reservation_failures",
    "Saves or uploads whose quota reservation could not be opened or held, by failure code.",
    ["code"],
    registry=REGISTRY,
)
QUOTA_REJECTIONS = Counter(
    "memory_quota_rejections",
    "Requests refused with quota_exceeded, by what was refused: save (a save or an upload) "
    "or artifact (a scraper artifact).",
    ["kind"],
    registry=REGISTRY,
)
VALIDATION_FAILURES = Counter(
    "memory_validation_failures",
    "Requests refused for their input, by stable error code "
    "(invalid_input, unsafe_url, fetch_failed, not_html, invalid_image).",
    ["code"],
    registry=REGISTRY,
)

# --- embedding -----------------------------------------------------------------------------

EMBED_SECONDS = Histogram(
    "memory_embedding_duration_seconds",
    "Time of one embedder call (a worker batch or a search query), by model and task.",
    ["model", "task"],
    buckets=_EMBED_BUCKETS,
    registry=REGISTRY,
)
EMBED_FAILURES = Counter(
    "memory_embedding_failures",
    "Embedder calls that failed, by model and error code.",
    ["model", "code"],
    registry=REGISTRY,
)
EMBED_TOKENS = Counter(
    "memory_embedding_tokens",
    "Tokens the embedding provider reported, by model and kind (prompt or image).",
    ["model", "kind"],
    registry=REGISTRY,
)
EMBED_INPUTS = Counter(
    "memory_embedding_inputs",
    "Inputs sent to the embedding provider, by model and kind (text, image or fused group).",
    ["model", "kind"],
    registry=REGISTRY,
)
EMBED_REUSED = Counter(
    "memory_embedding_reused",
    "Embeddings not requested from the provider: stored_vector (a stored visual vector "
    "copied), shared_input (one input of a request served several jobs).",
    ["source"],
    registry=REGISTRY,
)
QUERY_CACHE = Counter(
    "memory_query_embedding_cache",
    "Search queries looked up in the per-process query-embedding cache, by result (hit, miss).",
    ["result"],
    registry=REGISTRY,
)
EMBED_RETRIES = Counter(
    "memory_embedding_retries",
    "Embedding jobs put back for a later attempt, by error code.",
    ["code"],
    registry=REGISTRY,
)
JOBS_FAILED = Counter(
    "memory_embedding_jobs_failed",
    "Embedding jobs that failed for good (no attempt left or not retryable), by error code.",
    ["code"],
    registry=REGISTRY,
)

# --- search --------------------------------------------------------------------------------

SEARCHES = Counter(
    "memory_searches",
    "Searches answered, by query kind (text, image, fused).",
    ["kind"],
    registry=REGISTRY,
)
SEARCH_SECONDS = Histogram(
    "memory_search_duration_seconds",
    "Time to answer a search (embedding the query included), by query kind.",
    ["kind"],
    buckets=_SEARCH_BUCKETS,
    registry=REGISTRY,
)
SEARCH_CANDIDATES = Histogram(
    "memory_search_candidates",
    "Candidates a search weighed (vector and word hits, before the authorised reload).",
    ["kind"],
    buckets=_CANDIDATE_BUCKETS,
    registry=REGISTRY,
)
SEARCH_VECTOR_HITS = Counter(
    "memory_search_vector_hits",
    "Searches with at least one result matched by a vector; divide by memory_searches_total "
    "for the vector hit rate.",
    ["kind"],
    registry=REGISTRY,
)
SEARCH_ZERO_RESULTS = Counter(
    "memory_search_zero_results",
    "Searches that returned no result, by query kind.",
    ["kind"],
    registry=REGISTRY,
)

# --- signed reads --------------------------------------------------------------------------

SIGNED_READS_ISSUED = Counter(
    "memory_signed_reads_issued",
    "Signed read links handed out, by purpose: preview (inline) or original (a download).",
    ["purpose"],
    registry=REGISTRY,
)
SIGNED_READS_DENIED = Counter(
    "memory_signed_reads_denied",
    "Signed read links refused by the object route (bad, tampered or expired).",
    registry=REGISTRY,
)


def issued(purpose: str) -> float:
    """How many signed read links of ``purpose`` this process has handed out."""
    value = REGISTRY.get_sample_value("memory_signed_reads_issued_total", {"purpose": purpose})
    return value or 0.0


def denied() -> float:
    """How many signed read links this process's object route has refused."""
    return REGISTRY.get_sample_value("memory_signed_reads_denied_total") or 0.0


# --- reconciliation (memory_tools.operations.reconcile)
# -----------------------------------------------------

RECONCILE_FINDINGS = Counter(
    "memory_reconcile_findings",
    "Reconciliation findings, by check and action: repaired, or reported only (a dry run, or "
    "nothing a reconciler can repair).",
    ["check", "action"],
    registry=REGISTRY,
)


# --- recording helpers ---------------------------------------------------------------------


def count_save(source_kind: str, outcome: str) -> None:
    """One save request's outcome."""
    SAVES.labels(bounded(source_kind, SOURCE_KINDS), bounded(outcome, SAVE_OUTCOMES)).inc()


def count_saved(
    source_kind: str, *, deduplicated: bool, original_bytes: int, preview_bytes: int
) -> None:
    """A save that created its asset: the bytes it stored, or the bytes it did not store again.

    A deduplicated save stored nothing (it reuses the owner's object); a save that lost a race
    for the same bytes to a concurrent one also counts as deduplicated (its copy was discarded).
    """
    if deduplicated:
        count_save(source_kind, "deduplicated")
        DEDUPLICATED_BYTES.inc(original_bytes)
    else:
        count_save(source_kind, "created")
        UPLOADED_BYTES.inc(original_bytes + preview_bytes)


def count_save_failure(source_kind: str, exc: BaseException) -> None:
    """A save that did not create its asset: refused (a stable code) or failed (anything else).

    A cancelled request (the client went away, shutdown) is neither and is not counted.
    """
    if isinstance(exc, ToolFailure):
        count_save(source_kind, "refused")
        count_refusal(exc.code)
    elif isinstance(exc, Exception):
        count_save(source_kind, "failed")


@contextmanager
def refusals() -> Generator[None]:
    """Count a ``ToolFailure`` escaping the block as a validation failure (by its code)."""
    try:
        yield
    except ToolFailure as failure:
        count_refusal(failure.code)
        raise


def count_refusal(code: str) -> None:
    """A refused request: a validation failure by its stable code.

    Quota rejections are counted where the quota is checked (the reservation, the artifact
    bound), so each is counted once whichever workflow asked.
    """
    if code in VALIDATION_CODES:
        VALIDATION_FAILURES.labels(code).inc()


def count_settled(status: str, source_kind: str) -> None:
    """An asset moved into ``ready`` or ``failed``."""
    counter = ASSETS_READY if status == "ready" else ASSETS_FAILED
    counter.labels(bounded(source_kind, SOURCE_KINDS)).inc()


def count_tokens(model: str, *, prompt: int, image: int) -> None:
    """Tokens one embedder call used, as the provider reported them."""
    if prompt:
        EMBED_TOKENS.labels(bounded(model), "prompt").inc(prompt)
    if image:
        EMBED_TOKENS.labels(bounded(model), "image").inc(image)


def count_inputs(model: str, values: Iterable[EmbedValue]) -> None:
    """Inputs one embedder call sent, by kind."""
    for value in values:
        kind = (
            "text"
            if isinstance(value, TextInput)
            else "image"
            if isinstance(value, ImageInput)
            else "fused"
        )
        EMBED_INPUTS.labels(bounded(model), kind).inc()


@contextmanager
def embedding_call(model: str, task: str) -> Generator[None]:
    """Time one embedder call; an ``EmbeddingError`` (or anything else) counts as a failure."""
    started = time.perf_counter()
    try:
        yield
    except Exception as exc:
        EMBED_FAILURES.labels(bounded(model), bounded(getattr(exc, "code", "error"))).inc()
        raise
    finally:
        EMBED_SECONDS.labels(bounded(model), bounded(task, TASKS)).observe(
            time.perf_counter() - started
        )


def count_search(kind: str, *, seconds: float, candidates: int, results: int, vector: bool) -> None:
    """One answered search."""
    kind = bounded(kind, QUERY_KINDS)
    SEARCHES.labels(kind).inc()
    SEARCH_SECONDS.labels(kind).observe(seconds)
    SEARCH_CANDIDATES.labels(kind).observe(candidates)
    if vector:
        SEARCH_VECTOR_HITS.labels(kind).inc()
    if results == 0:
        SEARCH_ZERO_RESULTS.labels(kind).inc()


# --- exposition ----------------------------------------------------------------------------


class _QueueCollector(Collector):
    """The queue's gauges from one :class:`QueueHealth` read at scrape time."""

    def __init__(self, health: QueueHealth) -> None:
        self._health = health

    def collect(self) -> Iterator[GaugeMetricFamily]:
        health = self._health
        yield GaugeMetricFamily(
            "memory_embedding_queue_depth",
            "Embedding jobs waiting (queued or waiting for a retry), read from the database.",
            value=health.waiting,
        )
        yield GaugeMetricFamily(
            "memory_embedding_jobs_running",
            "Embedding jobs a worker holds right now, read from the database.",
            value=health.running,
        )
        yield GaugeMetricFamily(
            "memory_embedding_queue_oldest_age_seconds",
            "Age of the oldest waiting embedding job (0 when none waits).",
            value=health.oldest_waiting_seconds,
        )
        yield GaugeMetricFamily(
            "memory_embedding_stale_leases",
            "Running jobs whose lease ran out: their worker stopped (they are claimed again).",
            value=health.stale_leases,
        )


def multiprocess_dir() -> Path | None:
    """The directory the processes of this run share their values in, if any."""
    value = os.environ.get(MULTIPROC_ENV)
    return Path(value) if value else None


def prepare_multiprocess_dir(data_dir: Path, run: str) -> Path:
    """A fresh, empty directory for ``run``'s values under ``data_dir``; set for children.

    Wiped first: values of an earlier run would otherwise be added to this one's.
    """
    path = data_dir / "metrics" / run
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True, mode=0o700)
    os.environ[MULTIPROC_ENV] = str(path)
    return path


def render(health: QueueHealth | None) -> bytes:
    """The exposition text: this process's (or all processes') metrics plus the queue gauges."""
    registry = CollectorRegistry(auto_describe=False)
    shared = multiprocess_dir()
    if shared is not None:
        MultiProcessCollector(registry, path=str(shared))
        own = b""
    else:
        own = generate_latest(REGISTRY)
    if health is not None:
        registry.register(_QueueCollector(health))
    return own + generate_latest(registry)
