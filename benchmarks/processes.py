"""What several server processes buy: concurrent MCP text searches, 1 vs N processes.

Starts `memory-server serve --transport http --processes N` (N = 1 is the plain one-process
server) on the embedded default in a temporary data directory, saves a small library through
the tools, waits until the worker has embedded it, then runs C MCP clients, each sending its
next `image_asset_search` when the last one answered, for a few seconds; repeated ROUNDS times.
Prints per configuration the median throughput and p50/p95 latency with their spread over the
rounds, how the clients' connections spread over the server processes in each round (sampled
halfway through it), and the CPU seconds per second of wall time that the
servers, PostgreSQL and the clients used. Loopback only; it stops by itself. No assertion: the
numbers depend on the machine and on what else runs on it.

    python benchmarks/processes.py [--processes 1,2] [--clients 8] [--seconds 6] [--rounds 3]
"""

from __future__ import annotations

import argparse
import base64
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx
import psutil
import pyvips
from fastmcp import Client

SERVER = [sys.executable, "-m", "memory_server"]
QUERIES = ["harbour", "mountain", "forest", "city", "river", "desert", "garden", "bridge"]
LIBRARY = 120


def _png(seed: int) -> bytes:
    xyz = pyvips.Image.xyz(64, 48)
    red = ((xyz[0] * (seed % 13 + 2) + xyz[1]) % 256).cast("uchar")
    green = ((xyz[1] * (seed % 7 + 3) + seed) % 256).cast("uchar")
    return red.bandjoin([green, red]).copy(interpretation="srgb").pngsave_buffer()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env(data: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASSET_", "MEMORY_", "JINA_"))}
    env.update(MEMORY_DATA_DIR=str(data), MEMORY_LOG_FORMAT="json", MEMORY_LOG_LEVEL="warning")
    return env


def _key(env: dict[str, str]) -> str:
    owner = "bench@example.com"
    for args in (
        ["admin", "create-identity", "--owner", owner, "--exist-ok"],
        ["admin", "create-key", "--owner", owner, "--scopes", "read,write"],
    ):
        done = subprocess.run([*SERVER, *args], env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip().splitlines()[-1]


@dataclass
class Round:
    """One timed round: completed searches, their latencies, and errors."""

    seconds: float
    latencies: list[float]
    errors: int

    @property
    def rate(self) -> float:
        """Searches per second."""
        return len(self.latencies) / self.seconds


async def _client_loop(url: str, key: str, until: float, index: int, out: Round) -> None:
    async with Client(url + "/mcp", auth=key) as client:
        n = index
        while time.monotonic() < until:
            n += 1
            began = time.perf_counter()
            result = await client.call_tool(
                "image_asset_search",
                {"query": f"{QUERIES[n % len(QUERIES)]} photo {n % 17}"},
                raise_on_error=False,
            )
            if result.is_error:
                out.errors += 1
            else:
                out.latencies.append(time.perf_counter() - began)


async def _round(url: str, key: str, clients: int, seconds: float) -> Round:
    out = Round(seconds=seconds, latencies=[], errors=0)
    until = time.monotonic() + seconds
    async with anyio.create_task_group() as group:
        for index in range(clients):
            group.start_soon(_client_loop, url, key, until, index, out)
    return out


async def _fill_library(url: str, key: str) -> None:
    async with Client(url + "/mcp", auth=key) as client:
        assets = []
        for seed in range(LIBRARY):
            saved = await client.call_tool(
                "image_asset_save",
                {
                    "imageBase64": base64.b64encode(_png(seed)).decode(),
                    "title": f"{QUERIES[seed % len(QUERIES)]} photo {seed}",
                    "tags": [QUERIES[(seed + 3) % len(QUERIES)]],
                },
            )
            assets.append(saved.structured_content["assetId"])
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            last = await client.call_tool("image_asset_get", {"assetId": assets[-1]})
            if last.structured_content["embeddingStatus"] == "ready":
                return
            await anyio.sleep(0.5)
        raise RuntimeError("the library was not embedded within 120 s")


def _cpu(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
            total += times.user + times.system
        except psutil.Error:
            continue
    return total


def _postgres_cpu(data: Path) -> float:
    """CPU seconds of the embedded PostgreSQL: postmaster, live backends and reaped ones."""
    try:
        postmaster = psutil.Process(
            int((data / "postgres" / "postmaster.pid").read_text().split()[0])
        )
        own = postmaster.cpu_times()
        live = _cpu([p.pid for p in postmaster.children(recursive=True)])
    except (OSError, ValueError, psutil.Error):
        return 0.0
    return own.user + own.system + own.children_user + own.children_system + live


def _connections_per_server(parent: psutil.Process, port: int) -> list[int]:
    counts: list[int] = []
    servers = [parent] if parent.cmdline().count("--processes") == 0 else parent.children()
    for child in servers:
        if "worker" in child.cmdline():
            continue
        established = [
            c
            for c in child.net_connections(kind="tcp")
            if c.status == psutil.CONN_ESTABLISHED and c.laddr and c.laddr.port == port
        ]
        counts.append(len(established))
    return sorted(counts, reverse=True)


@contextmanager
def _server(env: dict[str, str], port: int, processes: int) -> Iterator[subprocess.Popen[bytes]]:
    url = f"http://127.0.0.1:{port}"
    command = [*SERVER, "serve", "--transport", "http", "--port", str(port)]
    if processes > 1:
        command += ["--processes", str(processes)]
    server = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(url + "/healthz/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError("the server did not start")
            time.sleep(0.3)
        yield server
    finally:
        server.terminate()
        server.wait(timeout=60)


def _measure(processes: int, clients: int, seconds: float, rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="procs-bench-") as tmp:
        data = Path(tmp) / "data"
        env = _env(data)
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        with _server(env, port, processes) as server:
            key = _key(env)
            anyio.run(_fill_library, url, key)
            anyio.run(_round, url, key, clients, 1.0)  # warm-up: connections, caches
            parent = psutil.Process(server.pid)
            server_pids = [server.pid, *(c.pid for c in parent.children(recursive=True))]
            results: list[Round] = []
            spreads: list[list[int]] = []
            cpu_before = (_cpu(server_pids), _postgres_cpu(data), _own_cpu())
            for _ in range(rounds):
                result, spread = anyio.run(
                    _observed_round, url, key, clients, seconds, parent, port
                )
                results.append(result)
                spreads.append(spread)
            cpu_after = (_cpu(server_pids), _postgres_cpu(data), _own_cpu())
    _report(processes, clients, results, spreads, cpu_before, cpu_after, seconds * rounds)


async def _observed_round(
    url: str, key: str, clients: int, seconds: float, parent: psutil.Process, port: int
) -> tuple[Round, list[int]]:
    """A round, and halfway through it how the clients' connections spread over the servers."""
    done: list[Round] = []

    async def run() -> None:
        done.append(await _round(url, key, clients, seconds))

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        await anyio.sleep(seconds / 2)
        spread = _connections_per_server(parent, port)
    return done[0], spread


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _report(
    processes: int,
    clients: int,
    results: list[Round],
    spreads: list[list[int]],
    before: tuple[float, float, float],
    after: tuple[float, float, float],
    wall: float,
) -> None:
    rates = [r.rate for r in results]
    p50 = [statistics.median(r.latencies) * 1000 for r in results if r.latencies]
    p95 = [statistics.quantiles(r.latencies, n=20)[18] * 1000 for r in results if r.latencies]
    errors = sum(r.errors for r in results)
    servers, postgres, own = (a - b for a, b in zip(after, before, strict=True))
    print(
        f"processes {processes}  clients {clients}  "
        f"searches/s {statistics.median(rates):6.1f} ({min(rates):.1f}-{max(rates):.1f})  "
        f"p50 {statistics.median(p50):5.0f} ms ({min(p50):.0f}-{max(p50):.0f})  "
        f"p95 {statistics.median(p95):5.0f} ms ({min(p95):.0f}-{max(p95):.0f})  "
        f"errors {errors}  connections per server process by round {spreads}  "
        f"CPU s/s: servers {servers / wall:.2f}, PostgreSQL {postgres / wall:.2f}, "
        f"clients {own / wall:.2f}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", default="1,2", help="comma-separated (default 1,2)")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"{psutil.cpu_count()} CPUs; {LIBRARY} images; text searches", flush=True)
    for processes in (int(n) for n in args.processes.split(",")):
        _measure(processes, args.clients, args.seconds, args.rounds)


if __name__ == "__main__":
    main()
