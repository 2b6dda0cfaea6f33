"""One client process of the load benchmark (``load.py``): closed-loop MCP sessions over HTTP.

``load.py`` starts it as ``python load_clients.py SPEC`` (SPEC is JSON, see ``ClientSpec``). It
opens its sessions (the official ``mcp`` SDK: ``streamable_http_client`` + ``ClientSession``,
each session its own HTTP client), prints ``ready``, and waits for one line on stdin, the go
signal: ``{"start": t, "end": t}`` (epoch seconds, the measured window). From then on every
session sends its next call as soon as the last one answered, until ``end``; calls before
``start`` are the warm-up. Then it prints one JSON line of results and exits.

Each call is bounded: the SDK's read timeout is ``call_timeout`` (answered ``timeout``), with an
outer deadline a little later in case the transport itself hangs. A call is recorded as
``[operation, sent, answered, error or null, saved asset id or null, saved title or null]``
(epoch seconds; every saved title ends with a token no other save has, so a search for it
finds that image); the
error is the tool error's code (the text before ``:`` of ``code: message``), ``timeout``, or
the transport's failure (``jsonrpc <code>: <message>`` or the exception's type).
"""

from __future__ import annotations

import base64
import json
import random
import re
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import httpx2
import numpy as np
import pyvips
from bulk_library import WORDS, library_asset_id
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

# The call mix, in percent (stated in load.py's docstring and output).
MIX = (
    ("search_text", 40),
    ("search_image", 15),
    ("get", 20),
    ("list", 17),
    ("save", 8),
)
OPERATIONS = [name for name, _ in MIX]
_CODE = re.compile(r"^([a-z_]+): ")
# Failures after which the session cannot carry another call: open a new one.
_SESSION_LOST = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream)


class SessionLost(Exception):
    """A call failed in a way that leaves its session unusable (the call is already recorded)."""


