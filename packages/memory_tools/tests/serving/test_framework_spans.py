"""fastmcp's spans are off in a serving process unless FASTMCP_TELEMETRY_MODE asks for them."""

from __future__ import annotations

import fastmcp
import pytest
from fastmcp.telemetry import telemetry_mode

from memory_tools.serving.framework_spans import MODE_VARIABLE, spans_off_unless_asked


@pytest.fixture(autouse=True)
def _restore_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fastmcp.settings, "telemetry_mode", fastmcp.settings.telemetry_mode)


def test_spans_are_off_when_nobody_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MODE_VARIABLE, raising=False)
    monkeypatch.setattr(fastmcp.settings, "telemetry_mode", "native")  # fastmcp's default
    spans_off_unless_asked()
    assert telemetry_mode() == "off"


@pytest.mark.parametrize("asked", ["native", "propagation_only"])
def test_an_operators_mode_is_kept(monkeypatch: pytest.MonkeyPatch, asked: str) -> None:
    monkeypatch.setenv(MODE_VARIABLE, asked)
    monkeypatch.setattr(fastmcp.settings, "telemetry_mode", asked)  # read at import
    spans_off_unless_asked()
    assert telemetry_mode() == asked
