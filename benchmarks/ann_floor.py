"""Below the floor: the ANN served from an in-process HNSW mirror of PostgreSQL, measured.

A prototype, not the server's code. Today a text search's ANN is pgvector's HNSW walk in
PostgreSQL, about 10 ms of the 27 ms floor of today's design at 100,000 assets
(docs/performance.md, "Below the floor"). The candidate: every server process keeps the
vectors in an in-process FAISS HNSW graph, loaded from PostgreSQL (the durable source) at
start and kept current through ``LISTEN/NOTIFY``; a search asks the mirror for the ids and
PostgreSQL only for the text list and the reload, which stay under the authorisation
predicates.

On the same vectors (``vector_search.make_dataset``: clustered 1,024-d unit vectors in 100
vaults of one owner each, stored as ``halfvec``), in the same run, with the queries
alternating between the two, it measures

- latency p50/p95 and CPU per search (the client process, and PostgreSQL's processes from
  ``/proc``) and recall@10 against numpy's exact top 10, for the caller's scope covering every
  vault (100 %), ten vaults (10 %) and one vault (1 %):

  - ``pgvector``: ``VectorIndex.search`` with the default ``auto`` strategy, what a search
    does today (a unit of work, the count that picks the path, the settings, the ANN or the
    bits scan);
  - ``mirror``: the prototype; the caller's vaults become a bitmap that filters the graph
    walk (``faiss.IDSelectorBitmap``), and a scope of at most ``scan_max_rows`` rows is
    scored exactly with numpy instead (the in-process twin of the bits scan);

- the mirror's cost: the time to load it from PostgreSQL (read, then build), the memory it
  holds in the process, and the time it takes to catch up after N rows are inserted in one
  committed transaction (commit → the mirror has applied every row), with PostgreSQL's own
  insert time beside it.

Usage: python benchmarks/ann_floor.py [--rows 100000] [--queries 100] [--inserts 1,100,1000]
       [--shared-buffers 1GB] [--ef-search 128]
"""

from __future__ import annotations

import argparse
import asyncio
import os

# One BLAS thread: a 1 x 1024 product woke OpenBLAS's sleeping threads on busy cores for
# milliseconds (docs/performance.md); a server process would run its mirror the same way.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import statistics
import struct
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
import psutil
from vector_search import DIMS, MODEL, VAULTS, load_vectors, make_dataset, make_queries

from memory_db.database import create_engine, start_embedded, to_plain_url
from memory_db.repositories import VaultScope
from memory_db.testing import PostgresForTests
from memory_db.unit_of_work import Database, session_of
from memory_db.vectors import WRITABLE_COLUMNS, SearchTuning, VectorIndex, create_index
from memory_db.vectors.codes import vector_codes

TABLE = "floor_halfvec"
CHANNEL = "ann_mirror"
TICKS = os.sysconf("SC_CLK_TCK")

# What the prototype adds to PostgreSQL: one notification per changed row, sent at commit
# (NOTIFY is transactional: a rolled-back insert tells nobody). The payload is the row id.
TRIGGER_SQL = f"""
CREATE FUNCTION {TABLE}_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('{CHANNEL}', 'D' || OLD.id);
        RETURN OLD;
    END IF;
    PERFORM pg_notify('{CHANNEL}', 'U' || NEW.id);
    RETURN NEW;
END $$;
CREATE TRIGGER {TABLE}_notify AFTER INSERT OR UPDATE OR DELETE ON {TABLE}
    FOR EACH ROW EXECUTE FUNCTION {TABLE}_notify();
"""


def _halfvec_encoder(value: bytes) -> bytes:
    return value


def _halfvec_decoder(data: bytes) -> np.ndarray[Any, Any]:
    (dims,) = struct.unpack_from(">H", data)
    return np.frombuffer(data, dtype=">f2", count=dims, offset=4).astype(np.float32)


