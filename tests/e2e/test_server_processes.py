"""`memory-server serve --transport http --processes 2`, for real: one port, two servers.

Which child accepts a connection on the shared socket is the kernel's choice. To make a request
land on a chosen child, the test stops the other one (SIGSTOP): a stopped process accepts
nothing, so its sibling takes the connection. The honest observable that a child served is the
TCP connection itself: the child's pid owns the established socket of the client's request.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import psutil
import pytest
from fastmcp import Client

from .test_processes import SERVER, _cli, _env, _free_port, _new_key, _png

pytestmark = pytest.mark.slow

SERVE = [*SERVER, "serve", "--transport", "http"]
START_SECONDS = 90.0


class Processes:
    """A running ``serve --processes N`` parent, its port and its children by role."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.process = process
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log = log

    def children(self) -> dict[int, str]:
        """Live children: pid → ``server`` or ``worker``."""
        found: dict[int, str] = {}
        for child in psutil.Process(self.process.pid).children():
            try:
                if child.status() == psutil.STATUS_ZOMBIE:
                    continue
                found[child.pid] = "worker" if "worker" in child.cmdline() else "server"
            except psutil.NoSuchProcess:
                continue
        return found

    def servers(self) -> list[int]:
        """The pids of the server children."""
        return sorted(pid for pid, role in self.children().items() if role == "server")

    def owners_of_connections(self) -> set[int]:
        """Server children holding an established connection on the shared port."""
        owners: set[int] = set()
        for pid in self.servers():
            try:
                connections = psutil.Process(pid).net_connections(kind="tcp")
            except psutil.NoSuchProcess:
                continue
            if any(
                c.status == psutil.CONN_ESTABLISHED and c.laddr and c.laddr.port == self.port
                for c in connections
            ):
                owners.add(pid)
        return owners


def _wait_healthy(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"server exited with {process.returncode}: {log.read_text()[-3000:]}")
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    pytest.fail(f"the server did not answer within {START_SECONDS} s")


@contextmanager
def serve_processes(env: dict[str, str], *args: str) -> Iterator[Processes]:
    """``serve --transport http --processes 2 [args]``, up with both servers; stopped after."""
    port = _free_port()
    log = Path(env["MEMORY_DATA_DIR"]).parent / f"processes-{port}.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [*SERVE, "--port", str(port), "--processes", "2", *args],
            env=env,
            stdout=sink,
            stderr=sink,
        )
    running = Processes(process, port, log)
    seen: set[int] = set()
    try:
        _wait_healthy(running.url, process, log)
        deadline = time.monotonic() + START_SECONDS
        while log.read_text().count('"server_process_ready"') < 2:
            assert time.monotonic() < deadline, "both server processes did not start"
            time.sleep(0.2)
        seen.update(running.children())
        yield running
    finally:
        if process.poll() is None:
            seen.update(running.children())
            process.terminate()
            process.wait(timeout=60)
        for pid in seen:  # a failed test leaves nothing behind either
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()


@contextmanager
def only(processes: Processes, pid: int) -> Iterator[None]:
    """Stop every other server child, so new connections can only be accepted by ``pid``."""
    others = [other for other in processes.servers() if other != pid]
    for other in others:
        os.kill(other, signal.SIGSTOP)
    try:
        yield
    finally:
        for other in others:
            os.kill(other, signal.SIGCONT)


@asynccontextmanager
async def mcp(processes: Processes, key: str) -> AsyncIterator[Client[Any]]:
    """An MCP client on a fresh connection, so it is accepted by whoever may accept now."""
    async with Client(processes.url + "/mcp", auth=key) as client:
        yield client


