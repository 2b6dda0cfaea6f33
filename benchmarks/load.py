"""Many MCP clients at once against the real server: throughput, latency, errors, freshness.

What runs:
- a real ``memory-server serve --transport http`` on 127.0.0.1 (a free port) with its own
  ``MEMORY_DATA_DIR`` in a temporary directory: embedded PostgreSQL, local objects, the local
  embedder. By default as ``--processes 2`` (two server processes on one port and one
  embedding worker process) with ``MEMORY_MAX_CONCURRENT_CALLS=4``: the set-up this 2-core
  machine serves best. ``--server-args`` and ``--server-env`` replace them (e.g.
  ``--server-args "" --server-env MEMORY_MAX_CONCURRENT_CALLS=8`` for the plain default
  server, one process with its in-process worker), to compare set-ups.
- a library of 10,000 ready assets (``--library``; 100,000 with ``--full``) written straight
  into its database before it starts
  (``bulk_library.load_library``: COPY rows and two vectors per asset, one HNSW build). The
  benchmark process starts the embedded PostgreSQL of that data directory itself; the server
  attaches to the same running PostgreSQL, as every process on one data directory does.
- for each N in 1, 4, 16, 64: N MCP sessions (the official ``mcp`` SDK over streamable HTTP,
  each its own session and HTTP client) in client processes (``load_clients.py``; at most
  ``--sessions-per-process`` sessions each), closed loop: each sends its next call when the
  last one answered, with a bounded per-call timeout (``--call-timeout``). A warm-up, then a
  fixed measured window. The mix (``--mix``, weights): ``image_asset_search`` by text 40,
  by image (``imageBase64`` of a 64x48 PNG) 15, ``image_asset_get`` 20, ``image_asset_list``
  17, ``image_asset_save`` of a unique 64x48 PNG with a title and description 8. Each saved
  title ends with a token no other title holds.

Afterwards, with the server still running: every acknowledged save (warm-up included) is read
back with ``image_asset_get`` and searched for by its title (``image_asset_search``, limit 10:
the asset must be among the results), over MCP; and the counters are reconciled: the owner's
``used_bytes`` minus what its live objects (original and preview) and vectors take must be the
same before and after the run (zero drift), and nothing may be left in ``reserved_bytes``.

``--full`` is the scale load test: 100,000 assets, 1, 4, 16 and 64 clients, each a 10 s
warm-up and a 120 s window; N = 1 doubles as the single-client baseline of the throughput.
``--quick`` is for development and for ``make bench``'s quick pass: 2,000 assets, a 2 s
warm-up and an 8 s window per N, a couple of minutes in all.

What it prints, per N: throughput (calls answered without error inside the window / its
length), p50/p95/p99 per operation and over all calls (of calls sent inside the window, failed ones
included: their caller waited too), errors by code over the whole phase (warm-up included;
a tool error's code from its ``code: message`` text, ``timeout``, or the transport failure),
save -> searchable p50/p95, and the CPU the clients, the server and PostgreSQL used
(in cores: CPU seconds / window seconds; the machine's core count bounds their sum). A client
process near one core would make the clients the bottleneck: the benchmark says so when the
busiest one passes 0.8 cores (then lower ``--sessions-per-process``).

Save -> searchable: from the moment the save's answer reached the client until the commit of
the transaction that made the asset ``ready`` (the worker writes its vectors and its status
in one transaction, and search returns only ``ready`` assets: from that commit on, the asset
is found). The commit time comes from PostgreSQL (``track_commit_timestamp``, switched on for
this throw-away database): a trigger the benchmark adds to it notes the transaction that first
makes each asset ``ready``, and ``pg_xact_commit_timestamp`` of that transaction is read after
the phase. Not the asset row's own ``xmin``: later work rewrites the row (the text OCR reads,
then its fused vector), and its last commit would time that work instead. Polling with
``image_asset_get`` would add load of its own and measure no finer than its polling interval.
After each phase the benchmark waits (at most ``--settle`` seconds) for the worker to finish
that phase's saves, so phases do not bleed into each other; a save still not ready then
counts as never searchable.

Targets (issue 31, "Many clients"; they replace issue 21's), judged in the same run and
printed PASS/FAIL (n/a when this run cannot judge one, e.g. an N it did not run):
- zero errors at 1, 4, 16 and 64 clients;
- throughput at 16 clients at least 1.8x the single client's;
- search p95 (text and image searches together) at 16 clients at most 1.5 x 16 / throughput.
  With N callers in a closed loop, N / throughput is the mean time a call spends in the
  server (Little's law) over the mix: a search p95 within 1.5x of it is no worse than fair
  queueing. (The 2N/X column of the table is the same bound at 2x over all calls, per N; the
  per-operation p95 / (N / throughput) shows which operation waits longest.)
- every acknowledged save readable and found by its title;
- counters with zero drift (and nothing left reserved);
- save -> searchable p95 under 2 s at 16 clients (issue 31, "Save");
- with ``--ocr-compare N`` (``make bench`` passes 16): search p95 at N clients with OCR as set
  (``ASSET_OCR``, default ``screenshots``: the mix's PNG saves are read) at most 1.3x its value
  with ``ASSET_OCR=off`` (issue 31, "Background work does not starve searches"). Measured A-B-A
  after the main run: its phase at N (or one of its own), then a phase on a server restarted
  with OCR off, then one restarted with the setting again; the means of the p95s are compared,
  and the OCR jobs each phase created are printed, so a run where OCR did not run as set is
  not judged. The saves of these phases are not read back afterwards.

Exit status, as the other benchmarks: 0 when the benchmark ran (missed targets are printed),
non-zero when it could not run; ``--strict`` also exits 1 when a target is missed.

Loopback only, bounded (each phase lasts at most warm-up + window + call timeout + settle),
stops by itself; client processes, the server, PostgreSQL and the temporary directory are
removed on exit, Ctrl-C and failures included.

Usage: python benchmarks/load.py [--quick | --full] [--clients 1,4,16,64] [--mix OP=W,...] [--warmup 5] [--duration 30]
       [--library 10000] [--call-timeout 20] [--settle 30] [--sessions-per-process 32]
       [--server-args "..."] [--server-env KEY=VALUE ...] [--server-log PATH] [--ocr-compare N]
       [--graph-m 16|32] [--port 0] [--json] [--strict]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import selectors
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncGenerator, Generator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import httpx
import psutil
from bulk_library import library_target, load_library
from load_clients import MIX, OPERATIONS, ClientSpec, parse_mix, verify
from sqlalchemy import text

from memory_db import MemorySettings
from memory_db.database import DEFAULT_DATABASE, EmbeddedPostgres, to_plain_url
from memory_db.embedding import LocalEmbedder
from memory_db.logs import configure_logging
from memory_db.runtime import open_database, prepare_vector_index
from memory_db.settings import DEFAULT_GRAPH_M, GRAPH_M_CHOICES
from memory_db.unit_of_work import Database, session_of
from memory_db.vectors import DEFAULT_ALIAS
from memory_tools.ingest.save import VECTOR_HEADER_BYTES
from memory_tools.operations import admin

HERE = Path(__file__).parent
SERVER = [sys.executable, "-m", "memory_server"]
OWNER = "bench@example.com"
_OUR_ENV = ("ASSET_", "MEMORY_", "JINA_")

# The set-up measured by default: the one this 2-core machine serves best (docs/architecture.md,
# "Many clients at once, measured"): two server processes on one port and a separate embedding
# worker (`serve --processes 2`), each admitting 4 calls at once. One process tops out at one
# core; two fill the machine, and 4 admitted calls per process keep the waits of saves and
# searches alike. `--server-args "" --server-env MEMORY_MAX_CONCURRENT_CALLS=8` measures the
# plain default server.
DEFAULT_SERVER_ARGS = "--processes 2"
DEFAULT_SERVER_ENV = ("MEMORY_MAX_CONCURRENT_CALLS=4",)


@dataclass
class Phase:
    """The figures of one N."""

    clients: int
    processes: int
    window: float
    throughput: float = 0.0  # calls answered without error per second of the window
    latency: dict[str, dict[str, float]] = field(default_factory=dict)  # op -> p50/p95/p99 ms
    calls: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    # The same errors by operation and code ("search_text: internal"): which call failed.
    failed_calls: dict[str, int] = field(default_factory=dict)
    saves: int = 0
    searchable: dict[str, float | None] = field(default_factory=dict)  # p50/p95 s, None = never
    never_searchable: int = 0
    cpu: dict[str, float] = field(default_factory=dict)  # cores
    ocr_jobs: int = 0  # OCR jobs the phase's saves created
    acknowledged: dict[str, str] = field(default_factory=dict, repr=False)  # asset -> title

    @property
    def bound_ms(self) -> float:
        """2 x N / throughput, in ms (the p95 target)."""
        return 2 * self.clients / self.throughput * 1000 if self.throughput else 0.0


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tree_cpu(pid: int | None) -> float:
    """CPU seconds of a process and all its descendants, exited ones included (0 when gone).

    A PostgreSQL backend that exits between two samples moves its time into its parent's
    ``children_*`` counters: counting those too keeps the difference of two samples right.
    """
    if pid is None:
        return 0.0
    try:
        root = psutil.Process(pid)
        total = 0.0
        for process in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                times = process.cpu_times()
                total += times.user + times.system + times.children_user + times.children_system
        return total
    except psutil.Error:
        return 0.0


# --- the database and the server -------------------------------------------------------------


async def alter_system(settings: MemorySettings, values: dict[str, str]) -> None:
    """Start the embedded server once to ``ALTER SYSTEM`` (settings that need a restart)."""
    database, embedded = await open_database(settings, migrate=True)
    assert embedded is not None
    conn: Any = await asyncpg.connect(to_plain_url(embedded.url(DEFAULT_DATABASE)))
    try:
        for name, value in values.items():
            await conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
    finally:
        await conn.close()
    await database.close()
    embedded.stop()  # the only user: the server stops, the settings apply at the next start


# The benchmark's own table in its throw-away database: the transaction that first made each
# asset ``ready`` (what ``_searchable`` times), noted by a trigger.
READY_TABLE = "bench_asset_ready"
_NOTE_READY = (
    f"CREATE TABLE {READY_TABLE} (asset_id text PRIMARY KEY, xid xid NOT NULL)",
    f"""CREATE FUNCTION bench_note_ready() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        -- the current transaction's id as ``xid`` (what pg_xact_commit_timestamp takes)
        INSERT INTO {READY_TABLE}
        VALUES (NEW.id, (pg_current_xact_id()::text::bigint % 4294967296)::text::xid)
        ON CONFLICT DO NOTHING;
        RETURN NULL;
    END $$""",
    """CREATE TRIGGER bench_asset_ready AFTER INSERT OR UPDATE OF status ON mem_assets
    FOR EACH ROW WHEN (NEW.status = 'ready') EXECUTE FUNCTION bench_note_ready()""",
)


async def note_ready_transactions(database: Database) -> None:
    """Add the trigger that notes the transaction first making each asset ``ready``."""
    async with database.unit_of_work() as uow:
        for statement in _NOTE_READY:
            await session_of(uow).execute(text(statement))


@contextlib.asynccontextmanager
async def library_database(
    settings: MemorySettings, size: int, system: dict[str, str] | None = None
) -> AsyncGenerator[tuple[Database, str, str, EmbeddedPostgres]]:
    """The embedded database with the library loaded; yields it, its URL, an API key, the server.

    ``system``: PostgreSQL settings applied with ``ALTER SYSTEM`` and a restart before the load
    (default: ``track_commit_timestamp``, which the save -> searchable figure needs).
    """
    system = {"track_commit_timestamp": "on"} if system is None else system
    await alter_system(settings, system)
    database, embedded = await open_database(settings, migrate=True)
    assert embedded is not None
    try:
        async with database.unit_of_work() as uow:
            for name, value in system.items():
                shown = (await session_of(uow).execute(text(f"SHOW {name}"))).scalar()
                if shown != value:
                    raise RuntimeError(f"{name} did not become {value!r} ({shown!r})")
        embedder = LocalEmbedder()
        await prepare_vector_index(database, settings, embedder)
        await admin.create_identity(database, OWNER, 10**12)
        key = (await admin.create_key(database, OWNER, ("read", "write"))).secret
        index, namespace = await library_target(database, DEFAULT_ALIAS, OWNER)
        started = time.perf_counter()
        url = embedded.url(DEFAULT_DATABASE)
        await load_library(url, index, namespace, size, embedder, owner=OWNER)
        print(
            f"library: {size:,} assets loaded in {time.perf_counter() - started:.0f} s", flush=True
        )
        yield database, url, key, embedded
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(30):
            await database.close()
        embedded.stop()  # PostgreSQL stops once the server has released it too


@contextlib.contextmanager
def running_server(
    data_dir: Path,
    log_path: Path,
    server_args: list[str],
    server_env: dict[str, str],
    port: int = 0,
) -> Generator[tuple[str, subprocess.Popen[bytes]]]:
    """``memory-server serve --transport http`` on loopback (``port``, 0: a free one); stopped."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_OUR_ENV)}
    env.update(MEMORY_DATA_DIR=str(data_dir), MEMORY_LOG_FORMAT="json", MEMORY_LOG_LEVEL="warning")
    # The library is written straight into the database, its object rows naming keys with no
    # bytes: the worker's scheduled reconciliation would rightly find 100,000 objects missing,
    # quarantine them and fail their images in the middle of the measurement (and re-charge the
    # counters the drift check compares). `memory-server reconcile` is measured on its own.
    env.update(ASSET_WORKER_RECONCILE_SECONDS="0")
    env.update(server_env)
    port = port or _free_port()
    serve = ["serve", "--transport", "http", "--host", "127.0.0.1", "--port", str(port)]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [*SERVER, *serve, *server_args], env=env, stdout=log, stderr=subprocess.STDOUT
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 180
            while True:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the server did not start:\n{_tail(log_path)}")
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(url + "/healthz/ready", timeout=2).status_code == 200:
                        break
                time.sleep(0.2)
            yield url, process
        finally:
            _stop(process, grace=60)


