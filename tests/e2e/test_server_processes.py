"""`memory-server serve --transport http --processes 2`, for real: one port, two servers.

The parent accepts each connection and deals them to the children in turn
(``memory_tools.serving.handoff``). To send requests to a chosen child, the test opens
connections until the child's pid owns one: the established socket of the connection, seen
from the child's side, is the honest observable of who serves it. Requests go over that connection as plain HTTP/1.1 (h11); MCP calls are JSON-RPC POSTs.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import h11
import httpx
import psutil
import pytest

from memory_db.testing import copy_data_directory
from memory_tools.testing.keys import new_key as make_key

from .test_key_switches import OWNER, _key
from .test_processes import SERVER, _cli, _env, _free_port, _png

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
        """Live children: pid → ``server`` or ``worker`` (not the PostgreSQL watchdog)."""
        found: dict[int, str] = {}
        for child in psutil.Process(self.process.pid).children():
            try:
                if child.status() == psutil.STATUS_ZOMBIE:
                    continue
                command = child.cmdline()
                if any(part.endswith("postgres_watchdog.py") for part in command):
                    continue  # memory_db's watchdog of the parent's embedded PostgreSQL
                found[child.pid] = "worker" if "worker" in command else "server"
            except psutil.NoSuchProcess:
                continue
        return found

    def servers(self) -> list[int]:
        """The pids of the server children."""
        return sorted(pid for pid, role in self.children().items() if role == "server")

    def owner_of(self, client_port: int) -> int | None:
        """The server child that accepted the connection from ``client_port`` (within 5 s)."""
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            for pid in self.servers():
                try:
                    connections = psutil.Process(pid).net_connections(kind="tcp")
                except psutil.NoSuchProcess:
                    continue
                if any(
                    c.status == psutil.CONN_ESTABLISHED
                    and c.laddr
                    and c.laddr.port == self.port
                    and c.raddr
                    and c.raddr.port == client_port
                    for c in connections
                ):
                    return pid
            time.sleep(0.02)
        return None


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


class Pinned:
    """An HTTP/1.1 connection that the server child ``pid`` accepted, re-opened when idle.

    uvicorn closes a connection idle for 5 s; before a request after 3 s idle, a new connection
    to the same child is found.
    """

    def __init__(self, processes: Processes, pid: int) -> None:
        self.processes = processes
        self.pid = pid
        self.sock: socket.socket | None = None
        self.used = 0.0

    def _connect(self) -> None:
        self.close()
        for _attempt in range(64):
            sock = socket.create_connection(("127.0.0.1", self.processes.port), timeout=30)
            owner = self.processes.owner_of(sock.getsockname()[1])
            if owner == self.pid:
                self.sock, self.used = sock, time.monotonic()
                return
            sock.close()
        pytest.fail(f"no connection of 64 was accepted by child {self.pid}")

    def close(self) -> None:
        """Close the connection."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def request(
        self, method: str, target: str, *, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        """Send one request on this child's connection; ``(status, headers, body)``."""
        if self.sock is None or time.monotonic() - self.used > 3:
            self._connect()
        assert self.sock is not None
        assert self.processes.owner_of(self.sock.getsockname()[1]) == self.pid
        conn = h11.Connection(h11.CLIENT)
        fields = [("host", f"127.0.0.1:{self.processes.port}"), ("content-length", str(len(body)))]
        fields += [(k.lower(), v) for k, v in (headers or {}).items()]
        wire = conn.send(h11.Request(method=method, target=target, headers=fields))
        wire += conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage())
        self.sock.sendall(wire)
        status, got, content = 0, {}, b""
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(self.sock.recv(65536))
            elif isinstance(event, h11.Response):
                status = event.status_code
                got = {k.decode(): v.decode() for k, v in event.headers}
            elif isinstance(event, h11.Data):
                content += bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                break
        self.used = time.monotonic()
        return status, got, content

    def mcp(
        self, key: str, method: str, params: dict[str, Any], session: str | None = None
    ) -> tuple[int, dict[str, str], dict[str, Any]]:
        """A JSON-RPC request to ``/mcp`` as a handshake-era (2025-06-18) client sends it."""
        headers = {
            "authorization": f"Bearer {key}",
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
            "mcp-protocol-version": "2025-06-18",
        }
        if session is not None:  # as a handshake client sends back what initialize gave it
            headers["mcp-session-id"] = session
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        status, got, content = self.request("POST", "/mcp", body=body.encode(), headers=headers)
        text = content.decode()
        if got.get("content-type", "").startswith("text/event-stream"):
            text = [line[5:] for line in text.splitlines() if line.startswith("data:")][-1]
        return status, got, dict(json.loads(text))

    def tool(self, key: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Call a tool; its structured result (a tool error fails the test)."""
        status, _headers, reply = self.mcp(
            key, "tools/call", {"name": name, "arguments": arguments}
        )
        assert status == 200 and not reply["result"].get("isError"), reply
        return dict(reply["result"]["structuredContent"])

    def get_link(self, url: str) -> tuple[int, bytes]:
        """GET a signed link (an absolute URL of this port) on this child."""
        parts = urlsplit(url)
        assert parts.port == self.processes.port
        status, _headers, content = self.request("GET", f"{parts.path}?{parts.query}")
        return status, content


@contextmanager
def pinned(processes: Processes, pid: int) -> Iterator[Pinned]:
    """A connection served by the child ``pid``."""
    connection = Pinned(processes, pid)
    try:
        yield connection
    finally:
        connection.close()


def _ready_asset(connection: Pinned, key: str, asset: str) -> dict[str, Any]:
    # The tool's own wait, woken by the embedding's notification (20 s a call, under the
    # connection's 30 s socket timeout); three calls bound the worker's first embedding on a
    # loaded machine.
    wait = {"assetId": asset, "includePreview": True, "waitSeconds": 20}
    for _ in range(3):
        got = connection.tool(key, "image_asset_get", wait)
        if got["embeddingStatus"] == "ready":
            return got
    pytest.fail("the worker process did not embed the saved image within 60 s")


def _metric_values(text: str) -> dict[tuple[str, tuple[str, ...]], float]:
    """Samples summed by name and one label's (name, value), or ``()`` for all labels."""
    from prometheus_client.parser import text_string_to_metric_families

    totals: dict[tuple[str, tuple[str, ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            for label in [(), *sample.labels.items()]:
                key = (sample.name, tuple(label))
                totals[key] = totals.get(key, 0.0) + sample.value
    return totals


def _module_env(tmp_path_factory: pytest.TempPathFactory, migrated_pgdata: Path) -> dict[str, str]:
    """A server environment on a migrated data dir of its own, for one module-scoped server."""
    root = tmp_path_factory.mktemp("processes")
    (root / "data").mkdir(mode=0o700)
    copy_data_directory(migrated_pgdata, root / "data" / "postgres")
    return _env(root)


@pytest.fixture(scope="module")
def with_worker(
    tmp_path_factory: pytest.TempPathFactory, migrated_pgdata: Path
) -> Iterator[tuple[dict[str, str], Processes]]:
    """One ``serve --processes 2`` (two servers and a worker) for this module's tests.

    Starting it costs seconds of a loaded machine; its tests each use their own person, and
    the one that stops it (SIGTERM, ``test_a_killed_child_is_replaced_and_sigterm_stops_everything``)
    comes last of them in the file, before ``without_worker``'s server starts.
    """
    env = _module_env(tmp_path_factory, migrated_pgdata)
    with serve_processes(env) as processes:
        yield env, processes


@pytest.fixture(scope="module")
def without_worker(
    tmp_path_factory: pytest.TempPathFactory, migrated_pgdata: Path
) -> Iterator[tuple[dict[str, str], Processes]]:
    """One ``serve --processes 2 --no-worker`` for this module's tests, each with its own person."""
    env = _module_env(tmp_path_factory, migrated_pgdata)
    with serve_processes(env, "--no-worker") as processes:
        yield env, processes


def test_two_processes_share_one_port_one_database_and_one_worker(
    with_worker: tuple[dict[str, str], Processes],
) -> None:
    env, processes = with_worker
    first, second = processes.servers()
    assert list(processes.children().values()).count("worker") == 1
    key = make_key(env, "procs@example.com")
    # Connections opened at once are dealt evenly to both children. One shared socket gave
    # them all to the child that woke first; a SO_REUSEPORT socket each split 16 of them
    # 5/11, 6/10 or 7/9, and the clients of the fuller child waited longer for as long as
    # they kept their connections.
    burst = [socket.create_connection(("127.0.0.1", processes.port)) for _ in range(16)]
    try:
        owners = [processes.owner_of(sock.getsockname()[1]) for sock in burst]
    finally:
        for sock in burst:
            sock.close()
    assert sorted(Counter(owners).items()) == [(first, 8), (second, 8)], owners
    with pinned(processes, first) as one, pinned(processes, second) as other:
        # Each child serves MCP calls (the connection is the child's own).
        assert one.tool(key, "image_project_list", {}) == {"projects": []}
        assert other.tool(key, "image_project_list", {}) == {"projects": []}

        # A save answered by one child is found by a search on the other and embedded by
        # the worker process; the preview link the first signed is served by the second.
        saved = one.tool(
            key,
            "image_asset_save",
            {
                "imageBase64": base64.b64encode(_png(11)).decode(),
                "title": "Lighthouse across processes",
                "idempotencyKey": "procs-1",
            },
        )
        asset = saved["assetId"]
        state = _ready_asset(one, key, asset)
        found = other.tool(key, "image_asset_search", {"query": "lighthouse"})
        assert [r["assetId"] for r in found["results"]] == [asset]
        # /metrics on either child is the sum over all (prometheus-client's multiprocess
        # mode): the save was counted by one, the embedding by the worker, the search by
        # the other. A loopback-only server needs no key for it.
        status, _h, body = one.request("GET", "/metrics")
        assert status == 200
        scraped = _metric_values(body.decode())
        assert scraped[("memory_saves_total", ("outcome", "created"))] == 1
        assert scraped[("memory_assets_ready_total", ("source_kind", "upload"))] == 1
        assert scraped[("memory_searches_total", ("kind", "text"))] == 1
        assert scraped[("memory_embedding_queue_depth", ())] == 0
        assert asset not in body.decode() and "procs@example.com" not in body.decode()
        shared = Path(env["MEMORY_DATA_DIR"]) / "metrics" / f"port-{processes.port}"
        assert any(shared.glob("counter_*.db"))  # this run's fresh directory
        status, preview = other.get_link(state["preview"]["url"])
        assert status == 200 and preview[8:12] == b"WEBP"

        # An upload started on one child is sent (PUT) to the other, completed on the first.
        data = _png(12)
        auth = {"authorization": f"Bearer {key}", "content-type": "application/json"}
        status, _h, body = one.request(
            "POST",
            "/uploads",
            body=json.dumps({"contentType": "image/png", "contentLength": len(data)}).encode(),
            headers=auth,
        )
        assert status == 201, body
        ticket = json.loads(body)
        put = urlsplit(ticket["url"])
        status, _h, body = other.request(
            "PUT", f"{put.path}?{put.query}", body=data, headers=ticket["headers"]
        )
        assert status == 200, body
        status, _h, body = one.request(
            "POST", urlsplit(ticket["completeUrl"]).path, body=b"{}", headers=auth
        )
        assert status == 200, body

        # A key revoked by an admin command (a third process) is refused by both children.
        listed = _cli(env, "admin", "list-keys", "--owner", "procs@example.com", "--json")
        (listed_key,) = json.loads(listed.stdout)["keys"]
        revoked = _cli(env, "admin", "revoke-key", listed_key["keyId"])
        assert revoked.returncode == 0, revoked.stderr
        for connection in (one, other):
            status, _h, reply = connection.mcp(key, "tools/list", {})
            assert status == 401 and reply["error"]["data"]["code"] == "unauthenticated"


def test_a_killed_child_is_replaced_and_sigterm_stops_everything(
    with_worker: tuple[dict[str, str], Processes],
) -> None:
    """Last of ``with_worker``'s tests: it stops that server."""
    env, processes = with_worker
    pgdata = Path(env["MEMORY_DATA_DIR"]) / "postgres"
    before = processes.children()
    victim = processes.servers()[0]
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + START_SECONDS
    while not (started := set(processes.servers()) - set(before)):
        assert time.monotonic() < deadline, "the killed child was not replaced"
        time.sleep(0.005)
    # The replacement is held before it can serve. Connections made meanwhile are all
    # answered by the child that is ready: none is dealt to the one starting (before, every
    # other one waited seconds for it; held here, they would never be answered).
    (replacement,) = started
    os.kill(replacement, signal.SIGSTOP)
    try:
        for _ in range(8):
            answered = httpx.get(
                processes.url + "/healthz", headers={"Connection": "close"}, timeout=30
            )
            assert answered.status_code == 200
    finally:
        os.kill(replacement, signal.SIGCONT)
    assert processes.process.poll() is None
    while processes.log.read_text().count('"server_process_ready"') < 3:
        assert time.monotonic() < deadline, "the replacement did not start serving"
        time.sleep(0.2)
    with pinned(processes, replacement) as connection:
        assert connection.request("GET", "/healthz/ready")[0] == 200
    log = processes.log.read_text()
    assert '"child_process_died"' in log and f'"pid": {victim}' in log

    everyone = [processes.process.pid, *processes.children()]
    processes.process.send_signal(signal.SIGTERM)
    assert processes.process.wait(timeout=60) == 0
    assert not [pid for pid in everyone if psutil.pid_exists(pid)]
    assert not (pgdata / "postmaster.pid").exists()  # the last user released PostgreSQL


def test_a_handshake_client_initialised_on_one_process_calls_tools_on_the_other(
    without_worker: tuple[dict[str, str], Processes],
) -> None:
    env, processes = without_worker
    assert "worker" not in processes.children().values()
    first, second = processes.servers()
    key = make_key(env, "legacy@example.com")
    with pinned(processes, first) as one, pinned(processes, second) as other:
        status, headers, opened = one.mcp(
            key,
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "legacy", "version": "1"},
            },
        )
        assert status == 200, opened
        session = headers.get("mcp-session-id")
        status, _headers, called = other.mcp(
            key, "tools/call", {"name": "image_project_list", "arguments": {}}, session
        )
        assert status == 200, called
        assert called["result"]["structuredContent"] == {"projects": []}
        assert session is None  # no session: nothing for a proxy to be sticky about
        # No server-to-client stream either: there is no session for one to belong to.
        status, _headers, _body = other.request(
            "GET", "/mcp", headers={"authorization": f"Bearer {key}"}
        )
        assert status == 405


def test_a_pause_holds_in_every_server_process_at_once(
    without_worker: tuple[dict[str, str], Processes],
) -> None:
    """`serve --processes 2`: one connection pinned to each child; a pause made by the CLI (a
    third process) is refused by both on the next request, and a resume accepted by both."""
    env, processes = without_worker
    make_key(env, OWNER, "read")  # the person (the CLI making one is tested in test_processes)
    a_id, a_secret = _key(env, "agent-a")
    _b_id, b_secret = _key(env, "agent-b")
    first, second = processes.servers()
    with pinned(processes, first) as one, pinned(processes, second) as other:
        for connection in (one, other):  # both children have the key in their caches
            status, _h, _reply = connection.mcp(a_secret, "tools/list", {})
            assert status == 200
        assert _cli(env, "admin", "pause-key", a_id).returncode == 0
        for connection in (one, other):
            status, _h, reply = connection.mcp(a_secret, "tools/list", {})
            assert status == 401 and reply["error"]["data"]["reason"] == "key_paused"
            assert connection.mcp(b_secret, "tools/list", {})[0] == 200
        assert _cli(env, "admin", "resume-key", a_id).returncode == 0
        for connection in (one, other):
            assert connection.mcp(a_secret, "tools/list", {})[0] == 200


@pytest.mark.usefixtures("embedded_data_dir")  # a migrated database in tmp_path/data
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


@pytest.mark.usefixtures("embedded_data_dir")  # a migrated database in tmp_path/data
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