async def _ready_asset(client: Client[Any], asset: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        got = await client.call_tool("image_asset_get", {"assetId": asset, "includePreview": True})
        if got.structured_content["embeddingStatus"] == "ready":
            return dict(got.structured_content)
        await anyio.sleep(0.3)
    pytest.fail("the worker process did not embed the saved image within 60 s")


async def test_two_processes_share_one_port_one_database_and_one_worker(tmp_path: Path) -> None:
    env = _env(tmp_path)
    with serve_processes(env) as processes:
        first, second = processes.servers()
        assert list(processes.children().values()).count("worker") == 1
        key = _new_key(env, "procs@example.com")

        # Each child serves: with its sibling stopped, the connection is its own.
        for pid in (first, second):
            with only(processes, pid):
                async with mcp(processes, key) as client:
                    await client.call_tool("image_project_list", {})
                    assert processes.owners_of_connections() == {pid}

        # A save answered by the first is found by a search on the second, and embedded by
        # the worker process; the preview link the first signed is served by the second.
        with only(processes, first):
            async with mcp(processes, key) as client:
                saved = await client.call_tool(
                    "image_asset_save",
                    {
                        "imageBase64": base64.b64encode(_png(11)).decode(),
                        "title": "Lighthouse across processes",
                    },
                )
                asset = saved.structured_content["assetId"]
                state = await _ready_asset(client, asset)
        with only(processes, second):
            async with mcp(processes, key) as client:
                found = await client.call_tool("image_asset_search", {"query": "lighthouse"})
                assert [r["assetId"] for r in found.structured_content["results"]] == [asset]
                assert processes.owners_of_connections() == {second}
            preview = httpx.get(state["preview"]["url"], timeout=10)
            assert preview.status_code == 200 and preview.content[8:12] == b"WEBP"

        # An upload link issued by one child is used (PUT) on the other, completed on the first.
        data = _png(12)
        auth = {"Authorization": f"Bearer {key}"}
        with only(processes, first):
            ticket = httpx.post(
                processes.url + "/uploads",
                json={"contentType": "image/png", "contentLength": len(data)},
                headers=auth,
                timeout=30,
            ).json()
        with only(processes, second):
            put = httpx.put(ticket["url"], content=data, headers=ticket["headers"], timeout=30)
            assert put.status_code == 200, put.text
        with only(processes, first):
            done = httpx.post(ticket["completeUrl"], json={}, headers=auth, timeout=30)
            assert done.status_code == 200, done.text

        # A key revoked (by an admin command, a third process) is refused by both children.
        listed = _cli(env, "admin", "list-keys", "--owner", "procs@example.com")
        revoked = _cli(env, "admin", "revoke-key", listed.stdout.split("\t", 1)[0])
        assert revoked.returncode == 0, revoked.stderr
        for pid in (first, second):
            with only(processes, pid):
                refused = httpx.post(
                    processes.url + "/mcp",
                    json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                    headers={**auth, "Accept": "application/json, text/event-stream"},
                    timeout=10,
                )
                assert refused.status_code == 401
                assert refused.json()["error"]["data"]["code"] == "unauthenticated"


def _legacy_post(
    url: str, key: str, body: dict[str, Any], session: str | None = None
) -> httpx.Response:
    headers = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-06-18",
    }
    if session is not None:  # as a handshake client sends back what initialize gave it
        headers["Mcp-Session-Id"] = session
    # A new client each time: a new connection, accepted by whichever child may accept.
    with httpx.Client(timeout=30) as http:
        return http.post(url + "/mcp", json=body, headers=headers)


def _jsonrpc_result(response: httpx.Response) -> dict[str, Any]:
    if response.headers["content-type"].startswith("text/event-stream"):
        data = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
        return dict(json.loads(data[-1]))
    return dict(response.json())


