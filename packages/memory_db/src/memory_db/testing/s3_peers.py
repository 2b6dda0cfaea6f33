"""Real S3 protocol peers for tests, started on 127.0.0.1: moto's server and s3rver.

Known behaviour (the reason both exist): moto accepts expired and tampered presigned URLs and
wrong checksums; s3rver refuses expired and tampered presigned URLs but accepts wrong checksums.
Signature and expiry tests therefore run against s3rver; integrity is our own guarantee.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3  # type: ignore[import-untyped]

from memory_db.ids import new_id
from memory_db.storage import S3AssetObjectStore

REPO_ROOT_MARKER = "tools/s3rver/package.json"


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


@dataclass
class S3Peer:
    """Connection facts of a running S3 peer."""

    name: str
    endpoint_url: str
    access_key_id: str
    secret_access_key: str
    region: str = "us-east-1"

    def client(self) -> Any:
        """A synchronous boto3 client (for test setup: buckets, out-of-band tampering)."""
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.access_key_id,
            aws_secret_access_key=self.secret_access_key,
            region_name=self.region,
        )

    def create_bucket(self, bucket: str) -> None:
        """Create a private bucket."""
        self.client().create_bucket(Bucket=bucket)

    def new_store(self, prefix: str = "b") -> tuple[S3AssetObjectStore, str]:
        """An object store on a new private bucket of this peer, and the bucket's name."""
        bucket = prefix + new_id("aob")[4 : 4 + 18 - len(prefix)]
        self.create_bucket(bucket)
        store = S3AssetObjectStore(
            bucket=bucket,
            region=self.region,
            endpoint_url=self.endpoint_url,
            access_key_id=self.access_key_id,
            secret_access_key=self.secret_access_key,
            force_path_style=True,
        )
        return store, bucket


class MotoPeer:
    """moto's threaded S3 server."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer  # type: ignore[import-untyped]

        self.port = free_port()
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)

    def start(self) -> S3Peer:
        """Start and describe the peer."""
        self._server.start()
        _wait_for_port(self.port)
        return S3Peer("moto", f"http://127.0.0.1:{self.port}", "testing", "testing")

    def stop(self) -> None:
        """Stop the server."""
        self._server.stop()


def find_s3rver(start: Path | None = None) -> Path | None:
    """The s3rver executable installed by ``make deps-node`` under ``tools/s3rver``."""
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        candidate = directory / "tools" / "s3rver" / "node_modules" / ".bin" / "s3rver"
        if candidate.exists():
            return candidate
    return None


class S3rverPeer:
    """s3rver (npm, Node.js) in a subprocess."""

    def __init__(self, data_dir: Path, executable: Path) -> None:
        self.data_dir = data_dir
        self.executable = executable
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> S3Peer:
        """Start and describe the peer."""
        if shutil.which("node") is None:
            raise RuntimeError("s3rver needs Node.js on PATH")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._process = subprocess.Popen(  # noqa: S603 - fixed arguments
            [
                str(self.executable),
                "-d",
                str(self.data_dir),
                "-a",
                "127.0.0.1",
                "-p",
                str(self.port),
                "--silent",
                "--no-vhost-buckets",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ},
        )
        _wait_for_port(self.port)
        return S3Peer("s3rver", f"http://127.0.0.1:{self.port}", "S3RVER", "S3RVER")

    def stop(self) -> None:
        """Terminate the process."""
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
            self._process = None