def _already_recorded(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return all(_already_recorded(inner) for inner in exc.exceptions)
    return isinstance(exc, SessionLost)


@dataclass(frozen=True)
class ClientSpec:
    """What one client process does (given by load.py as JSON)."""

    url: str
    key: str
    sessions: int
    first_session: int  # global index of this process's first session (seeds, image uniqueness)
    phase: int  # the N of this phase, so saved images differ between phases
    library_size: int
    call_timeout: float
    mix: tuple[tuple[str, int], ...] = MIX  # (operation, percent); load.py's --mix


def parse_mix(text: str) -> tuple[tuple[str, int], ...]:
    """``"search_text=40,save=8"`` as ``(("search_text", 40), ("save", 8))``; ValueError if bad."""
    mix: list[tuple[str, int]] = []
    for item in text.split(","):
        name, _, weight = item.partition("=")
        if name.strip() not in OPERATIONS or not weight.strip().isdigit():
            raise ValueError(f"{item!r}: expected OPERATION=PERCENT, OPERATION one of {OPERATIONS}")
        mix.append((name.strip(), int(weight)))
    if not mix or sum(weight for _, weight in mix) <= 0:
        raise ValueError("the mix needs at least one operation with a positive weight")
    return tuple(mix)


def _png(pixels: np.ndarray) -> bytes:
    height, width, bands = pixels.shape
    image = pyvips.Image.new_from_memory(pixels.tobytes(), width, height, bands, "uchar")
    return image.copy(interpretation="srgb").pngsave_buffer()


def unique_png(seed: int) -> bytes:
    """A 64x48 PNG of noise no other seed makes (so no save is deduplicated)."""
    return _png(np.random.default_rng(seed).integers(0, 256, (48, 64, 3), dtype=np.uint8))


def unique_token(seed: int) -> str:
    """A word no library title and no other save's title holds (letters and digits)."""
    return f"zq{seed:x}"


def error_key(exc: BaseException) -> str:
    """The error column for a call that raised instead of answering."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]  # a task group's failure: name what failed first
    if isinstance(exc, TimeoutError):
        return "timeout"
    if isinstance(exc, MCPError):
        if exc.code == REQUEST_TIMEOUT and "timed out" in exc.message:
            return "timeout"
        return f"jsonrpc {exc.code}: {exc.message.split(':')[0][:60]}"
    return type(exc).__name__


def tool_error_key(result: Any) -> str:
    """The stable code of a tool error (``code: message``)."""
    text = "".join(getattr(block, "text", "") for block in result.content)
    found = _CODE.match(text)
    return found.group(1) if found else f"unparsed tool error: {text[:60]}"


class Caller:
    """One session's closed loop: pick an operation, call, record, repeat."""

    def __init__(self, spec: ClientSpec, index: int, query_images: list[str]) -> None:
        self.spec = spec
        self.index = index
        self.rng = random.Random(index * 7919 + spec.phase)
        self.query_images = query_images
        self.saves = 0
        self.records: list[list[Any]] = []

    def arguments(self, operation: str) -> dict[str, Any]:
        rng = self.rng
        if operation == "search_text":
            return {"query": " ".join(rng.sample(WORDS, 2)), "limit": 10}
        if operation == "search_image":
            return {"imageBase64": rng.choice(self.query_images), "limit": 10}
        if operation == "get":
            return {"assetId": library_asset_id(rng.randrange(self.spec.library_size))}
        if operation == "list":
            before = datetime.now(UTC) - timedelta(seconds=rng.randrange(self.spec.library_size))
            return {"limit": 25, "createdBefore": before.isoformat()}
        self.saves += 1
        seed = (self.spec.phase * 100_000 + self.index) * 100_000 + self.saves
        return {
            "imageBase64": base64.b64encode(unique_png(seed)).decode(),
            "title": " ".join([*rng.sample(WORDS, 3), unique_token(seed)]),
            "description": " ".join(rng.sample(WORDS, 6)),
        }

    async def call(self, session: ClientSession, operation: str) -> None:
        tool = "image_asset_" + operation.split("_")[0]
        arguments = self.arguments(operation)
        sent = time.time()
        error: str | None = None
        saved: str | None = None
        try:
            with anyio.fail_after(self.spec.call_timeout + 5):
                result = await session.call_tool(
                    tool, arguments, read_timeout_seconds=self.spec.call_timeout
                )
            if result.is_error:
                error = tool_error_key(result)
            elif operation == "save":
                saved = str(result.structured_content["assetId"])
        except Exception as exc:
            error = error_key(exc)
            lost = isinstance(exc, _SESSION_LOST) or (
                isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED
            )
            self.records.append([operation, sent, time.time(), error, None, None])
            if lost:
                raise SessionLost from exc
            return
        title = arguments["title"] if saved else None
        self.records.append([operation, sent, time.time(), error, saved, title])

    async def run(self, connected: anyio.Event, go: anyio.Event, window: dict[str, float]) -> None:
        operations = [name for name, _ in self.spec.mix]
        weights = [weight for _, weight in self.spec.mix]
        first = True
        while first or time.time() < window["end"]:
            try:
                async with (
                    httpx2.AsyncClient(
                        headers={"Authorization": f"Bearer {self.spec.key}"},
                        timeout=httpx2.Timeout(self.spec.call_timeout + 5),
                    ) as http,
                    streamable_http_client(self.spec.url, http_client=http) as (read, write),
                    ClientSession(read, write) as session,
                ):
                    with anyio.fail_after(self.spec.call_timeout + 5):
                        await session.initialize()
                    if first:
                        first = False
                        connected.set()
                        await go.wait()
                    while time.time() < window["end"]:
                        operation = self.rng.choices(operations, weights)[0]
                        await self.call(session, operation)
            except Exception as exc:
                if first:
                    raise
                if not _already_recorded(exc):  # opening or closing the session failed
                    now = time.time()
                    self.records.append(["session", now, now, error_key(exc), None, None])
                await anyio.sleep(0.5)


async def verify(
    url: str, key: str, saves: dict[str, str], *, sessions: int = 4, call_timeout: float = 20.0
) -> tuple[list[str], list[str]]:
    """Every acknowledged save read back and searched for by its unique title, over MCP.

    ``saves`` maps asset ids to titles. Returns the ids ``image_asset_get`` did not answer,
    and the ids a search for their title (limit 10) did not return. ``sessions`` MCP
    sessions share the work, each call bounded by ``call_timeout``.
    """
    pending = list(saves.items())
    unreadable: list[str] = []
    unsearchable: list[str] = []

    async def one_session() -> None:
        async with (
            httpx2.AsyncClient(
                headers={"Authorization": f"Bearer {key}"},
                timeout=httpx2.Timeout(call_timeout + 5),
            ) as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            while pending:
                asset_id, title = pending.pop()
                got = await session.call_tool(
                    "image_asset_get", {"assetId": asset_id}, read_timeout_seconds=call_timeout
                )
                if got.is_error:
                    unreadable.append(asset_id)
                found = await session.call_tool(
                    "image_asset_search",
                    {"query": title, "limit": 10},
                    read_timeout_seconds=call_timeout,
                )
                results = [] if found.is_error else found.structured_content["results"]
                if asset_id not in {hit["assetId"] for hit in results}:
                    unsearchable.append(asset_id)

    async with anyio.create_task_group() as group:
        for _ in range(max(1, min(sessions, len(pending)))):
            group.start_soon(one_session)
    return unreadable, unsearchable


async def run(spec: ClientSpec) -> None:
    query_images = [
        base64.b64encode(unique_png(10**12 + i)).decode() for i in range(8)
    ]  # the same few query images in every process
    callers = [Caller(spec, spec.first_session + i, query_images) for i in range(spec.sessions)]
    window = {"start": 0.0, "end": float("inf")}
    go = anyio.Event()
    connected = [anyio.Event() for _ in callers]
    cpu = {"start": 0.0, "end": 0.0}

    async def clock() -> None:
        await go.wait()
        await anyio.sleep(max(0.0, window["start"] - time.time()))
        cpu["start"] = time.process_time()
        await anyio.sleep(max(0.0, window["end"] - time.time()))
        cpu["end"] = time.process_time()

    async with anyio.create_task_group() as group:
        for caller, event in zip(callers, connected, strict=True):
            group.start_soon(caller.run, event, go, window)
        with anyio.fail_after(120):
            for event in connected:
                await event.wait()
        print("ready", flush=True)
        line = await anyio.to_thread.run_sync(sys.stdin.readline)
        window.update(json.loads(line))
        group.start_soon(clock)
        go.set()
    records = [record for caller in callers for record in caller.records]
    print(json.dumps({"records": records, "cpu_seconds": cpu["end"] - cpu["start"]}), flush=True)


def main() -> None:
    fields = json.loads(sys.argv[1])
    fields["mix"] = tuple((name, int(weight)) for name, weight in fields.get("mix", MIX))
    spec = ClientSpec(**fields)
    anyio.run(run, spec)


if __name__ == "__main__":
    main()
