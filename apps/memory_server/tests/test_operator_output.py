"""What an operator reads: ``memory-server`` commands as real processes, stdout and stderr piped.

An operator command prints its result on stdout and its progress and refusals on stderr, as
plain text for the person who typed it; log lines join them only from ``MEMORY_CLI_LOG_LEVEL``
(warnings, by default) up. The embedded PostgreSQL of one data directory serves the whole module
(each command starts and stops it, as an operator's commands do when no server runs).
"""

from __future__ import annotations

import hashlib
import json
import os
import pty
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import pyvips

from memory_db.testing import copy_data_directory
from memory_tools.testing.keys import new_identity

pytestmark = pytest.mark.slow

SERVER = [sys.executable, "-m", "memory_server"]
# Generous: a command starts (and stops) the embedded PostgreSQL, on a shared, loaded machine.
TIMEOUT = 120
CREATE_HINT = "`memory-server admin create-identity --owner carol@example.com`"
IMAGES = 3


def _png(seed: int) -> bytes:
    xyz = pyvips.Image.xyz(40, 30)
    red = ((xyz[0] * (seed + 3) + xyz[1]) % 256).cast("uchar")
    green = ((xyz[1] * (seed + 5)) % 256).cast("uchar")
    return red.bandjoin([green, red]).copy(interpretation="srgb").pngsave_buffer()


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SERVER, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def env(
    tmp_path_factory: pytest.TempPathFactory, migrated_pgdata: Path
) -> Iterator[dict[str, str]]:
    """A migrated data directory; logging as an operator's shell leaves it (nothing set).

    A copy of the worker's migrated data directory, what `memory-server migrate` leaves on a
    new one (initdb and every migration, seconds that no test here is about).
    """
    data = tmp_path_factory.mktemp("operator") / "data"
    data.mkdir(mode=0o700)
    copy_data_directory(migrated_pgdata, data / "postgres")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("ASSET_", "MEMORY_", "JINA_"))}
    yield {**base, "MEMORY_DATA_DIR": str(data), "ASSET_OCR": "off"}


def _export(source: Path) -> Path:
    """A vault export of ``IMAGES`` pictures, in the format ``memory-server export`` writes."""
    (source / "originals").mkdir(parents=True)
    entries: list[dict[str, object]] = []
    for seed in range(IMAGES):
        data = _png(seed)
        name = f"ast_picture{seed}"
        (source / "originals" / f"{name}.png").write_bytes(data)
        entries.append(
            {
                "id": name,
                "file": f"originals/{name}.png",
                "title": f"picture {seed}",
                "sha256": hashlib.sha256(data).hexdigest(),
            }
        )
    lines = "".join(json.dumps(entry) + "\n" for entry in entries).encode()
    (source / "assets.jsonl").write_bytes(lines)
    document = {
        "format": "image-memory-vault-export",
        "formatVersion": 1,
        "vault": "Library",
        "projects": [],
        "folders": [],
        "assetsFile": {
            "path": "assets.jsonl",
            "entries": len(entries),
            "bytes": len(lines),
            "sha256": hashlib.sha256(lines).hexdigest(),
        },
    }
    (source / "vault.json").write_text(json.dumps(document))
    return source


@pytest.mark.parametrize("log_format", [None, "json", "console"])
def test_a_refusal_names_the_address_the_operator_typed(
    env: dict[str, str], log_format: str | None
) -> None:
    # Piped (not a terminal), the refusal used to be a JSON log event, redacted like every log
    # line: "no identity id:4d0e...; create it with ... --owner id:4d0e...", a wrong command.
    chosen = env if log_format is None else {**env, "MEMORY_LOG_FORMAT": log_format}
    refused = _cli(chosen, "admin", "list-keys", "--owner", "Carol@Example.com")
    assert refused.returncode == 1
    assert refused.stdout == ""
    assert refused.stderr == (
        f"error: not_found: no identity carol@example.com; create it with {CREATE_HINT}\n"
    )


