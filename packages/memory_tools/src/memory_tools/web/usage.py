"""The usage page: quota, bytes by project and provider tokens by month (docs/web.md#usage).

``GET /usage`` reads :func:`memory_tools.workflows.usage.my_usage` (the key's own identity, never
another owner's). The quota is a bar of used and reserved bytes with the numbers in text;
bytes by project are ``<meter>`` bars; tokens by month are a small bar chart drawn here as
inline SVG (no script, no library), with the same numbers in a table for screen readers and
for reading exact values.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.responses import Response
from starlette.routing import Route

from memory_tools.services import MemoryServices
from memory_tools.web.handlers import WebRequest, page
from memory_tools.workflows import usage as usage_workflows
from memory_tools.workflows.usage import MonthTotal

QUOTA_BAR_WIDTH = 1000  # SVG user units; the bar scales to the page's width
# The chart: the last months with tokens, at most this many bars.
CHART_MONTHS = 12
CHART_WIDTH = 640
CHART_HEIGHT = 200
_AXIS = 24  # room under the bars for month labels
_TOP = 16  # room above the highest bar for its value


@dataclass(frozen=True, slots=True)
class Bar:
    """One bar of the token chart, in SVG user units."""

    month: str
    tokens: int
    x: float
    y: float
    width: float
    height: float

    @property
    def centre(self) -> float:
        """Where the bar's labels are centred."""
        return self.x + self.width / 2


@dataclass(frozen=True, slots=True)
class Chart:
    """The token chart's bars and size."""

    bars: list[Bar]
    width: int = CHART_WIDTH
    height: int = CHART_HEIGHT
    baseline: float = CHART_HEIGHT - _AXIS


@dataclass(frozen=True, slots=True)
class QuotaBar:
    """The quota bar: used then reserved, as widths out of :data:`QUOTA_BAR_WIDTH`."""

    used: float
    reserved: float
    share: float  # percent of the quota taken (used + reserved)
    width: int = QUOTA_BAR_WIDTH


def quota_bar(quota: int, used: int, reserved: int) -> QuotaBar:
    """Widths of the used and reserved parts; anything above zero shows at least a sliver."""

    def part(count: int) -> float:
        if count <= 0:
            return 0.0
        return round(max(2.0, QUOTA_BAR_WIDTH * min(count, quota) / quota), 1) if quota else 0.0

    used_width = min(part(used), QUOTA_BAR_WIDTH)
    reserved_width = min(part(reserved), QUOTA_BAR_WIDTH - used_width)
    share = 100.0 * (used + reserved) / quota if quota else 100.0
    return QuotaBar(used=used_width, reserved=reserved_width, share=round(share, 1))


def token_chart(months: list[MonthTotal]) -> Chart:
    """Bars for the last :data:`CHART_MONTHS` months with tokens, oldest left."""
    shown = months[-CHART_MONTHS:]
    if not shown:
        return Chart(bars=[])
    highest = max(month.total_tokens for month in shown) or 1
    slot = CHART_WIDTH / len(shown)
    width = min(slot * 0.7, 56)
    room = CHART_HEIGHT - _AXIS - _TOP
    bars: list[Bar] = []
    for index, month in enumerate(shown):
        height = room * month.total_tokens / highest
        # A month with tokens always shows a sliver, so it is not mistaken for none.
        if month.total_tokens and height < 2:
            height = 2
        bars.append(
            Bar(
                month=month.month,
                tokens=month.total_tokens,
                x=round(index * slot + (slot - width) / 2, 1),
                y=round(CHART_HEIGHT - _AXIS - height, 1),
                width=round(width, 1),
                height=round(height, 1),
            )
        )
    return Chart(bars=bars)


def routes(services: MemoryServices) -> list[Route]:
    """``/usage``."""

    async def show(web: WebRequest) -> Response:
        report = await web.call(usage_workflows.my_usage)
        largest = max((project.bytes for project in report.projects), default=0)
        return web.render(
            "usage.html",
            title="Usage",
            report=report,
            chart=token_chart(report.months),
            bar=quota_bar(report.quota_bytes, report.used_bytes, report.reserved_bytes),
            largest_project=largest,
            free=max(0, report.quota_bytes - report.used_bytes - report.reserved_bytes),
        )

    return [page("/usage", show, services)]