class AnnMirror:
    """An in-process HNSW graph of one vector table, filtered by vault, fed by notifications.

    Rows are numbered in the order they arrive; FAISS knows only those numbers, the mirror
    maps them to the row's id and vault. Deleted rows cannot leave an HNSW graph: they are
    tombstoned (dropped from every filter) until the next full load.
    """

    def __init__(self, ef_search: int, scan_max_rows: int) -> None:
        import faiss  # a dev-group dependency: the prototype only

        self._faiss: Any = faiss  # untyped bindings
        self.index = faiss.IndexHNSWFlat(DIMS, 16, faiss.METRIC_INNER_PRODUCT)
        self.index.hnsw.efConstruction = 64
        self.ef_search = ef_search
        self.scan_max_rows = scan_max_rows
        self.ids: list[str] = []
        self.row_of: dict[str, int] = {}
        self.vault_rows: dict[str, list[int]] = {}
        self._vault_arrays: dict[str, np.ndarray[Any, Any]] = {}
        self.dead: set[int] = set()
        self.applied = 0
        self.changed = asyncio.Event()
        self._pending: list[str] = []
        self.first_notified = 0.0
        self.fetch_s = 0.0
        self.add_s = 0.0
        self._wake = asyncio.Event()

    @staticmethod
    async def connect(url: str) -> Any:
        """A connection that reads ``halfvec`` as numpy arrays (binary, no text parsing)."""
        conn: Any = await asyncpg.connect(to_plain_url(url))
        await conn.set_type_codec(
            "halfvec",
            schema="public",
            encoder=_halfvec_encoder,  # never used: the mirror only reads vectors
            decoder=_halfvec_decoder,
            format="binary",
        )
        return conn

    def one_thread(self) -> None:
        """Search (and add) on one core from now on, as a PostgreSQL backend runs a query."""
        self._faiss.omp_set_num_threads(1)

    def add(self, rows: Sequence[Any]) -> None:
        """Add rows (id, vault, vector) to the graph; a known id gets a new node, the old one
        tombstoned."""
        fresh: list[np.ndarray[Any, Any]] = []
        for row in rows:
            vid, vault, embedding = row[0], row[1], row[2]
            old = self.row_of.get(vid)
            if old is not None:
                self.dead.add(old)  # an update: the new version gets a new row number
            number = len(self.ids)
            self.ids.append(vid)
            self.row_of[vid] = number
            self.vault_rows.setdefault(vault, []).append(number)
            self._vault_arrays.pop(vault, None)
            fresh.append(embedding)
        if not fresh:
            return
        block = np.vstack(fresh)
        block /= np.linalg.norm(block, axis=1, keepdims=True)  # cosine = inner product
        self.index.add(block)

    def _vectors(self) -> np.ndarray[Any, Any]:
        """The graph's own stored vectors as a numpy view (no copy): for exact scoring."""
        storage = self._faiss.downcast_index(self.index.storage)
        n = self.index.ntotal
        return self._faiss.rev_swig_ptr(storage.get_xb(), n * DIMS).reshape(n, DIMS)

    async def load(self, conn: Any) -> None:
        """Read every row from PostgreSQL and build the graph (the start of a process)."""
        rows = await conn.fetch(f"SELECT id, vault, embedding FROM {TABLE} ORDER BY id")
        self.add(rows)

    def _rows(self, vault: str) -> np.ndarray[Any, Any]:
        array = self._vault_arrays.get(vault)
        if array is None:
            array = np.asarray(self.vault_rows.get(vault, []), dtype=np.int64)
            self._vault_arrays[vault] = array
        return array

    def search(self, query: np.ndarray[Any, Any], vaults: Sequence[str], k: int = 10) -> list[str]:
        """Ids of the ``k`` nearest rows of these vaults, nearest first."""
        rows = np.concatenate([self._rows(v) for v in vaults]) if vaults else np.zeros(0, "i8")
        if self.dead:
            rows = rows[~np.isin(rows, np.fromiter(self.dead, dtype=np.int64))]
        q = (query / np.linalg.norm(query)).astype(np.float32)
        if len(rows) <= self.scan_max_rows:
            # A small scope: every row scored exactly (the in-process bits scan, but exact).
            scores = self._vectors()[rows] @ q
            best = np.argsort(-scores, kind="stable")[:k]
            return [self.ids[int(rows[i])] for i in best]
        mask = np.zeros(self.index.ntotal, dtype=bool)
        mask[rows] = True
        bits = np.packbits(mask, bitorder="little")
        faiss = self._faiss
        params = faiss.SearchParametersHNSW(
            efSearch=self.ef_search, sel=faiss.IDSelectorBitmap(len(bits), faiss.swig_ptr(bits))
        )
        _, found = self.index.search(q.reshape(1, -1), k, params=params)
        return [self.ids[int(i)] for i in found[0] if i >= 0]

    def notified(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        """The listener: queue the id, wake the applier (no I/O in the callback)."""
        if not self._pending:
            self.first_notified = time.perf_counter()
        self._pending.append(payload)
        self._wake.set()

    async def apply_forever(self, conn: Any) -> None:
        """Fetch the rows named by notifications in batches and add them to the graph."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._pending = self._pending, []
            upserted = [p[1:] for p in batch if p[0] == "U"]
            for p in batch:
                if p[0] == "D" and p[1:] in self.row_of:
                    self.dead.add(self.row_of.pop(p[1:]))
            if upserted:
                started = time.perf_counter()
                rows = await conn.fetch(
                    f"SELECT id, vault, embedding FROM {TABLE} WHERE id = ANY($1::text[])",
                    upserted,
                )
                fetched = time.perf_counter()
                # In this thread: a search must not walk the graph while a row is added.
                self.add(rows)
                self.fetch_s += fetched - started
                self.add_s += time.perf_counter() - fetched
            self.applied += len(batch)
            self.changed.set()

    def memory_bytes(self) -> int:
        """What the mirror holds: FAISS's float32 vectors and links, and the id maps."""
        n = self.index.ntotal
        links = n * (16 * 2 + 16) * 4  # level 0: 2m neighbours; upper levels about 1/m of that
        return n * DIMS * 4 + links + n * 120


def _pg_cpu(postmaster: int) -> float:
    """CPU seconds of the PostgreSQL server's processes so far (user + system)."""
    total = 0
    for pid in [postmaster, *[c.pid for c in psutil.Process(postmaster).children()]]:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total / TICKS


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


async def _insert(
    url: str, vectors: np.ndarray[Any, Any], start: int, vault: int
) -> tuple[float, float]:
    """Insert rows in one transaction (per-row INSERTs, as saves do): seconds to commit, and
    the ``perf_counter`` of the commit's answer."""
    conn: Any = await asyncpg.connect(to_plain_url(url))
    try:
        codes = vector_codes(vectors, DIMS)
        now = datetime.now(UTC)
        records = [
            (
                f"{start + i:064x}",
                f"ast_{start + i}",
                f"aob_{start + i}",
                f"owner{vault}@example.com",
                f"owner{vault}@example.com/Library",
                None,
                None,
                "visual",
                MODEL,
                DIMS,
                "image/png",
                "upload",
                now,
                "[" + ",".join(f"{x:.6f}" for x in vectors[i]) + "]",
                codes[i],
            )
            for i in range(len(vectors))
        ]
        columns = ", ".join(WRITABLE_COLUMNS)
        placeholders = ", ".join(f"${i + 1}" for i in range(len(WRITABLE_COLUMNS) - 2))
        sql = (
            f"INSERT INTO {TABLE} ({columns}) VALUES ({placeholders}, "
            f"CAST(CAST(${len(WRITABLE_COLUMNS) - 1} AS text) AS halfvec({DIMS})), "
            f"CAST(CAST(${len(WRITABLE_COLUMNS)} AS text) AS bit({DIMS})))"
        )
        started = time.perf_counter()
        async with conn.transaction():
            await conn.executemany(sql, records)
        committed = time.perf_counter()
        return committed - started, committed
    finally:
        await conn.close()


async def run(args: argparse.Namespace) -> None:
    vectors, vaults, centers = make_dataset(args.rows)
    queries = make_queries(centers, args.queries)
    stored = vectors.astype(np.float16).astype(np.float32)
    stored /= np.linalg.norm(stored, axis=1, keepdims=True)
    scopes = [
        VaultScope(f"owner{v}@example.com", f"owner{v}@example.com/Library") for v in range(VAULTS)
    ]
    tuning = SearchTuning()
    filters = [("100 %", VAULTS), ("10 %", 10), ("1 %", 1)]
    with tempfile.TemporaryDirectory() as tmp:
        postgres = PostgresForTests(Path(tmp) / "pg")
        await postgres.start()
        name = await postgres.clone()
        url = postgres.url(name)
        try:
            admin = await asyncpg.connect(to_plain_url(url))
            await admin.execute(f"ALTER SYSTEM SET shared_buffers = '{args.shared_buffers}'")
            await admin.close()
            database = Database(create_engine(url, pool_size=1, max_overflow=0))
            async with database.unit_of_work() as uow:
                await create_index(session_of(uow), TABLE, dimensions=DIMS, element="halfvec")
            await database.close()
            started = time.perf_counter()
            await load_vectors(url, TABLE, "halfvec", vectors, vaults)
            pg_load = time.perf_counter() - started
            # Restart for the buffer cache size (ALTER SYSTEM applies at the next start).
            if postgres.server is not None:
                postgres.server.stop()
            postgres.server = await start_embedded(postgres.pgdata)
            pgdata = postgres.pgdata
            postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])
            check = await asyncpg.connect(to_plain_url(url))
            buffers = await check.fetchval("SHOW shared_buffers")
            hnsw_bytes = await check.fetchval(f"SELECT pg_relation_size('{TABLE}_hnsw')")
            await check.execute(TRIGGER_SQL)
            await check.close()
            print(
                f"{args.rows:,} vectors x {DIMS}, {VAULTS} vaults; PostgreSQL COPY + HNSW "
                f"build {pg_load:.0f} s, graph {hnsw_bytes / 2**20:.0f} MiB, "
                f"shared_buffers {buffers}",
                flush=True,
            )

            process = psutil.Process()
            rss_before = process.memory_info().rss
            mirror = AnnMirror(args.ef_search, tuning.scan_max_rows)
            reader = await AnnMirror.connect(url)
            started = time.perf_counter()
            rows = await reader.fetch(f"SELECT id, vault, embedding FROM {TABLE} ORDER BY id")
            read_s = time.perf_counter() - started
            started = time.perf_counter()
            mirror.add(rows)  # the prototype's own load, timed apart
            build_s = time.perf_counter() - started  # with every core, as PostgreSQL's build
            mirror.one_thread()  # a search on one core, like a PostgreSQL backend's
            del rows
            rss_after = process.memory_info().rss
            print(
                f"mirror: read {read_s:.1f} s + build {build_s:.1f} s (every core), "
                f"RSS +{(rss_after - rss_before) / 2**20:.0f} MiB, "
                f"estimated {mirror.memory_bytes() / 2**20:.0f} MiB",
                flush=True,
            )

            database = Database(create_engine(url, pool_size=1, max_overflow=0))
            figures: dict[tuple[str, str], dict[str, list[float]]] = {}
            for label, n in filters:
                for which in ("pgvector", "mirror"):
                    figures[(label, which)] = {"ms": [], "client": [], "pg": [], "recall": []}
                vault_names = [s.physical_vault for s in scopes[:n]]
                allowed = np.flatnonzero(vaults < n)
                for round_ in range(2):  # the first round warms caches and is not counted
                    for query in queries:
                        truth = allowed[np.argsort(-(stored[allowed] @ query), kind="stable")[:10]]
                        want = {f"{int(i):064x}" for i in truth}
                        q = [float(x) for x in query]
                        for which in ("pgvector", "mirror") if round_ else ("pgvector",):
                            pg0 = _pg_cpu(postmaster)
                            cpu0 = time.process_time()
                            started = time.perf_counter()
                            if which == "pgvector":
                                async with database.unit_of_work() as uow:
                                    index = await VectorIndex.open(session_of(uow), TABLE)
                                    hits = await index.search(
                                        q, scopes[:n], model=MODEL, limit=10, tuning=tuning
                                    )
                                found = {h.vector_id for h in hits}
                            else:
                                found = set(mirror.search(query, vault_names))
                            elapsed = time.perf_counter() - started
                            cpu1, pg1 = time.process_time(), _pg_cpu(postmaster)
                            if round_:
                                f = figures[(label, which)]
                                f["ms"].append(elapsed * 1000)
                                f["client"].append((cpu1 - cpu0) * 1000)
                                f["pg"].append((pg1 - pg0) * 1000)
                                f["recall"].append(len(found & want) / 10)
            await database.close()

            print(
                f"\n{'scope':<7}{'path':<10}{'p50 ms':>8}{'p95 ms':>8}{'client CPU':>11}"
                f"{'pg CPU':>8}{'CPU ms':>8}{'recall':>8}{'p50 pg/mirror':>15}"
            )
            for label, _ in filters:
                base = statistics.median(figures[(label, "pgvector")]["ms"])
                for which in ("pgvector", "mirror"):
                    f = figures[(label, which)]
                    client = statistics.mean(f["client"])
                    pg = statistics.mean(f["pg"])
                    p50 = statistics.median(f["ms"])
                    print(
                        f"{label:<7}{which:<10}{p50:>8.2f}{_pct(f['ms'], 0.95):>8.2f}"
                        f"{client:>11.2f}{pg:>8.2f}{client + pg:>8.2f}"
                        f"{statistics.mean(f['recall']):>8.3f}{base / p50:>14.1f}x"
                    )

            # Catching up: N rows inserted in one transaction; commit -> the mirror applied all.
            listener = await AnnMirror.connect(url)
            await listener.add_listener(CHANNEL, mirror.notified)
            applier = asyncio.create_task(mirror.apply_forever(reader))
            print(
                f"\n{'inserted':>9}{'pg insert + commit s':>21}{'mirror catch-up ms':>20}"
                f"{'notified ms':>12}{'fetch ms':>9}{'add ms':>8}"
            )
            next_row = args.rows
            rng = np.random.default_rng(5)
            for count in (int(x) for x in args.inserts.split(",")):
                fresh = centers[rng.integers(0, len(centers), count)] + rng.standard_normal(
                    (count, DIMS)
                ) * (1.35 / np.sqrt(DIMS))
                fresh = (fresh / np.linalg.norm(fresh, axis=1, keepdims=True)).astype(np.float32)
                target = mirror.applied + count
                mirror.changed.clear()
                mirror.fetch_s = mirror.add_s = 0.0
                insert_s, committed = await _insert(url, fresh, next_row, vault=0)
                while mirror.applied < target:
                    await mirror.changed.wait()
                    mirror.changed.clear()
                caught = time.perf_counter() - committed
                newest = mirror.search(fresh[-1], [scopes[0].physical_vault], k=1)
                if newest != [f"{next_row + count - 1:064x}"]:
                    raise RuntimeError("the mirror did not find the row it was told about")
                print(
                    f"{count:>9,}{insert_s:>21.2f}{caught * 1000:>20.1f}"
                    f"{(mirror.first_notified - committed) * 1000:>12.1f}"
                    f"{mirror.fetch_s * 1000:>9.1f}{mirror.add_s * 1000:>8.1f}",
                    flush=True,
                )
                next_row += count
            applier.cancel()
            await listener.close()
            await reader.close()
        finally:
            await postgres.drop(name)
            postgres.stop()
    print(
        "\npgvector = VectorIndex.search (auto: bits scan up to "
        f"{tuning.scan_max_rows:,} rows, else the HNSW walk with ef_search "
        f"{tuning.ef_search_for(args.rows)}); mirror = FAISS IndexHNSWFlat m=16 ef_construction=64, efSearch "
        f"{args.ef_search}, filtered by a bitmap of the caller's vaults, exact numpy scoring "
        "for small scopes; CPU per search = the client process + PostgreSQL's processes; "
        "queries alternate between the two paths; catch-up = from the inserting transaction's "
        "commit until the mirror applied every notified row"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--inserts", default="1,100,1000", help="batch sizes for the catch-up")
    parser.add_argument("--shared-buffers", default="1GB", help="PostgreSQL's buffer cache")
    parser.add_argument("--ef-search", type=int, default=128, help="the mirror's efSearch")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
