"""Log redaction: no image bytes, base64, signed URLs, keys or raw identities reach a log."""

from __future__ import annotations

import base64
import contextlib
import json
import logging

import pytest
import structlog

from memory_db.logs import configure_logging, identity_digest, redact_event, redact_text

SIGNED = (
    "https://bucket.s3.amazonaws.com/production/tenants/ans_x/objects/aob_y/original.png"
    "?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=deadbeef&X-Amz-Expires=300"
)
LOCAL_SIGNED = "http://127.0.0.1:8765/objects/p/original.png?expires=1&signature=abcDEF"
API_KEY = "mk_" + "A1b2C3d4" * 5
B64 = base64.b64encode(bytes(range(256)) * 4).decode()


def _redact(**event: object) -> dict[str, object]:
    return dict(redact_event(None, "info", dict(event)))


def test_sensitive_keys_are_masked() -> None:
    out = _redact(api_key=API_KEY, authorization="Bearer x", jina_api_keys=["a", "b"], secret="s")
    assert (
        out["api_key"]
        == out["authorization"]
        == out["jina_api_keys"]
        == out["secret"]
        == "[redacted]"
    )


def test_bytes_are_replaced_by_their_length() -> None:
    assert _redact(body=b"\x89PNG....")["body"] == "[8 bytes]"
    assert _redact(chunk=memoryview(b"abc"))["chunk"] == "[3 bytes]"


def test_base64_and_data_urls_are_removed() -> None:
    out = _redact(
        image_base64=B64, note=f"got {B64} from caller", url="data:image/png;base64," + B64
    )
    assert B64 not in json.dumps(out)
    assert B64[:100] not in json.dumps(out)


def test_signed_url_queries_are_removed() -> None:
    out = _redact(url=SIGNED, message=f"preview at {LOCAL_SIGNED}")
    text = json.dumps(out)
    assert "X-Amz-Signature" not in text and "deadbeef" not in text
    assert "signature=abcDEF" not in text
    assert "original.png" in text  # the path (opaque ids) stays useful


def test_credentials_in_urls_are_removed() -> None:
    text = redact_text(
        "call_tool image_asset_save with {'sourceUrl': 'https://user:pw@127.0.0.1/x.png?a=1'}"
    )
    assert "user:pw" not in text and "pw@" not in text
    assert "https://[redacted]@127.0.0.1/x.png" in text


def test_identities_become_digests() -> None:
    out = _redact(owner_identity="Alice@Example.com", event="granted to bob@example.com")
    assert out["owner_identity"] == identity_digest("alice@example.com")
    assert "bob@example.com" not in str(out["event"])
    assert identity_digest("bob@example.com") in str(out["event"])


def test_api_keys_in_free_text_are_masked() -> None:
    assert API_KEY not in redact_text(f"failed with key {API_KEY}")


def test_nested_structures_are_redacted() -> None:
    out = _redact(detail={"request": {"headers": {"authorization": "Bearer t"}, "body": b"xx"}})
    assert out["detail"] == {
        "request": {"headers": {"authorization": "[redacted]"}, "body": "[2 bytes]"}
    }


def test_configured_pipeline_redacts_stdlib_and_structlog_records(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging("json", "info")
    try:
        structlog.get_logger("t").info(
            "saved", owner="carol@example.com", url=SIGNED, api_key=API_KEY
        )
        logging.getLogger("other").warning("presented %s for dave@example.com", API_KEY)
    finally:
        structlog.reset_defaults()
        logging.getLogger().handlers.clear()
    err = capsys.readouterr().err
    lines = [json.loads(line) for line in err.splitlines() if line.strip()]
    assert len(lines) == 2
    assert "carol@example.com" not in err and "dave@example.com" not in err
    assert API_KEY not in err and "deadbeef" not in err
    assert lines[0]["event"] == "saved"


class _ReadCounting(dict[str, str]):
    """A field whose reading is counted: the redaction reads a mapping's items."""

    reads = 0

    def items(self):  # type: ignore[override]
        type(self).reads += 1
        return super().items()


def test_a_line_below_the_level_is_dropped_before_any_processor(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging("json", "warning")
    _ReadCounting.reads = 0
    try:
        structlog.get_logger("t").info("asset_searched", probe=_ReadCounting(a="b"))
        dropped = _ReadCounting.reads
        structlog.get_logger("t").warning("slow", probe=_ReadCounting(a="b"))
    finally:
        structlog.reset_defaults()
        logging.getLogger().handlers.clear()
        logging.getLogger().setLevel(logging.WARNING)
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.strip()]
    # Before, the redaction (and every other processor) ran for the info line too, and only
    # then did the standard library's logger drop it.
    assert dropped == 0
    assert _ReadCounting.reads == 1
    assert [(line["event"], line["probe"]) for line in lines] == [("slow", {"a": "b"})]


def _decode_a_truncated_jpeg() -> None:
    import pyvips

    whole = pyvips.Image.xyz(128, 128)[0].cast("uchar").jpegsave_buffer(Q=90)
    with contextlib.suppress(pyvips.Error):
        pyvips.Image.new_from_buffer(whole[: len(whole) // 2], "").avg()


@pytest.mark.parametrize(("level", "seen"), [("info", False), ("debug", True)])
def test_libvips_messages_are_debug_and_frameworks_share_the_pipeline(
    capsys: pytest.CaptureFixture[str], level: str, seen: bool
) -> None:
    # A framework logger with its own console handler that does not propagate (as fastmcp's).
    framework = logging.getLogger("uvicorn.error")
    framework.addHandler(logging.StreamHandler())
    framework.propagate = False
    try:
        assert configure_logging("json", level) is True
        _decode_a_truncated_jpeg()
        framework.info("Started server process")
    finally:
        structlog.reset_defaults()
        logging.getLogger().handlers.clear()
        logging.getLogger().setLevel(logging.WARNING)  # later tests must not log at debug
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.strip()]
    # pyvips' per-call chatter (arguments, result buffers) never reaches the log, at any level.
    assert not [line for line in lines if str(line["logger"]).startswith("pyvips.")]
    assert not any("VipsOperation" in line["event"] for line in lines)
    libvips = [line for line in lines if line["logger"] == "pyvips"]
    assert bool(libvips) is seen and all(line["level"] == "debug" for line in libvips)
    assert all(line["event"].startswith("VIPS: ") for line in libvips)
    assert [line["event"] for line in lines if line["logger"] == "uvicorn.error"] == [
        "Started server process"
    ]
