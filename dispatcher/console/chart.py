"""The overview's chart of jobs ended per hour: bars drawn as SVG on the server.

The page's CSP allows no inline script and no inline style (``style-src 'self'``), so the
chart is SVG elements with classes the package's stylesheet colours, its geometry computed
here; each bar carries its figures as text (``<title>``), read by assistive technology and
shown on hover.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from dispatcher.ops.usage import EndedHour

WIDTH = 720.0
HEIGHT = 160.0
GAP = 2.0  # between bars


@dataclass(frozen=True)
class Bar:
    """One hour's bar: its left edge and width, and the heights (from the baseline) of its
    succeeded part (below) and failed part (on top), in the chart's units."""

    x: float
    width: float
    succeeded_height: float
    failed_height: float
    label: str  # the hour, UTC (HH:00)
    title: str  # its figures in words


@dataclass(frozen=True)
class Chart:
    bars: list[Bar]
    peak: int  # the highest hour's jobs: the top of the scale
    ended: int
    failed: int
    width: float = WIDTH
    height: float = HEIGHT


def chart(hours: list[EndedHour]) -> Chart:
    """Bars for ``hours`` (oldest first), scaled so the busiest hour fills the height."""
    peak = max((h.ended for h in hours), default=0)
    width = WIDTH / max(1, len(hours))
    bars = []
    for n, h in enumerate(hours):
        scale = HEIGHT / peak if peak else 0.0
        at = datetime.fromtimestamp(h.hour, UTC).strftime("%H:00")
        bars.append(Bar(n * width + GAP / 2, max(0.0, width - GAP), h.succeeded * scale,
                        h.failed * scale, at,
                        f"{at} UTC: {h.ended} ended, {h.succeeded} succeeded, {h.failed} failed"))
    return Chart(bars, peak, sum(h.ended for h in hours), sum(h.failed for h in hours))
