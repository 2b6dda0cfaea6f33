"""fastmcp's OpenTelemetry spans: off in a serving process unless the operator asks for them.

Nothing in this server exports spans: no OpenTelemetry SDK is installed with it, so fastmcp's
spans go to the API's no-op tracer. Its default mode (``native``) still builds each call's span
attributes, opens and enriches a span and carries the trace context through the request: about
0.2 ms of the event loop per tool call, a fiftieth of a search's server CPU
(docs/performance.md). An operator who installs an SDK and an exporter sets
``FASTMCP_TELEMETRY_MODE=native`` (or ``propagation_only``) and gets them back.
"""

from __future__ import annotations

import os

import fastmcp

MODE_VARIABLE = "FASTMCP_TELEMETRY_MODE"


def spans_off_unless_asked() -> None:
    """Switch fastmcp's spans off for this process, unless ``FASTMCP_TELEMETRY_MODE`` is set.

    fastmcp reads its mode on every call (``fastmcp.telemetry.telemetry_mode``), so this takes
    effect whenever it runs; an operator's own setting was read at import and is kept.
    """
    if MODE_VARIABLE not in os.environ:
        fastmcp.settings.telemetry_mode = "off"
