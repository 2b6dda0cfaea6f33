"""How much memory the embedded PostgreSQL uses, from the machine's memory (docs/scaling.md).

PostgreSQL's defaults (``shared_buffers = 128MB``, ``effective_cache_size = 4GB``,
``work_mem = 4MB``, ``maintenance_work_mem = 64MB``) are sized for a machine of the 2000s. At
100,000 images the active HNSW graph is about 520 MB and the table as much again: with 128 MB of
buffers every text search copied about 4,300 pages from the OS cache, and 2 GB instead saved
9-13 ms of PostgreSQL CPU and 15-23 ms of p50 per search (issue 31). So the embedded server is
sized from the memory it may use (:func:`available_memory_bytes`: the machine's, or a cgroup's
limit when lower), each figure overridable (``MEMORY_PG_*``, docs/configuration.md):

- ``shared_buffers``: a quarter, at most 8 GB. The usual starting point: the OS page cache holds
  the rest, and above 8 GB buffers rarely pay for the memory they take from everything else.
- ``effective_cache_size``: half. Only a planner hint (nothing is allocated): how much of the
  data the buffers and the OS cache hold together. Half, not the usual three quarters, because
  the server, its workers and the user's own programs share the machine with PostgreSQL.
- ``work_mem``: memory / 256, between 4 and 64 MB. Each sort or hash of each connection may take
  that much; a few dozen connections (the pools of a server and its worker) sorting at once
  then stay within a quarter of memory.
- ``maintenance_work_mem``: an eighth, between 64 MB and 2 GB. An HNSW build is many times
  faster while its graph fits (pgvector says so when it no longer does); 100,000 vectors need
  about 520 MB.

The figures are written to a file of ours in the data directory (:data:`CONF_FILE`), included
from ``postgresql.conf``, before every start of the server: they take effect on the next start
of an existing data directory too. An operator's ``ALTER SYSTEM`` still wins
(``postgresql.auto.conf`` is read after it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

MIB = 1024 * 1024
CONF_FILE = "memory_server.conf"
INCLUDE_LINE = f"include_if_exists = '{CONF_FILE}'"

SHARED_BUFFERS_FRACTION = 4  # a quarter
SHARED_BUFFERS_MAX_MB = 8 * 1024
SHARED_BUFFERS_MIN_MB = 128  # PostgreSQL's default: never below it
EFFECTIVE_CACHE_FRACTION = 2  # a half
WORK_MEM_FRACTION = 256
WORK_MEM_MIN_MB = 4
WORK_MEM_MAX_MB = 64
MAINTENANCE_FRACTION = 8  # an eighth
MAINTENANCE_MIN_MB = 64
MAINTENANCE_MAX_MB = 2 * 1024

# cgroup v2 and v1 memory limits; "max" or a huge number means none.
CGROUP_LIMIT_FILES = (
    Path("/sys/fs/cgroup/memory.max"),
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
)


@dataclass(frozen=True)
class PostgresMemory:
    """The four memory settings of a PostgreSQL server, in MiB."""

    shared_buffers_mb: int
    effective_cache_size_mb: int
    work_mem_mb: int
    maintenance_work_mem_mb: int

    def settings(self) -> dict[str, str]:
        """The PostgreSQL parameters, by name, in PostgreSQL's units."""
        return {
            "shared_buffers": f"{self.shared_buffers_mb}MB",
            "effective_cache_size": f"{self.effective_cache_size_mb}MB",
            "work_mem": f"{self.work_mem_mb}MB",
            "maintenance_work_mem": f"{self.maintenance_work_mem_mb}MB",
        }

    def conf_text(self) -> str:
        """The contents of :data:`CONF_FILE`."""
        lines = [
            "# Written by the image memory at every start of its embedded PostgreSQL: edits are",
            "# lost. Set MEMORY_PG_SHARED_BUFFERS_MB and its neighbours instead",
            "# (docs/configuration.md), or ALTER SYSTEM, which is read after this file.",
        ]
        lines += [f"{name} = '{value}'" for name, value in self.settings().items()]
        return "\n".join(lines) + "\n"


# PostgreSQL's own defaults, explicitly, for test clusters: a test suite starts many servers on
# one machine, and the tests (and benchmarks built on the test fixtures) keep the figures they
# were written against.
SMALL = PostgresMemory(
    shared_buffers_mb=128, effective_cache_size_mb=4096, work_mem_mb=4, maintenance_work_mem_mb=64
)


def size_for(memory_bytes: int) -> PostgresMemory:
    """The sizing for a server that may use ``memory_bytes`` (the fractions above)."""
    memory_mb = max(memory_bytes // MIB, 1)
    return PostgresMemory(
        shared_buffers_mb=_clamp(
            memory_mb // SHARED_BUFFERS_FRACTION, SHARED_BUFFERS_MIN_MB, SHARED_BUFFERS_MAX_MB
        ),
        effective_cache_size_mb=max(memory_mb // EFFECTIVE_CACHE_FRACTION, SHARED_BUFFERS_MIN_MB),
        work_mem_mb=_clamp(memory_mb // WORK_MEM_FRACTION, WORK_MEM_MIN_MB, WORK_MEM_MAX_MB),
        maintenance_work_mem_mb=_clamp(
            memory_mb // MAINTENANCE_FRACTION, MAINTENANCE_MIN_MB, MAINTENANCE_MAX_MB
        ),
    )


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(value, high))


def available_memory_bytes(
    meminfo: Path = Path("/proc/meminfo"), cgroup_files: tuple[Path, ...] = CGROUP_LIMIT_FILES
) -> int:
    """The memory this process's PostgreSQL may use: physical memory, or a lower cgroup limit.

    A container's limit matters more than the host's memory: buffers sized from the host's
    would get the server killed by the OOM killer.
    """
    total = _physical_memory_bytes(meminfo)
    for path in cgroup_files:
        limit = _cgroup_limit(path)
        if limit is not None and limit < total:
            total = limit
    return total


def _physical_memory_bytes(meminfo: Path) -> int:
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    try:  # not Linux (macOS): the same figure from sysconf
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError):
        return 0


def _cgroup_limit(path: Path) -> int | None:
    try:
        raw = path.read_text().strip()
    except OSError:
        return None
    if not raw.isdigit():
        return None  # "max": no limit
    value = int(raw)
    return value if 0 < value < 2**60 else None  # cgroup v1 writes "no limit" as ~2**63


def write_conf(pgdata: Path, memory: PostgresMemory) -> None:
    """Write :data:`CONF_FILE` into ``pgdata`` and include it from ``postgresql.conf`` (once).

    Call it while the server is stopped: the figures are read when it starts.
    """
    target = pgdata / CONF_FILE
    draft = target.with_name(f".{CONF_FILE}.{os.getpid()}")
    draft.write_text(memory.conf_text())
    draft.chmod(0o644)  # run as root, the package runs PostgreSQL as a user of its own
    draft.replace(target)
    main = pgdata / "postgresql.conf"
    text = main.read_text()
    if INCLUDE_LINE not in text.splitlines():
        with main.open("a") as handle:
            handle.write(("" if text.endswith("\n") else "\n") + INCLUDE_LINE + "\n")


__all__ = [
    "CONF_FILE",
    "SMALL",
    "PostgresMemory",
    "available_memory_bytes",
    "size_for",
    "write_conf",
]
