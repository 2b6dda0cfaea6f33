"""Save -> searchable with many clients, two running servers compared round by round.

What runs: for every target (a running ``memory-server serve --transport http``, its URL and an
API key with write access), N clients (the official ``mcp`` SDK over streamable HTTP, each its
own session) each save ``--saves`` random-noise 64 x 48 PNGs one after another with a unique
title; after each acknowledgement the client searches for the title every ``--poll`` seconds
until the asset is among the results. The delay is from the acknowledgement to the answer that
found it. A call the server answers ``busy`` (its admission limit,
``MEMORY_MAX_CONCURRENT_CALLS``) is sent again 0.1 s later, as a client would. Targets take turns round by round, the order alternating (ABBA), so a busy machine
weighs on both alike. Prints p50/p95 per round and target, and over all rounds.

Example (two servers started by hand, each with its own MEMORY_DATA_DIR):

    nice -n 19 uv run --frozen python benchmarks/save_searchable.py --clients 16 \\
        --target before=http://127.0.0.1:18120/mcp=KEY_A --target after=http://127.0.0.1:18121/mcp=KEY_B

This is the method of docs/performance.md#save-to-searchable (which ran 4 clients).
"""

from __future__ import annotations

import argparse
import base64
import os
import statistics
import time
import uuid
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2
from load_clients import unique_png
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

GIVE_UP_SECONDS = 120.0  # a save not found by then counts as this long
BUSY_RETRY_SECONDS = 0.1


@dataclass(frozen=True)
class Target:
    """A server to measure: a name for the table, its MCP URL and an API key."""

    name: str
    url: str
    key: str


async def _call(session: ClientSession, tool: str, arguments: dict[str, object]) -> Any:
    """One tool call; ``busy`` (the server's admission limit) is retried, as a client would."""
    while True:
        result = await session.call_tool(tool, arguments)
        said = getattr(result.content[0], "text", "") if result.content else ""
        if not (result.is_error and said.startswith("busy")):
            return result
        await anyio.sleep(BUSY_RETRY_SECONDS)


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _client(target: Target, seed: int, saves: int, poll: float, out: list[float]) -> None:
    async with (
        httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {target.key}"}, timeout=httpx2.Timeout(120)
        ) as http,
        streamable_http_client(target.url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        for n in range(saves):
            title = f"searchable {uuid.uuid4().hex[:12]}"
            image = base64.b64encode(unique_png(seed * 1000 + n)).decode()
            saved = await _call(session, "image_asset_save", {"imageBase64": image, "title": title})
            if saved.is_error:
                raise RuntimeError(f"save failed: {saved.content}")
            asset = saved.structured_content["assetId"]
            acknowledged = time.monotonic()
            while True:
                found = await _call(session, "image_asset_search", {"query": title, "limit": 10})
                results = [] if found.is_error else found.structured_content["results"]
                if any(hit["assetId"] == asset for hit in results):
                    out.append(time.monotonic() - acknowledged)
                    break
                if time.monotonic() - acknowledged > GIVE_UP_SECONDS:
                    out.append(GIVE_UP_SECONDS)
                    break
                await anyio.sleep(poll)


async def _phase(target: Target, clients: int, saves: int, poll: float, seed: int) -> list[float]:
    delays: list[float] = []
    async with anyio.create_task_group() as group:
        for client in range(clients):
            group.start_soon(_client, target, seed + client, saves, poll, delays)
    return delays


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", action="append", required=True, help="NAME=URL=KEY")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--saves", type=int, default=5, help="per client and round")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--poll", type=float, default=0.05)
    args = parser.parse_args()
    targets = [Target(*spec.split("=", 2)) for spec in args.target]
    every: dict[str, list[float]] = {t.name: [] for t in targets}
    seed = int.from_bytes(os.urandom(3), "big") * 1000
    print(f"{args.clients} clients x {args.saves} saves per round; search every {args.poll} s")
    for round_ in range(args.rounds):
        order = targets if round_ % 2 == 0 else list(reversed(targets))
        for target in order:
            seed += args.clients
            started = time.monotonic()
            delays = await _phase(target, args.clients, args.saves, args.poll, seed)
            every[target.name] += delays
            print(
                f"round {round_ + 1} {target.name:>8}: p50 {statistics.median(delays):.2f} s, "
                f"p95 {_p(delays, 0.95):.2f} s, max {max(delays):.2f} s "
                f"({len(delays)} saves in {time.monotonic() - started:.0f} s, "
                f"load {os.getloadavg()[0]:.1f})"
            )
    for name, delays in every.items():
        print(
            f"all rounds {name:>8}: p50 {statistics.median(delays):.2f} s, "
            f"p95 {_p(delays, 0.95):.2f} s ({len(delays)} saves)"
        )


if __name__ == "__main__":
    anyio.run(main)
