"""Sizing the embedded PostgreSQL from memory, and the settings that override it."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory_db.errors import ConfigurationError
from memory_db.pg_memory import (
    CONF_FILE,
    MIB,
    PostgresMemory,
    available_memory_bytes,
    size_for,
    write_conf,
)
from memory_db.settings import load_settings

GIB = 1024 * MIB


@pytest.mark.parametrize(
    ("memory", "expected"),
    [
        # shared_buffers a quarter (128 MB..8 GB), effective_cache_size a half, work_mem /256
        # (4..64 MB), maintenance_work_mem an eighth (64 MB..2 GB).
        (24 * GIB, PostgresMemory(6144, 12288, 64, 2048)),
        (8 * GIB, PostgresMemory(2048, 4096, 32, 1024)),
        (2 * GIB, PostgresMemory(512, 1024, 8, 256)),
        (512 * MIB, PostgresMemory(128, 256, 4, 64)),
        (64 * GIB, PostgresMemory(8192, 32768, 64, 2048)),
    ],
)
def test_sizing_follows_memory_within_bounds(memory: int, expected: PostgresMemory) -> None:
    assert size_for(memory) == expected


def test_a_cgroup_limit_below_the_machine_wins(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24683792 kB\nMemFree:  1 kB\n")
    v2, v1 = tmp_path / "memory.max", tmp_path / "memory.limit_in_bytes"
    assert available_memory_bytes(meminfo, (v2, v1)) == 24683792 * 1024  # no cgroup files
    v2.write_text("max\n")
    v1.write_text("9223372036854771712\n")  # cgroup v1's "no limit"
    assert available_memory_bytes(meminfo, (v2, v1)) == 24683792 * 1024
    v2.write_text(f"{2 * GIB}\n")
    assert available_memory_bytes(meminfo, (v2, v1)) == 2 * GIB
    v2.write_text("max\n")
    v1.write_text(f"{3 * GIB}\n")
    assert available_memory_bytes(meminfo, (v2, v1)) == 3 * GIB


def test_settings_compute_from_the_given_memory_and_override_each_figure(tmp_path: Path) -> None:
    settings = load_settings(memory_data_dir=tmp_path, memory_pg_memory_mb=4096)
    assert settings.embedded_postgres_memory == PostgresMemory(1024, 2048, 16, 512)
    settings = load_settings(
        memory_data_dir=tmp_path,
        memory_pg_memory_mb=4096,
        memory_pg_shared_buffers_mb=2000,
        memory_pg_effective_cache_size_mb=3000,
        memory_pg_work_mem_mb=12,
        memory_pg_maintenance_work_mem_mb=700,
    )
    assert settings.embedded_postgres_memory == PostgresMemory(2000, 3000, 12, 700)


def test_the_environment_names_the_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMORY_PG_SHARED_BUFFERS_MB", "256")
    monkeypatch.setenv("MEMORY_PG_MEMORY_MB", "1024")
    memory = load_settings(memory_data_dir=tmp_path).embedded_postgres_memory
    assert memory == PostgresMemory(256, 512, 4, 128)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("memory_pg_memory_mb", 100),  # below 256
        ("memory_pg_shared_buffers_mb", 8),  # below 16
        ("memory_pg_work_mem_mb", 0),
        ("memory_pg_maintenance_work_mem_mb", -1),
        ("memory_pg_effective_cache_size_mb", "a lot"),
    ],
)
def test_bad_sizes_are_refused_by_name(tmp_path: Path, variable: str, value: object) -> None:
    with pytest.raises(ConfigurationError, match=variable.upper()):
        load_settings(memory_data_dir=tmp_path, **{variable: value})


def test_the_conf_file_is_rewritten_and_included_once(tmp_path: Path) -> None:
    (tmp_path / "postgresql.conf").write_text("max_connections = 100")  # no final newline
    write_conf(tmp_path, PostgresMemory(100, 200, 5, 70))
    write_conf(tmp_path, PostgresMemory(128, 256, 4, 64))
    main = (tmp_path / "postgresql.conf").read_text()
    assert main == f"max_connections = 100\ninclude_if_exists = '{CONF_FILE}'\n"
    written = (tmp_path / CONF_FILE).read_text()
    assert "shared_buffers = '128MB'" in written and "100MB" not in written
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no drafts
