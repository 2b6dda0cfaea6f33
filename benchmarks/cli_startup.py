"""How long an operator command takes against a running server's database, and what it imports.

Starts `memory-server serve --transport http --no-worker` on the embedded default in a
temporary data directory (so its PostgreSQL is running, as when an operator types a command
beside a running server), then runs, interleaved for ROUNDS rounds, each as a fresh process:

- the floor: `python -c "import sqlalchemy.ext.asyncio, asyncpg, pydantic_settings, structlog"`,
  what any command that reads settings, logs and speaks to PostgreSQL must import;
- `memory-server admin list-identities`, `admin create-identity --exist-ok`, `admin list-keys`.

Prints per command the median wall and CPU seconds (user + system) over the rounds, each as a
ratio to the floor of the same run, and how many modules the command imported. CPU seconds vary
less than wall seconds on a shared machine. No assertion: the numbers depend on the machine and
on what else runs on it (docs/performance.md#operator-commands has the figures).

    python benchmarks/cli_startup.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
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
from pathlib import Path

import httpx

SERVER = [sys.executable, "-m", "memory_server"]
FLOOR = [
    sys.executable,
    "-c",
    "import sqlalchemy.ext.asyncio, asyncpg, pydantic_settings, structlog",
]
# Runs the command as `memory-server` does and reports how many modules it imported.
COUNTED = (
    "import sys; from memory_server.cli import main; status = main(sys.argv[1:]); "
    "print(len(sys.modules), file=sys.stderr); sys.exit(status)"
)
COMMANDS = {
    "admin list-identities": ["admin", "list-identities"],
    "admin create-identity --exist-ok": [
        "admin",
        "create-identity",
        "--owner",
        "bench@example.com",
        "--exist-ok",
    ],
    "admin list-keys": ["admin", "list-keys", "--owner", "bench@example.com"],
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env(data: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASSET_", "MEMORY_", "JINA_"))}
    env.update(MEMORY_DATA_DIR=str(data), MEMORY_LOG_LEVEL="warning", ASSET_OCR="off")
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as an operator's shell: compiled modules cached
    return env


@contextmanager
def running_server(env: dict[str, str]) -> Iterator[None]:
    """A server on the data directory: its embedded PostgreSQL runs while we measure."""
    port = _free_port()
    process = subprocess.Popen(
        [*SERVER, "serve", "--transport", "http", "--port", str(port), "--no-worker"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 180  # a first start creates the database cluster
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz/ready").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if process.poll() is not None:
                raise SystemExit("the server exited before it was ready")
            time.sleep(0.2)
        else:
            raise SystemExit("the server was not ready within 180 s")
        yield
    finally:
        process.terminate()
        process.wait(timeout=60)


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Wall and CPU seconds of one process, and its stderr."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[-3:])} failed: {done.stderr[-400:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description="Operator command start-up beside a server.")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    rounds = parser.parse_args().rounds
    with tempfile.TemporaryDirectory(prefix="cli-startup-") as directory:
        env = _env(Path(directory) / "data")
        with running_server(env):
            subprocess.run(
                [*SERVER, *COMMANDS["admin create-identity --exist-ok"]],
                env=env,
                capture_output=True,
                check=True,
            )
            walls: dict[str, list[float]] = {name: [] for name in ["floor", *COMMANDS]}
            cpus: dict[str, list[float]] = {name: [] for name in walls}
            modules: dict[str, int] = {}
            for _ in range(rounds):
                wall, cpu, _err = timed(FLOOR, env)
                walls["floor"].append(wall)
                cpus["floor"].append(cpu)
                for name, argv in COMMANDS.items():
                    wall, cpu, err = timed([sys.executable, "-c", COUNTED, *argv], env)
                    walls[name].append(wall)
                    cpus[name].append(cpu)
                    modules[name] = int(err.strip().splitlines()[-1])
    floor_wall = statistics.median(walls["floor"])
    floor_cpu = statistics.median(cpus["floor"])
    print(f"{rounds} rounds, interleaved; medians; ratio to the floor of this run")
    print(f"{'command':36} {'wall s':>7} {'x floor':>8} {'cpu s':>6} {'x floor':>8} {'modules':>8}")
    for name in walls:
        wall, cpu = statistics.median(walls[name]), statistics.median(cpus[name])
        count = str(modules.get(name, ""))
        print(
            f"{name:36} {wall:7.2f} {wall / floor_wall:8.2f} {cpu:6.2f} "
            f"{cpu / floor_cpu:8.2f} {count:>8}"
        )
    print(json.dumps({name: statistics.median(walls[name]) for name in walls}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
