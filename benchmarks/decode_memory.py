"""Server memory under a burst of concurrent saves of maximum-size images.

Starts a real ``memory-server serve --transport http`` (embedded PostgreSQL, local objects, the
in-process embedding worker) in a temporary data directory, saves one small image to warm it
up, and takes its resident memory (RSS) as the baseline. Then 24 clients each save a distinct
image of exactly ``ASSET_MAX_DECODED_PIXELS`` (8,000 x 5,000, about 250 KB: flat colour
blocks, as a screenshot or a scan compresses) by base64 over MCP, all at once. The server
process's RSS is sampled every 10 ms and its kernel high-water mark (VmHWM, reset at the
baseline) read at the end; "after" is its RSS once every image is embedded and the server has
been idle for a few seconds.

Targets (issue 13): peak at most 1 GiB above the baseline; after the burst, within 200 MiB of
it. The PostgreSQL processes are not counted: only the process that decodes.

``--no-worker`` runs the server without its embedding worker, to tell the decodes' share of
the memory from the worker's (which decodes the 24 previews after the burst).

Usage: python benchmarks/decode_memory.py [--saves 24] [--format jpeg|png|gif] [--no-worker]
       [--port N]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pyvips
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport

SERVER = [sys.executable, "-m", "memory_server"]
WIDTH, HEIGHT = 8000, 5000  # = ASSET_MAX_DECODED_PIXELS, the default pixel limit
OWNER = "bench@example.com"
MIB = 1024 * 1024


def max_size_image(seed: int, kind: str) -> bytes:
    """A distinct 40 MP picture of flat 1,000-px blocks (it compresses to ~250 KB as JPEG)."""
    xyz = pyvips.Image.xyz(WIDTH, HEIGHT)
    red = ((xyz[0] // 1000) * 30 + seed * 7) % 256
    green = ((xyz[1] // 1000) * 40 + seed * 3) % 256
    blue = (xyz[0] * 0 + 90 + seed) % 256
    image = red.bandjoin([green, blue]).cast("uchar").copy(interpretation="srgb")
    if kind == "jpeg":
        return image.jpegsave_buffer(Q=75, optimize_coding=True)
    if kind == "png":
        return image.pngsave_buffer(compression=9)
    return image.gifsave_buffer()


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/{pid}/status")


class RssSampler:
    """The highest RSS of one process, sampled every 10 ms in a thread."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_kib = max(self.peak_kib, _status_kib(self.pid, "VmRSS"))
            self._stop.wait(0.01)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [*SERVER, *args], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"memory-server {' '.join(args)} failed: {done.stderr[-2000:]}")
    return done.stdout


@contextlib.contextmanager
def running_server(
    data_dir: Path, port: int, *, worker: bool
) -> Generator[tuple[str, int, dict[str, str]]]:
    """A memory server on 127.0.0.1:``port`` with its own data directory; stopped afterwards."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASSET_", "MEMORY_", "JINA_"))}
    env.update(MEMORY_DATA_DIR=str(data_dir), MEMORY_LOG_FORMAT="json", MEMORY_LOG_LEVEL="warning")
    with (data_dir.parent / "server.log").open("w") as log:
        serve = ["serve", "--transport", "http", "--host", "127.0.0.1", "--port", str(port)]
        process = subprocess.Popen(
            [*SERVER, *serve, *([] if worker else ["--no-worker"])],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 180
            while True:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the server did not start; see its log")
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                        break
                time.sleep(0.2)
            yield url, process.pid, env
        finally:
            process.terminate()
            process.wait(timeout=60)


async def _save(client: Client[Any], data: bytes, title: str) -> str:
    result = await client.call_tool(
        "image_asset_save", {"imageBase64": base64.b64encode(data).decode(), "title": title}
    )
    return str(result.structured_content["assetId"])  # type: ignore[index]


async def _wait_embedded(client: Client[Any], assets: list[str]) -> None:
    for asset in assets:
        while True:
            got = await client.call_tool("image_asset_get", {"assetId": asset})
            if got.structured_content["embeddingStatus"] == "ready":  # type: ignore[index]
                break
            await anyio.sleep(0.5)


def _clear_high_water(pid: int) -> bool:
    """Reset the process's VmHWM to its current RSS (Linux, same user); False if refused."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


async def measure(
    url: str, pid: int, key: str, images: list[bytes], *, worker: bool
) -> dict[str, float]:
    transport = StreamableHttpTransport(url + "/mcp", headers={"Authorization": f"Bearer {key}"})
    async with Client(transport, timeout=600) as client:
        warm = pyvips.Image.xyz(64, 48)[0].cast("uchar").pngsave_buffer()
        warmed = await _save(client, warm, "warm-up")
        if worker:
            with anyio.fail_after(120):
                await _wait_embedded(client, [warmed])
        await anyio.sleep(3)
        baseline = _status_kib(pid, "VmRSS")
        hwm_reset = _clear_high_water(pid)
        assets: list[str] = []

        async def one(index: int, data: bytes) -> None:
            assets.append(await _save(client, data, f"burst {index}"))

        with RssSampler(pid) as sampler:
            started = time.perf_counter()
            async with anyio.create_task_group() as group:
                for index, data in enumerate(images):
                    group.start_soon(one, index, data)
            burst_seconds = time.perf_counter() - started
            if worker:
                with anyio.fail_after(600):
                    await _wait_embedded(client, assets)
            await anyio.sleep(5)
        after = _status_kib(pid, "VmRSS")
        peak = max(sampler.peak_kib, _status_kib(pid, "VmHWM") if hwm_reset else 0)
    return {
        "baseline": baseline / 1024,
        "peak_above": (peak - baseline) / 1024,
        "after_above": (after - baseline) / 1024,
        "burst_seconds": burst_seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--saves", type=int, default=24, help="concurrent saves in the burst")
    parser.add_argument("--format", choices=["jpeg", "png", "gif"], default="jpeg")
    parser.add_argument("--no-worker", action="store_true", help="serve without the worker")
    parser.add_argument("--port", type=int, default=0, help="server port (default: a free one)")
    args = parser.parse_args()
    images = [max_size_image(seed, args.format) for seed in range(args.saves)]
    average_kib = sum(map(len, images)) / len(images) / 1024
    with tempfile.TemporaryDirectory(prefix="decode-bench-") as tmp:
        data_dir = Path(tmp) / "data"
        port = args.port or _free_port()
        worker = not args.no_worker
        with running_server(data_dir, port, worker=worker) as (url, pid, env):
            _cli(env, "admin", "create-identity", "--owner", OWNER)
            key = _cli(env, "admin", "create-key", "--owner", OWNER, "--scopes", "read,write")
            key = key.strip().splitlines()[-1]
            figures = anyio.run(lambda: measure(url, pid, key, images, worker=worker))
    print(
        f"{args.saves} concurrent saves of {WIDTH}x{HEIGHT} {args.format.upper()} images "
        f"(~{average_kib:.0f} KiB each) against one server process"
        f"{'' if worker else ' without its embedding worker'}; RSS of that process"
    )
    print(f"baseline RSS            {figures['baseline']:8.0f} MiB")
    print(
        f"peak above baseline     {figures['peak_above']:8.0f} MiB  (target <= 1024 MiB)"
        f"{'' if figures['peak_above'] <= 1024 else '  MISSED'}"
    )
    print(
        f"after the burst, above  {figures['after_above']:8.0f} MiB  (target <= 200 MiB)"
        f"{'' if figures['after_above'] <= 200 else '  MISSED'}"
    )
    print(f"burst wall time         {figures['burst_seconds']:8.1f} s")


if __name__ == "__main__":
    main()