def test_a_handshake_client_initialised_on_one_process_calls_tools_on_the_other(
    tmp_path: Path,
) -> None:
    env = _env(tmp_path)
    with serve_processes(env, "--no-worker") as processes:
        assert "worker" not in processes.children().values()
        first, second = processes.servers()
        key = _new_key(env, "legacy@example.com")
        with only(processes, first):
            opened = _legacy_post(
                processes.url,
                key,
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-06-18",
                        "capabilities": {},
                        "clientInfo": {"name": "legacy", "version": "1"},
                    },
                },
            )
            assert opened.status_code == 200, opened.text
            session = opened.headers.get("mcp-session-id")
        with only(processes, second):
            called = _legacy_post(
                processes.url,
                key,
                {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "tools/call",
                    "params": {"name": "image_project_list", "arguments": {}},
                },
                session,
            )
            assert called.status_code == 200, called.text
            result = _jsonrpc_result(called)["result"]
            assert result["structuredContent"] == {"projects": []}
        assert session is None  # no session: nothing for a proxy to be sticky about
        # No server-to-client stream either: there is no session for one to belong to.
        with httpx.Client(timeout=10) as http:
            stream = http.get(
                processes.url + "/mcp",
                headers={"Authorization": f"Bearer {key}", "Accept": "text/event-stream"},
            )
        assert stream.status_code == 405


def test_a_killed_child_is_replaced_and_sigterm_stops_everything(tmp_path: Path) -> None:
    env = _env(tmp_path)
    pgdata = Path(env["MEMORY_DATA_DIR"]) / "postgres"
    with serve_processes(env) as processes:
        before = processes.children()
        victim = processes.servers()[0]
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + START_SECONDS
        while len(processes.servers()) < 2 or victim in processes.servers():
            assert time.monotonic() < deadline, "the killed child was not replaced"
            time.sleep(0.2)
        assert processes.process.poll() is None
        replacement = (set(processes.servers()) - set(before)).pop()
        while processes.log.read_text().count('"server_process_ready"') < 3:
            assert time.monotonic() < deadline, "the replacement did not start serving"
            time.sleep(0.2)
        with only(processes, replacement):
            assert httpx.get(processes.url + "/healthz/ready", timeout=10).status_code == 200
        log = processes.log.read_text()
        assert '"child_process_died"' in log and f'"pid": {victim}' in log

        everyone = [processes.process.pid, *processes.children()]
        processes.process.send_signal(signal.SIGTERM)
        assert processes.process.wait(timeout=60) == 0
        assert not [pid for pid in everyone if psutil.pid_exists(pid)]
        assert not (pgdata / "postmaster.pid").exists()  # the last user released PostgreSQL


def test_a_killed_parent_takes_its_children_and_postgres_with_it(tmp_path: Path) -> None:
    env = _env(tmp_path)
    pgdata = Path(env["MEMORY_DATA_DIR"]) / "postgres"
    with serve_processes(env) as processes:
        children = list(processes.children())
        assert sorted(processes.children().values()) == ["server", "server", "worker"]
        os.kill(processes.process.pid, signal.SIGKILL)
        processes.process.wait(timeout=10)
        deadline = time.monotonic() + 30
        while [pid for pid in children if psutil.pid_exists(pid)]:
            assert time.monotonic() < deadline, "children outlived their parent"
            time.sleep(0.2)
        deadline = time.monotonic() + 30
        while (pgdata / "postmaster.pid").exists():
            assert time.monotonic() < deadline, "PostgreSQL outlived the processes using it"
            time.sleep(0.2)


def test_more_processes_than_the_database_accepts_are_refused_at_start(tmp_path: Path) -> None:
    env = _env(tmp_path)
    port = _free_port()
    refused = subprocess.run(
        [*SERVER, "serve", "--transport", "http", "--port", str(port), "--processes", "40"],
        env={**env, "MEMORY_LOG_FORMAT": "console"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2, refused.stderr
    assert "--processes 40: 40 server processes and 1 worker process" in refused.stderr
    assert "max_connections 100" in refused.stderr and "Traceback" not in refused.stderr
    assert "MCP over streamable HTTP" not in refused.stderr  # no banner for a server never up
    assert not (Path(env["MEMORY_DATA_DIR"]) / "postgres" / "postmaster.pid").exists()
    for argv, message in [
        (["--processes", "0"], "--processes: must be between 1 and 64"),
        (["--processes", "2", "--transport", "stdio"], "--processes: only with --transport http"),
    ]:
        wrong = subprocess.run(
            [*SERVER, "serve", "--transport", "http", "--port", str(port), *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert wrong.returncode == 2 and message in wrong.stderr
