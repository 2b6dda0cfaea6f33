"""Configuration: defaults, validation naming the variable, data-dir safety."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from memory_db import ConfigurationError, DevHost, MemorySettings, load_settings
from memory_db.datadir import check_data_dir

SPEC_DEFAULTS = {
    "asset_storage_provider": "local",
    "asset_s3_force_path_style": False,
    "asset_storage_env_prefix": "production",
    "asset_signed_get_ttl_seconds": 300,
    "asset_signed_put_ttl_seconds": 900,
    "asset_max_bytes": 20_971_520,
    "asset_max_decoded_pixels": 40_000_000,
    "asset_preview_max_edge": 2048,
    "asset_delete_grace_hours": 168,
    "asset_embed_index": "memory_assets_v1",
    "asset_embed_model": "jina-embeddings-v5-omni-small",
    "asset_embed_dim": 1024,
    "asset_embed_worker_concurrency": None,
    "asset_embed_provider": "local",
    "jina_base_url": "https://api.jina.ai/v1",
}


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import os

    for name in list(os.environ):
        if name.startswith(("ASSET_", "MEMORY_", "JINA_", "SCRAPER_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


def test_defaults(tmp_path: Path) -> None:
    settings = load_settings()
    for name, value in SPEC_DEFAULTS.items():
        assert getattr(settings, name) == value, name
    assert settings.memory_data_dir == tmp_path / "xdg" / "mcp-memory"
    assert settings.uses_embedded_database
    assert settings.postgres_dir == settings.memory_data_dir / "postgres"


def test_empty_values_mean_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASSET_EMBED_WORKER_CONCURRENCY", "")
    assert load_settings().asset_embed_worker_concurrency is None


def test_the_decode_budget_defaults_to_twice_the_pixel_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ASSET_MAX_DECODED_PIXELS", "1000")
    assert load_settings().decode_budget_pixels == 2000
    monkeypatch.setenv("ASSET_DECODE_BUDGET_PIXELS", "1500")
    assert load_settings().decode_budget_pixels == 1500


def test_the_pool_is_sized_above_the_admitted_calls_and_the_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = load_settings()
    assert settings.memory_max_concurrent_calls == 8
    # calls, worker slots and the OCR lane with their heartbeats, the worker's LISTEN and
    # sweep, the waiters' and the key cache's LISTEN
    assert settings.db_pool_size == 8 + 2 * (2 + 1) + 4
    monkeypatch.setenv("MEMORY_MAX_CONCURRENT_CALLS", "20")
    monkeypatch.setenv("ASSET_EMBED_WORKER_CONCURRENCY", "4")
    assert load_settings().db_pool_size == 20 + 2 * (4 + 1) + 4
    monkeypatch.setenv("MEMORY_DB_POOL_SIZE", "5")
    assert load_settings().db_pool_size == 5


def test_scraper_artifacts_expire_and_are_bounded_per_owner(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = load_settings()
    assert settings.scraper_artifact_ttl_seconds == 3600
    assert settings.scraper_artifact_max_live == 100
    assert settings.scraper_artifact_max_live_bytes == 512 * 1024**2
    monkeypatch.setenv("SCRAPER_ARTIFACT_TTL_SECONDS", "5")
    monkeypatch.setenv("SCRAPER_ARTIFACT_MAX_LIVE", "3")
    monkeypatch.setenv("SCRAPER_ARTIFACT_MAX_LIVE_BYTES", "1000")
    settings = load_settings()
    assert settings.scraper_artifact_ttl_seconds == 5
    assert settings.scraper_artifact_max_live == 3
    assert settings.scraper_artifact_max_live_bytes == 1000
    for variable, value in (
        ("SCRAPER_ARTIFACT_TTL_SECONDS", "0"),
        ("SCRAPER_ARTIFACT_TTL_SECONDS", str(8 * 86_400)),
        ("SCRAPER_ARTIFACT_MAX_LIVE", "0"),
    ):
        monkeypatch.setenv(variable, value)
        with pytest.raises(ConfigurationError, match=variable):
            load_settings()
        monkeypatch.delenv(variable)


def test_environment_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASSET_VECTOR_GRAPH_M", "16")
    monkeypatch.setenv("ASSET_MAX_BYTES", "1000")
    monkeypatch.setenv("JINA_API_KEYS", "k1, k2,,k3")
    monkeypatch.setenv("ASSET_EMBED_PROVIDER", "jina")
    settings = load_settings()
    assert settings.asset_vector_graph_m == 16  # the default is 32
    assert settings.asset_max_bytes == 1000
    assert [k.get_secret_value() for k in settings.jina_api_keys] == ["k1", "k2", "k3"]


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("ASSET_MAX_BYTES", "-1", "ASSET_MAX_BYTES"),
        ("ASSET_MAX_BYTES", "lots", "ASSET_MAX_BYTES"),
        ("ASSET_STORAGE_PROVIDER", "ftp", "ASSET_STORAGE_PROVIDER"),
        ("ASSET_DECODE_BUDGET_PIXELS", "0", "ASSET_DECODE_BUDGET_PIXELS"),
        ("ASSET_SIGNED_GET_TTL_SECONDS", "86400", "ASSET_SIGNED_GET_TTL_SECONDS"),
        ("ASSET_STORAGE_ENV_PREFIX", "Prod/../x", "ASSET_STORAGE_ENV_PREFIX"),
        ("ASSET_EMBED_INDEX", "drop table", "ASSET_EMBED_INDEX"),
        ("ASSET_VECTOR_GRAPH_M", "24", "ASSET_VECTOR_GRAPH_M"),
        ("ASSET_S3_ENDPOINT", "ftp://x", "ASSET_S3_ENDPOINT"),
        ("ASSET_S3_ENDPOINT", "https://user:pw@host", "ASSET_S3_ENDPOINT"),
        ("JINA_BASE_URL", "http://api.jina.ai/v1", "JINA_BASE_URL"),
        ("MEMORY_DATABASE_URL", "mysql://x/y", "MEMORY_DATABASE_URL"),
        ("ASSET_EMBED_PROVIDER", "openai", "ASSET_EMBED_PROVIDER"),
        ("ASSET_EMBED_PROVIDER", "jina", "JINA_API_KEYS"),
        ("ASSET_STORAGE_PROVIDER", "s3", "ASSET_S3_BUCKET"),
        ("MEMORY_LOG_FORMAT", "xml", "MEMORY_LOG_FORMAT"),
        ("MEMORY_MAX_CONCURRENT_CALLS", "0", "MEMORY_MAX_CONCURRENT_CALLS"),
        ("MEMORY_ADMISSION_WAIT_SECONDS", "0", "MEMORY_ADMISSION_WAIT_SECONDS"),
        ("MEMORY_DB_POOL_SIZE", "0", "MEMORY_DB_POOL_SIZE"),
        ("MEMORY_DB_POOL_OVERFLOW", "-1", "MEMORY_DB_POOL_OVERFLOW"),
        ("ASSET_FEATURE_ENABLED", "perhaps", "ASSET_FEATURE_ENABLED"),
    ],
)
def test_invalid_values_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, message: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigurationError, match=message):
        load_settings()


def test_loopback_http_allowed_for_jina_base_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JINA_BASE_URL", "http://127.0.0.1:9999/v1")
    assert load_settings().jina_base_url == "http://127.0.0.1:9999/v1"


def test_s3_credentials_come_in_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASSET_STORAGE_PROVIDER", "s3")
    monkeypatch.setenv("ASSET_S3_BUCKET", "b")
    monkeypatch.setenv("ASSET_S3_REGION", "r")
    monkeypatch.setenv("ASSET_S3_ACCESS_KEY_ID", "id")
    with pytest.raises(ConfigurationError, match="ASSET_S3_SECRET_ACCESS_KEY"):
        load_settings()


def test_secrets_do_not_show_in_repr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORY_API_KEY", "mk_supersecretvalue")
    assert "supersecret" not in repr(load_settings())


@pytest.mark.parametrize(
    "path",
    [
        "/home/u/Dropbox/memory",
        "/home/u/Dropbox (Team)/memory",
        "/home/u/OneDrive - Contoso/memory",
        "/home/u/OneDrive/memory",
        "/Users/u/Library/CloudStorage/GoogleDrive-u@example.com/My Drive/m",
        "/Users/u/Google Drive/m",
        "/Users/u/Library/Mobile Documents/com~apple~CloudDocs/m",
        "/Users/u/iCloud Drive/m",
    ],
)
def test_cloud_sync_folders_are_refused(path: str) -> None:
    with pytest.raises(ValueError, match="cloud-sync"):
        check_data_dir(Path(path), mounts_text="")


def test_cloud_sync_refusal_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORY_DATA_DIR", "/home/u/Dropbox/memory")
    with pytest.raises(ConfigurationError, match=r"MEMORY_DATA_DIR.*cloud-sync"):
        load_settings()


MOUNTS = """\
/dev/sda1 / ext4 rw 0 0
server:/export /mnt/nfs nfs4 rw 0 0
//nas/share /mnt/smb\\040share cifs rw 0 0
sshfs#host: /mnt/remote fuse.sshfs rw 0 0
/dev/sdb1 /mnt/nfs/local ext4 rw 0 0
"""


@pytest.mark.parametrize(
    ("path", "refused"),
    [
        ("/mnt/nfs/memory", True),
        ("/mnt/smb share/memory", True),
        ("/mnt/remote/x", True),
        ("/mnt/nfs/local/memory", False),  # a local disk mounted inside the NFS tree
        ("/home/u/.local/share/mcp-memory", False),
        ("/mnt/nfsx/memory", False),  # a sibling name, not under the mount
        ("/home/u/Dropboxes/memory", False),
    ],
)
def test_network_filesystems_are_refused(path: str, refused: bool) -> None:
    if refused:
        with pytest.raises(ValueError, match="network filesystem"):
            check_data_dir(Path(path), mounts_text=MOUNTS)
    else:
        check_data_dir(Path(path), mounts_text=MOUNTS)


def test_every_setting_is_documented_and_every_documented_variable_is_a_setting() -> None:
    """docs/configuration.md lists exactly the variables MemorySettings reads."""
    doc = (Path(__file__).resolve().parents[4] / "docs" / "configuration.md").read_text()
    documented = set(re.findall(r"^\| `([A-Z][A-Z0-9_]+)`", doc, flags=re.MULTILINE))
    read = {name.upper() for name in MemorySettings.model_fields}
    assert documented - read == set(), "documented but read by nothing"
    assert read - documented == set(), "read but not documented"


def test_screenshot_settings_are_read_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings()
    assert settings.scraper_chromium_path is None
    assert settings.scraper_screenshot_timeout_seconds == 30.0
    assert settings.scraper_screenshot_max_page_bytes == 25 * 1024**2
    assert settings.scraper_screenshot_max_height == 8000
    assert settings.scraper_screenshot_concurrency == 2
    monkeypatch.setenv("SCRAPER_CHROMIUM_PATH", "/opt/chromium/chrome")
    monkeypatch.setenv("SCRAPER_SCREENSHOT_TIMEOUT_SECONDS", "12.5")
    monkeypatch.setenv("SCRAPER_SCREENSHOT_MAX_PAGE_BYTES", "1048576")
    monkeypatch.setenv("SCRAPER_SCREENSHOT_MAX_HEIGHT", "3000")
    monkeypatch.setenv("SCRAPER_SCREENSHOT_CONCURRENCY", "1")
    settings = load_settings()
    assert str(settings.scraper_chromium_path) == "/opt/chromium/chrome"
    assert settings.scraper_screenshot_timeout_seconds == 12.5
    assert settings.scraper_screenshot_max_page_bytes == 1024**2
    assert settings.scraper_screenshot_max_height == 3000
    assert settings.scraper_screenshot_concurrency == 1
    for variable, value in (
        ("SCRAPER_SCREENSHOT_TIMEOUT_SECONDS", "0"),
        ("SCRAPER_SCREENSHOT_MAX_PAGE_BYTES", "10"),
        ("SCRAPER_SCREENSHOT_MAX_HEIGHT", "100000"),
        ("SCRAPER_SCREENSHOT_CONCURRENCY", "0"),
    ):
        monkeypatch.setenv(variable, value)
        with pytest.raises(ConfigurationError, match=variable):
            load_settings()
        monkeypatch.delenv(variable)


def test_the_clip_model_directory_is_read(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MEMORY_DATA_DIR", str(tmp_path))
    assert load_settings().model_dir == tmp_path / "models"
    monkeypatch.setenv("ASSET_EMBED_PROVIDER", "clip")
    monkeypatch.setenv("ASSET_EMBED_MODEL_DIR", str(tmp_path / "elsewhere"))
    settings = load_settings()
    assert settings.asset_embed_provider == "clip"
    assert settings.model_dir == tmp_path / "elsewhere"


def test_query_cache_settings_are_read_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings()
    assert settings.asset_query_cache_size == 512
    assert settings.asset_query_cache_ttl_seconds == 600.0
    monkeypatch.setenv("ASSET_QUERY_CACHE_SIZE", "0")
    monkeypatch.setenv("ASSET_QUERY_CACHE_TTL_SECONDS", "30")
    settings = load_settings()
    assert settings.asset_query_cache_size == 0
    assert settings.asset_query_cache_ttl_seconds == 30.0
    for variable, value in (
        ("ASSET_QUERY_CACHE_SIZE", "-1"),
        ("ASSET_QUERY_CACHE_SIZE", "100001"),
        ("ASSET_QUERY_CACHE_TTL_SECONDS", "86401"),
    ):
        monkeypatch.setenv(variable, value)
        with pytest.raises(ConfigurationError, match=variable):
            load_settings()
        monkeypatch.delenv(variable)


def test_ocr_settings_are_read_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings()
    assert (settings.asset_ocr, settings.asset_ocr_timeout_seconds) == ("screenshots", 30.0)
    monkeypatch.setenv("ASSET_OCR", "all")
    monkeypatch.setenv("ASSET_OCR_TIMEOUT_SECONDS", "5")
    settings = load_settings()
    assert (settings.asset_ocr, settings.asset_ocr_timeout_seconds) == ("all", 5.0)
    for variable, value in (("ASSET_OCR", "sometimes"), ("ASSET_OCR_TIMEOUT_SECONDS", "0")):
        monkeypatch.setenv(variable, value)
        with pytest.raises(ConfigurationError, match=variable):
            load_settings()
        monkeypatch.delenv(variable)


def test_the_worker_reconcile_interval_is_read_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings().asset_worker_reconcile_seconds == 600.0
    monkeypatch.setenv("ASSET_WORKER_RECONCILE_SECONDS", "0")
    assert load_settings().asset_worker_reconcile_seconds == 0.0
    for value in ("-1", "86401"):
        monkeypatch.setenv("ASSET_WORKER_RECONCILE_SECONDS", value)
        with pytest.raises(ConfigurationError, match="ASSET_WORKER_RECONCILE_SECONDS"):
            load_settings()


def test_the_jobs_page_poll_interval_is_read_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings().web_jobs_poll_milliseconds == 1500
    monkeypatch.setenv("WEB_JOBS_POLL_MILLISECONDS", "300")
    assert load_settings().web_jobs_poll_milliseconds == 300
    for value in ("99", "60001", "0", "soon"):
        monkeypatch.setenv("WEB_JOBS_POLL_MILLISECONDS", value)
        with pytest.raises(ConfigurationError, match="WEB_JOBS_POLL_MILLISECONDS"):
            load_settings()


def test_fetch_dev_hosts_are_off_by_default() -> None:
    assert load_settings().asset_fetch_dev_hosts == ()


def test_fetch_dev_hosts_are_read_in_one_canonical_form(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "ASSET_FETCH_DEV_HOSTS",
        " 127.0.0.1:8000, LocalHost.:8001,[0:0:0:0:0:0:0:1]:8002,web:80,localhost:8001",
    )
    hosts = load_settings().asset_fetch_dev_hosts
    assert [str(pair) for pair in hosts] == [
        "127.0.0.1:8000",
        "localhost:8001",  # lower case, no trailing dot, given twice and kept once
        "[::1]:8002",
        "web:80",
    ]
    assert hosts[2] == DevHost("::1", 8002)


def test_fetch_dev_hosts_given_as_a_list_are_checked_too() -> None:
    settings = MemorySettings.model_validate(
        {"asset_fetch_dev_hosts": ["LOCALHOST:8000", "[::1]:9"]}
    )
    assert settings.asset_fetch_dev_hosts == (DevHost("localhost", 8000), DevHost("::1", 9))
    with pytest.raises(ValueError, match="needs a port"):
        MemorySettings.model_validate({"asset_fetch_dev_hosts": ["localhost"]})


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("localhost", "needs a port"),
        ("127.0.0.1", "needs a port"),
        ("localhost:", "the port must be a number from 1 to 65535"),
        ("localhost:0", "the port must be a number from 1 to 65535"),
        ("localhost:65536", "the port must be a number from 1 to 65535"),
        ("localhost:+80", "the port must be a number from 1 to 65535"),
        ("localhost:\uff18\uff10", "the port must be a number from 1 to 65535"),  # full-width
        ("localhost:http", "the port must be a number from 1 to 65535"),
        ("http://localhost:8000", "write host:port only"),
        ("localhost:8000/page", "write host:port only"),
        ("user@localhost:8000", "write host:port only"),
        ("*:8000", "write host:port only"),
        ("::1:8000", "write an IPv6 address in brackets"),
        ("[::1]8000", "write an IPv6 address as [address]:port"),
        ("[::1:8000", "write an IPv6 address as [address]:port"),
        ("[127.0.0.1]:8000", "only IPv6 addresses are written in brackets"),
        ("[localhost]:8000", "is not an IPv6 address"),
        ("0.0.0.0:8000", "an unspecified, multicast or link-local address"),
        ("[::]:8000", "an unspecified, multicast or link-local address"),
        ("169.254.169.254:80", "an unspecified, multicast or link-local address"),
        ("[fe80::1]:80", "an unspecified, multicast or link-local address"),
        ("224.0.0.1:80", "an unspecified, multicast or link-local address"),
        ("[::ffff:127.0.0.1]:80", "write the IPv4 address itself"),
        ("127.1:8000", "canonical dotted-decimal"),
        ("2130706433:8000", "canonical dotted-decimal"),
        ("bad_name:8000", "neither an IP address nor a host name"),
        ("-web:8000", "neither an IP address nor a host name"),
        ("a..b:8000", "neither an IP address nor a host name"),
        ("éxample.test:8000", "neither an IP address nor a host name"),
        ("127.0.0.1:8000,,localhost:8001", "an entry is empty"),
        ("127.0.0.1:8000,", "an entry is empty"),
    ],
)
def test_bad_fetch_dev_hosts_stop_the_start_naming_the_entry(
    monkeypatch: pytest.MonkeyPatch, entry: str, why: str
) -> None:
    monkeypatch.setenv("ASSET_FETCH_DEV_HOSTS", entry)
    with pytest.raises(ConfigurationError) as caught:
        load_settings()
    message = str(caught.value)
    assert message.startswith("invalid configuration: ASSET_FETCH_DEV_HOSTS: ")
    assert why in message
    if why != "an entry is empty":
        bad = entry.split(",")[0]
        assert repr(bad) in message  # the entry itself, as written