def test_admin_commands_print_their_result_and_nothing_else(env: dict[str, str]) -> None:
    # Each command starts the embedded server: its log line used to come first on stderr.
    created = _cli(env, "admin", "create-identity", "--owner", "dora@example.com")
    assert (created.returncode, created.stderr) == (0, "")
    assert created.stdout == (
        "identity dora@example.com created with vault Library (quota 10737418240 bytes)\n"
    )
    listed = _cli(env, "admin", "list-vaults", "--owner", "dora@example.com", "--json")
    assert (listed.returncode, listed.stderr) == (0, "")
    assert [v["vault"] for v in json.loads(listed.stdout)["vaults"]] == ["Library"]


def test_import_shows_progress_and_advises_the_worker_only_when_it_saved(
    env: dict[str, str], tmp_path: Path
) -> None:
    source = _export(tmp_path / "export")
    new_identity(env, "erin@example.com")  # in-process: create-identity's output is tested above
    progress = [f"importing: {n}/{IMAGES} importing images" for n in range(1, IMAGES + 1)]
    first = _cli(env, "import", "--owner", "erin@example.com", str(source))
    assert first.returncode == 0, first.stderr
    # Progress lines only: no log line per saved image between them.
    assert first.stderr.splitlines() == progress
    table = first.stdout.splitlines()
    assert table[0].rstrip() == "import into erin@example.com / Library"
    assert table[-1] == (
        "the worker embeds the saved images: run the server or `memory-server worker`"
    )
    again = _cli(env, "import", "--owner", "erin@example.com", str(source))
    assert again.returncode == 0, again.stderr
    assert again.stderr.splitlines() == progress
    # Nothing saved the second time: the table ends the output, no advice to embed nothing.
    assert "worker" not in again.stdout
    assert again.stdout.splitlines()[-1].startswith("└")
    counts = again.stdout.splitlines()[-2].split("│")[1:-1]
    assert [cell.strip() for cell in counts] == ["0", "0", "0", str(IMAGES), "0"]


def test_backup_prints_progress_lines_and_its_table(env: dict[str, str], tmp_path: Path) -> None:
    done = _cli(env, "backup", str(tmp_path / "backup"))
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith("backing up: 0/") and lines[0].endswith(" dumping the database")
    assert all(line.startswith("backing up: ") for line in lines)
    assert done.stdout.splitlines()[0].rstrip() == f"backup in {tmp_path / 'backup'}"


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def test_a_log_line_is_printed_above_the_progress_bar_not_through_it(
    env: dict[str, str], tmp_path: Path
) -> None:
    # On a terminal the bar is redrawn in place; a log line written to the stream the handler
    # kept (not rich's proxy) landed in the middle of the bar: "backing up ━━━ 2026-... info".
    primary, secondary = pty.openpty()
    try:
        process = subprocess.Popen(
            [*SERVER, "backup", str(tmp_path / "backup")],
            env={**env, "MEMORY_CLI_LOG_LEVEL": "info"},  # so that backup_written is logged
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=secondary,
        )
        os.close(secondary)
        chunks: list[bytes] = []
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # EIO: the process closed the terminal (it exited)
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert process.wait(timeout=TIMEOUT) == 0
        assert process.stdout is not None
        process.stdout.close()
    finally:
        os.close(primary)
    shown = _ANSI.sub("", b"".join(chunks).decode("utf-8", "replace"))
    segments = re.split(r"[\r\n]+", shown)
    assert any("backing up" in segment and "━" in segment for segment in segments)  # a bar
    logged = [segment for segment in segments if "backup_written" in segment]
    assert logged, shown
    assert all("━" not in segment and "backing up" not in segment for segment in logged), shown


def test_an_admin_command_on_the_embedded_database_loads_no_migration_code(
    env: dict[str, str],
) -> None:
    # The embedded database is migrated implicitly; at head already (a server migrated it),
    # neither alembic nor the migration scripts (one imports numpy) load any more.
    probe = (
        "import json, sys; from memory_server.cli import main; status = main(sys.argv[1:]); "
        "print(json.dumps([status, [m for m in ('alembic', 'numpy', 'pyvips', 'onnxruntime') "
        "if m in sys.modules]]), file=sys.stderr)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, "admin", "list-identities", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert json.loads(done.stderr.strip().splitlines()[-1]) == [0, []], done.stderr