def _stop(process: subprocess.Popen[bytes], *, grace: float) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def _tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


# --- one phase ------------------------------------------------------------------------------


@dataclass
class PhaseConfig:
    """How each phase runs."""

    url: str
    key: str
    library: int
    warmup: float
    duration: float
    call_timeout: float
    settle: float
    sessions_per_process: int
    pgdata: Path
    mix: tuple[tuple[str, int], ...] = MIX


def _start_clients(
    config: PhaseConfig, clients: int, stack: contextlib.ExitStack
) -> list[subprocess.Popen[str]]:
    processes = math.ceil(clients / config.sessions_per_process)
    started: list[subprocess.Popen[str]] = []
    first = 0
    for index in range(processes):
        sessions = clients // processes + (index < clients % processes)
        spec = ClientSpec(
            url=config.url + "/mcp",
            key=config.key,
            sessions=sessions,
            first_session=first,
            phase=clients,
            library_size=config.library,
            call_timeout=config.call_timeout,
            mix=config.mix,
        )
        first += sessions
        process = subprocess.Popen(
            [sys.executable, str(HERE / "load_clients.py"), json.dumps(asdict(spec))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        stack.callback(_stop_client, process)
        started.append(process)
    return started


def _stop_client(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait(timeout=10)


def _read_line(process: subprocess.Popen[str], timeout: float) -> str:
    """The next line a client process prints; raises when it exits or stays silent too long."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RuntimeError(
                    f"client process {process.pid} stayed silent for {timeout:.0f} s"
                )
            if selector.select(remaining):
                line = process.stdout.readline()
                if not line:
                    raise RuntimeError(f"client process {process.pid} exited ({process.wait()})")
                return line


async def run_phase(
    config: PhaseConfig, database: Database, server: subprocess.Popen[bytes], clients: int
) -> Phase:
    """N clients for warm-up + window; the figures of the window."""
    ocr_jobs = await _ocr_jobs(database)
    with contextlib.ExitStack() as stack:
        processes = _start_clients(config, clients, stack)
        for process in processes:
            line = await anyio.to_thread.run_sync(_read_line, process, 180.0)
            if line.strip() != "ready":
                raise RuntimeError(f"client process said {line!r}")
        postmaster = EmbeddedPostgres(config.pgdata).postmaster_pid()
        start = time.time() + config.warmup
        end = start + config.duration
        for process in processes:
            assert process.stdin is not None
            process.stdin.write(json.dumps({"start": start, "end": end}) + "\n")
            process.stdin.flush()
        await anyio.sleep(max(0.0, start - time.time()))
        server_cpu, pg_cpu = tree_cpu(server.pid), tree_cpu(postmaster)
        await anyio.sleep(max(0.0, end - time.time()))
        server_cpu, pg_cpu = tree_cpu(server.pid) - server_cpu, tree_cpu(postmaster) - pg_cpu
        records: list[list[Any]] = []
        client_cpu: list[float] = []
        for process in processes:
            line = await anyio.to_thread.run_sync(_read_line, process, config.call_timeout + 60.0)
            result = json.loads(line)
            records.extend(result["records"])
            client_cpu.append(result["cpu_seconds"])
    phase = Phase(clients=clients, processes=len(processes), window=config.duration)
    phase.cpu = {
        "clients": sum(client_cpu) / config.duration,
        "busiest_client_process": max(client_cpu) / config.duration,
        "server": server_cpu / config.duration,
        "postgres": pg_cpu / config.duration,
    }
    _summarise(phase, records, start, end)
    phase.acknowledged = {r[4]: r[5] for r in records if r[0] == "save" and r[4]}
    saves = {r[4]: r[2] for r in records if r[0] == "save" and r[4] and start <= r[1] < end}
    await _searchable(phase, database, saves, config.settle)
    phase.ocr_jobs = await _ocr_jobs(database) - ocr_jobs
    return phase


async def _ocr_jobs(database: Database) -> int:
    """How many OCR jobs exist, whatever their state (saves only ever add them)."""
    async with database.unit_of_work() as uow:
        count = await session_of(uow).scalar(
            text("SELECT count(*) FROM mem_asset_embedding_jobs WHERE kind = 'ocr'")
        )
    return int(count or 0)


def _summarise(phase: Phase, records: list[list[Any]], start: float, end: float) -> None:
    phase.errors = dict(Counter(r[3] for r in records if r[3] is not None))
    phase.failed_calls = dict(Counter(f"{r[0]}: {r[3]}" for r in records if r[3] is not None))
    answered = [r for r in records if start <= r[2] <= end and r[3] is None]
    phase.throughput = len(answered) / (end - start)
    window = [r for r in records if start <= r[1] < end and r[0] != "session"]
    for operation in [*OPERATIONS, "search", "all"]:
        times = [
            (r[2] - r[1]) * 1000
            for r in window
            if operation in ("all", r[0]) or (operation == "search" and r[0].startswith("search"))
        ]
        phase.calls[operation] = len(times)
        if times:
            phase.latency[operation] = {
                "p50": _pct(times, 0.5),
                "p95": _pct(times, 0.95),
                "p99": _pct(times, 0.99),
            }


async def _searchable(
    phase: Phase, database: Database, saves: dict[str, float], settle: float
) -> None:
    """Wait for the worker to drain, then time each save's answer to its ready commit."""
    waiting = text(
        "SELECT count(*) FROM mem_assets WHERE owner_identity = :o"
        " AND embedding_status IN ('pending', 'running') AND status = 'processing'"
    )
    deadline = time.monotonic() + settle
    while time.monotonic() < deadline:
        async with database.unit_of_work() as uow:
            if not (await session_of(uow).execute(waiting, {"o": OWNER})).scalar():
                break
        await anyio.sleep(0.5)
    ready = text(
        "SELECT r.asset_id, extract(epoch FROM pg_xact_commit_timestamp(r.xid))"
        f" FROM {READY_TABLE} r JOIN mem_assets a ON a.id = r.asset_id"
        " WHERE r.asset_id = ANY(:ids) AND a.status = 'ready'"
    )
    async with database.unit_of_work() as uow:
        rows = (await session_of(uow).execute(ready, {"ids": list(saves)})).all()
    delays = [float(committed) - saves[asset] for asset, committed in rows]
    phase.saves = len(saves)
    phase.never_searchable = len(saves) - len(delays)
    everything = delays + [math.inf] * phase.never_searchable
    if everything:
        phase.searchable = {
            q: (None if math.isinf(v) else v)
            for q, v in (("p50", _pct(everything, 0.5)), ("p95", _pct(everything, 0.95)))
        }


async def counter_drift(database: Database, index: str, settings: MemorySettings) -> int:
    """The owner's ``used_bytes`` minus what its live objects and vectors take.

    What a save charges (docs/design.md#namespace): the original and the preview of each
    stored object once, and each of its vectors. The library is written straight into the
    database and charged nothing, so this is not zero; a run that keeps the counters exact
    leaves it unchanged (the drift is the difference of two readings).
    """
    element = 2 if settings.asset_embed_vector_type == "halfvec" else 4
    per_vector = settings.asset_embed_dim * element + VECTOR_HEADER_BYTES
    async with database.unit_of_work() as uow:
        used = await session_of(uow).scalar(
            text("SELECT used_bytes FROM mem_asset_namespaces WHERE owner_identity = :o"),
            {"o": OWNER},
        )
        stored = await session_of(uow).scalar(
            text(
                "SELECT coalesce(sum(bytes + coalesce(preview_bytes, 0)), 0) "
                "FROM mem_asset_objects WHERE owner_identity = :o AND deleted_at IS NULL"
            ),
            {"o": OWNER},
        )
        vectors = await session_of(uow).scalar(
            text(f"SELECT count(*) FROM {index} WHERE owner_identity = :o"), {"o": OWNER}
        )
    return int(used or 0) - int(stored or 0) - int(vectors or 0) * per_vector


async def reserved_bytes(database: Database) -> int:
    """Bytes still reserved by saves in flight (none once every save has answered)."""
    async with database.unit_of_work() as uow:
        value = await session_of(uow).scalar(
            text("SELECT reserved_bytes FROM mem_asset_namespaces WHERE owner_identity = :o"),
            {"o": OWNER},
        )
    return int(value or 0)


@dataclass
class Afterwards:
    """What the checks after the last phase found."""

    saves: int = 0
    unreadable: list[str] = field(default_factory=list)
    unsearchable: list[str] = field(default_factory=list)
    drift_bytes: int = 0
    reserved_bytes: int = 0
    seconds: float = 0.0


@dataclass
class OcrComparison:
    """Search p95 at one N with the server's OCR setting and with ``ASSET_OCR=off``.

    Measured A-B-A: the main run's phase at that N (or a phase of its own when the main run
    did not have that N), a phase on a server restarted with OCR off, then one restarted with
    the setting again; the OCR jobs each phase created show that OCR ran where it should.
    """

    clients: int
    on: list[float] = field(default_factory=list)  # search p95 of each OCR-on phase, ms
    off: list[float] = field(default_factory=list)  # search p95 of each OCR-off phase, ms
    ocr_jobs_on: list[int] = field(default_factory=list)
    ocr_jobs_off: list[int] = field(default_factory=list)

    @property
    def ratio(self) -> float | None:
        """Mean search p95 with OCR on over the mean with it off."""
        if not self.on or not self.off or not statistics.fmean(self.off):
            return None
        return statistics.fmean(self.on) / statistics.fmean(self.off)


# --- report ---------------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _seconds(value: float | None, settle: float) -> str:
    return f">{settle:.0f}" if value is None else f"{value:.2f}"


MANY_CLIENTS = (1, 4, 16, 64)  # issue 31: no errors at each
SCALING = 1.8  # issue 31: throughput at 16 clients at least this times one client's
FAIR = 1.5  # issue 31: search p95 at 16 at most this times 16 / throughput
OCR_COST = 1.3  # issue 31: search p95 with OCR on at most this times with OCR off


def targets(
    phases: dict[int, Phase],
    after: Afterwards | None = None,
    ocr: OcrComparison | None = None,
) -> list[tuple[str, bool | None, str]]:
    """Issue 31's many-clients targets: (what, PASS/FAIL or None when not judged, figures)."""
    judged: list[tuple[str, bool | None, str]] = []
    errors = {n: sum(p.errors.values()) for n, p in phases.items()}
    missing = [n for n in MANY_CLIENTS if n not in phases]
    listed = ", ".join(f"N={n}: {count}" for n, count in errors.items())
    judged.append(
        (
            "zero errors at 1, 4, 16 and 64 clients",
            None if missing and all(c == 0 for c in errors.values()) else not any(errors.values()),
            listed + (f" (not run: {', '.join(f'N={n}' for n in missing)})" if missing else ""),
        )
    )
    single, sixteen = phases.get(1), phases.get(16)
    if single is None or sixteen is None or not single.throughput:
        why = "needs N=1 and N=16" if single is None or sixteen is None else "N=1 answered none"
        judged.append((f"throughput at 16 >= {SCALING:g}x one client's", None, why))
    else:
        ratio = sixteen.throughput / single.throughput
        judged.append(
            (
                f"throughput at 16 >= {SCALING:g}x one client's",
                ratio >= SCALING,
                f"{sixteen.throughput:.1f} vs {single.throughput:.1f} calls/s: {ratio:.2f}x",
            )
        )
    search = sixteen.latency.get("search", {}).get("p95") if sixteen is not None else None
    if sixteen is None or search is None or not sixteen.throughput:
        judged.append((f"search p95 at 16 <= {FAIR:g} x 16 / throughput", None, "needs N=16"))
    else:
        bound = FAIR * 16 / sixteen.throughput * 1000
        judged.append(
            (
                f"search p95 at 16 <= {FAIR:g} x 16 / throughput",
                search <= bound,
                f"{search:.0f} ms <= {bound:.0f} ms",
            )
        )
    if after is None:
        judged.append(("every acknowledged save readable and found by its title", None, "not run"))
        judged.append(("counters with zero drift, nothing left reserved", None, "not run"))
    else:
        judged.append(
            (
                "every acknowledged save readable and found by its title",
                not after.unreadable and not after.unsearchable,
                f"{after.saves} saves: {len(after.unreadable)} unreadable, "
                f"{len(after.unsearchable)} not found",
            )
        )
        judged.append(
            (
                "counters with zero drift, nothing left reserved",
                after.drift_bytes == 0 and after.reserved_bytes == 0,
                f"drift {after.drift_bytes:+,} bytes, reserved {after.reserved_bytes:,} bytes",
            )
        )
    if sixteen is None or not sixteen.saves:
        judged.append(("save -> searchable p95 < 2 s at 16", None, "no saves measured at 16"))
    else:
        p95 = sixteen.searchable.get("p95")
        judged.append(
            (
                "save -> searchable p95 < 2 s at 16",
                p95 is not None and p95 < 2.0,
                f"{'never' if p95 is None else f'{p95:.2f} s'} over {sixteen.saves} saves",
            )
        )
    judged.append(_ocr_target(ocr))
    return judged


def _ocr_target(ocr: OcrComparison | None) -> tuple[str, bool | None, str]:
    what = f"search p95 with OCR on <= {OCR_COST:g}x with OCR off"
    if ocr is None:
        return what, None, "not run (--ocr-compare)"
    ratio = ocr.ratio
    if ratio is None:
        return what, None, f"at N={ocr.clients}: no search measured"
    if not any(ocr.ocr_jobs_on) or any(ocr.ocr_jobs_off):
        jobs = f"OCR jobs created: on {ocr.ocr_jobs_on}, off {ocr.ocr_jobs_off}"
        return what, None, f"at N={ocr.clients}: OCR did not run as set ({jobs})"
    on = "/".join(f"{value:.0f}" for value in ocr.on)
    off = "/".join(f"{value:.0f}" for value in ocr.off)
    return what, ratio <= OCR_COST, f"at N={ocr.clients}: {on} ms vs {off} ms: {ratio:.2f}x"


def report(
    phases: dict[int, Phase],
    after: Afterwards | None,
    args: argparse.Namespace,
    revision: str,
    ocr: OcrComparison | None = None,
) -> bool:
    """Print the tables and the targets; True when every target this run judges is met."""
    mix = ", ".join(f"{name} {weight}" for name, weight in args.mix)
    print(
        f"\nlibrary {args.library:,} assets; mix: {mix}; warm-up {args.warmup:g} s, window "
        f"{args.duration:g} s per N; call timeout {args.call_timeout:g} s; graph m = "
        f"{args.graph_m}; code {revision}"
    )
    if args.server_args or args.server_env:
        print(f"server options: {args.server_args} {' '.join(args.server_env)}".rstrip())
    print(
        f"\n{'N':>3}{'procs':>6}{'calls/s':>9}{'p50':>7}{'p95':>7}{'p99':>7}{'2N/X':>7}"
        f"{'errors':>8}{'saves':>7}{'searchable p50/p95 s':>22}{'CPU clients/server/pg':>24}"
    )
    for n, p in phases.items():
        all_ = p.latency.get("all", {})
        searchable = (
            f"{_seconds(p.searchable.get('p50'), args.settle)}/"
            f"{_seconds(p.searchable.get('p95'), args.settle)}"
            if p.saves
            else "-"
        )
        cpu = f"{p.cpu['clients']:.2f}/{p.cpu['server']:.2f}/{p.cpu['postgres']:.2f}"
        print(
            f"{n:>3}{p.processes:>6}{p.throughput:>9.1f}{_ms(all_.get('p50')):>7}"
            f"{_ms(all_.get('p95')):>7}{_ms(all_.get('p99')):>7}{_ms(p.bound_ms):>7}"
            f"{sum(p.errors.values()):>8}{p.saves:>7}{searchable:>22}{cpu:>24}"
        )
    print(
        "latencies in ms over the calls sent in the window (failed ones included); 2N/X = the "
        "p95 target; CPU in cores (CPU seconds / window)"
    )
    print(
        f"\n{'N':>3}  {'operation':<14}{'calls':>7}{'p50':>7}{'p95':>7}{'p99':>7}{'p95/(N/X)':>11}"
    )
    for n, p in phases.items():
        for operation in [*OPERATIONS, "search"]:
            figures = p.latency.get(operation)
            if figures is None:
                continue
            mean = n / p.throughput * 1000 if p.throughput else math.inf
            print(
                f"{n:>3}  {operation:<14}{p.calls[operation]:>7}{_ms(figures['p50']):>7}"
                f"{_ms(figures['p95']):>7}{_ms(figures['p99']):>7}{figures['p95'] / mean:>11.2f}"
            )
    for n, p in phases.items():
        if p.cpu["busiest_client_process"] > 0.8:
            print(
                f"N={n}: a client process used {p.cpu['busiest_client_process']:.2f} cores: the "
                "clients may limit this N; try fewer --sessions-per-process"
            )
        if p.errors:
            listed = ", ".join(f"{key} x{count}" for key, count in sorted(p.failed_calls.items()))
            print(f"errors at N={n}: {listed}")
        if p.never_searchable:
            print(
                f"N={n}: {p.never_searchable} of {p.saves} saves not searchable "
                f"{args.settle:g} s after the window"
            )
    if after is not None:
        print(
            f"\nafterwards ({after.seconds:.0f} s): {after.saves} acknowledged saves read back "
            "(image_asset_get) and searched for by their unique titles; counters: used_bytes "
            "against the live objects and vectors, before and after the run"
        )
        for what, ids in (("unreadable", after.unreadable), ("not found", after.unsearchable)):
            if ids:
                print(f"  {what}: {len(ids)}, e.g. {', '.join(ids[:5])}")
    if ocr is not None:
        print(
            f"\nOCR on/off at N={ocr.clients} (A-B-A, a server restarted for each): search p95 "
            f"on {', '.join(f'{v:.0f}' for v in ocr.on)} ms (OCR jobs {ocr.ocr_jobs_on}), "
            f"off {', '.join(f'{v:.0f}' for v in ocr.off)} ms (OCR jobs {ocr.ocr_jobs_off})"
        )
    print("\ntargets (issue 31, many clients):")
    met = True
    for what, ok, figures in targets(phases, after, ocr):
        verdict = "n/a" if ok is None else ("PASS" if ok else "FAIL")
        met = met and ok is not False
        print(f"  {verdict:<5}{what}: {figures}")
    return met


def _revision() -> str:
    """The commit the server runs from, and whether tracked files differ from it."""

    def git(*args: str) -> str:
        command = ["git", "-C", str(HERE), *args]
        return subprocess.run(command, capture_output=True, text=True, check=False).stdout

    commit = git("log", "-1", "--format=%h %cs").strip() or "unknown"
    return commit + (
        " + local changes" if git("status", "--porcelain", "--untracked-files=no") else ""
    )


# --- main -----------------------------------------------------------------------------------


async def run(
    args: argparse.Namespace, tmp: Path
) -> tuple[dict[int, Phase], Afterwards | None, OcrComparison | None]:
    settings = MemorySettings(memory_data_dir=tmp / "data", asset_vector_graph_m=args.graph_m)
    phases: dict[int, Phase] = {}
    after: Afterwards | None = None
    ocr: OcrComparison | None = None
    async with library_database(settings, args.library) as (database, _url, key, _pg):
        await note_ready_transactions(database)  # what save -> searchable is timed to
        index, _namespace = await library_target(database, DEFAULT_ALIAS, OWNER)
        drift_before = await counter_drift(database, index, settings)
        server_env = dict(item.split("=", 1) for item in args.server_env)
        # The server clears the environment's settings: it builds its own graphs (a planned
        # reindex, a new alias) with the library's ``m``.
        server_env.setdefault("ASSET_VECTOR_GRAPH_M", str(args.graph_m))
        with running_server(
            tmp / "data",
            tmp / "server.log",
            shlex.split(args.server_args),
            server_env,
            port=args.port,
        ) as (url, server):
            config = PhaseConfig(
                url=url,
                key=key,
                library=args.library,
                warmup=args.warmup,
                duration=args.duration,
                call_timeout=args.call_timeout,
                settle=args.settle,
                sessions_per_process=args.sessions_per_process,
                pgdata=Path(settings.postgres_dir),
                mix=args.mix,
            )
            for clients in args.clients:
                print(f"N={clients}: running", flush=True)
                phases[clients] = await run_phase(config, database, server, clients)
                if server.poll() is not None:
                    print(
                        f"the server exited ({server.returncode}) during N={clients}:\n"
                        f"{_tail(tmp / 'server.log')}"
                    )
                    break
            else:
                after = await afterwards(phases, database, index, settings, url, key, args)
                after.drift_bytes -= drift_before
        if args.ocr_compare and after is not None:
            ocr = await ocr_comparison(args, config, database, tmp, server_env, phases)
    return phases, after, ocr


async def ocr_comparison(
    args: argparse.Namespace,
    config: PhaseConfig,
    database: Database,
    tmp: Path,
    server_env: dict[str, str],
    phases: dict[int, Phase],
) -> OcrComparison:
    """Search p95 at ``--ocr-compare`` clients with OCR as set, off, then as set again (A-B-A).

    Each phase gets a server of its own, restarted with the setting, on the same database.
    The main run's phase at that N is the first A; without one, a phase of its own is.
    """
    comparison = OcrComparison(clients=args.ocr_compare)

    def record(phase: Phase, ocr_on: bool) -> None:
        p95 = phase.latency.get("search", {}).get("p95")
        if p95 is not None:
            (comparison.on if ocr_on else comparison.off).append(p95)
        (comparison.ocr_jobs_on if ocr_on else comparison.ocr_jobs_off).append(phase.ocr_jobs)

    runs = [False, True]
    if args.ocr_compare in phases:
        record(phases[args.ocr_compare], True)
    else:
        runs.insert(0, True)
    for ocr_on in runs:
        label = "on" if ocr_on else "off"
        env = server_env if ocr_on else {**server_env, "ASSET_OCR": "off"}
        with running_server(
            tmp / "data",
            tmp / f"server-ocr-{label}.log",
            shlex.split(args.server_args),
            env,
            port=args.port,
        ) as (url, server):
            print(f"N={args.ocr_compare}, OCR {label}: running", flush=True)
            record(
                await run_phase(replace(config, url=url), database, server, args.ocr_compare),
                ocr_on,
            )
    return comparison


async def afterwards(
    phases: dict[int, Phase],
    database: Database,
    index: str,
    settings: MemorySettings,
    url: str,
    key: str,
    args: argparse.Namespace,
) -> Afterwards:
    """Every acknowledged save readable and searchable; the counters (drift not yet relative)."""
    started = time.perf_counter()
    saves = {
        asset: title for phase in phases.values() for asset, title in phase.acknowledged.items()
    }
    # The last phase's saves were waited for (--settle); nothing else is still embedding.
    unreadable, unsearchable = await verify(
        url + "/mcp", key, saves, call_timeout=args.call_timeout
    )
    return Afterwards(
        saves=len(saves),
        unreadable=unreadable,
        unsearchable=unsearchable,
        drift_bytes=await counter_drift(database, index, settings),
        reserved_bytes=await reserved_bytes(database),
        seconds=time.perf_counter() - started,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--clients", default="1,4,16,64", help="the Ns, comma-separated")
    parser.add_argument("--library", type=int, default=10_000, help="assets loaded directly")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds before each window")
    parser.add_argument("--duration", type=float, default=30.0, help="measured seconds per N")
    parser.add_argument("--call-timeout", type=float, default=20.0, help="seconds per call")
    parser.add_argument(
        "--settle", type=float, default=30.0, help="seconds to wait for a phase's saves to embed"
    )
    parser.add_argument(
        "--sessions-per-process", type=int, default=32, help="MCP sessions per client process"
    )
    parser.add_argument(
        "--quick", action="store_true", help="for development: 2,000 assets, 2 s + 8 s per N"
    )
    parser.add_argument(
        "--full",
        action="store_true",
        help="the scale load test: 100,000 assets, N = 1, 4, 16, 64, 10 s + 120 s per N",
    )
    parser.add_argument(
        "--mix",
        default=",".join(f"{name}={weight}" for name, weight in MIX),
        help="OPERATION=WEIGHT,... (operations: " + ", ".join(OPERATIONS) + ")",
    )
    parser.add_argument(
        "--server-args",
        default=DEFAULT_SERVER_ARGS,
        help=f'extra `serve` options (default "{DEFAULT_SERVER_ARGS}"; "" for one process)',
    )
    parser.add_argument(
        "--server-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="environment for the server (repeatable), e.g. MEMORY_DB_POOL_SIZE=20; "
        f"default {' '.join(DEFAULT_SERVER_ENV)}",
    )
    parser.add_argument(
        "--server-log", type=Path, default=None, help="keep the server's log at this path"
    )
    parser.add_argument(
        "--ocr-compare",
        type=int,
        default=0,
        metavar="N",
        help="then measure search p95 at N clients with OCR as set, off, and as set again "
        "(a server restarted for each; issue 31's OCR target)",
    )
    parser.add_argument(
        "--graph-m",
        type=int,
        choices=GRAPH_M_CHOICES,
        default=DEFAULT_GRAPH_M,
        help="neighbours per node of the library's HNSW graph (ASSET_VECTOR_GRAPH_M, for the "
        "library and the server; the benchmark clears the environment's settings)",
    )
    parser.add_argument("--port", type=int, default=0, help="the server's port (0: a free one)")
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args()
    args.clients = [int(n) for n in args.clients.split(",")]
    try:
        args.mix = parse_mix(args.mix)
    except ValueError as exc:
        parser.error(str(exc))
    if args.quick:
        args.library, args.warmup, args.duration = 2000, 2.0, 8.0
    if args.full:
        args.library, args.clients, args.warmup, args.duration = (
            100_000,
            [1, 4, 16, 64],
            10.0,
            120.0,
        )
        args.settle = max(args.settle, 60.0)
    if any("=" not in item for item in args.server_env):
        parser.error("--server-env takes KEY=VALUE")
    args.server_env = args.server_env or list(DEFAULT_SERVER_ENV)
    if args.ocr_compare < 0:
        parser.error("--ocr-compare takes a number of clients")
    if args.ocr_compare and "ASSET_OCR=off" in args.server_env:
        parser.error("--ocr-compare compares OCR as set with OCR off: ASSET_OCR=off leaves none")
    for name in [k for k in os.environ if k.startswith(_OUR_ENV)]:
        del os.environ[name]  # the loader and the server see the same, default, settings
    configure_logging(level="warning")
    with tempfile.TemporaryDirectory(prefix="load-") as tmp:
        try:
            phases, after, ocr = anyio.run(run, args, Path(tmp))
        finally:
            if args.server_log is not None and (Path(tmp) / "server.log").exists():
                shutil.copyfile(Path(tmp) / "server.log", args.server_log)
    met = report(phases, after, args, _revision(), ocr)
    if args.json:
        figures: dict[str, Any] = {
            str(n): {k: v for k, v in asdict(p).items() if k != "acknowledged"}
            for n, p in phases.items()
        }
        if after is not None:
            figures["afterwards"] = asdict(after)
        if ocr is not None:
            figures["ocr"] = asdict(ocr)
        print(json.dumps(figures, indent=2))
    return 1 if args.strict and not met else 0


if __name__ == "__main__":
    sys.exit(main())
