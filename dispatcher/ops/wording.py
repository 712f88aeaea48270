"""How the operator faces say things to a person: times, dollars, durations, what a job waits
for, how a run's task stopped and what a job cost, in words. The CLI prints them on a terminal
and the console on a page, so both say the same thing the same way."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from dispatcher.domain.errors import LongjobsError

if TYPE_CHECKING:
    from dispatcher.domain.costs import JobCost
    from dispatcher.domain.progress import Progress

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_DURATION_SECONDS = 100 * 365 * 86400


def is_duration(text: str) -> bool:
    return _DURATION.match(text) is not None


def parse_duration(text: str, name: str = "--since") -> float:
    """``90``, ``45s``, ``15m``, ``2h``, ``1d`` -> seconds; ``name``: what the person typed it
    into, for the error."""
    match = _DURATION.match(text)
    if not match:
        raise LongjobsError(f"{name} {text!r} is not a duration like 15m, 2h or 1d")
    seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if seconds > MAX_DURATION_SECONDS:
        raise LongjobsError(f"{name} {text!r} is longer than 100 years")
    return seconds


def parse_since(text: str) -> tuple[float | None, float | None]:
    """``stats --since``: a duration (``6h``: (None, seconds)) or a UTC time
    (``2026-12-01T00:00``: (its timestamp, None))."""
    if is_duration(text):
        return None, parse_duration(text)
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise LongjobsError(f"--since {text!r} is neither a duration like 6h or 1d nor a time "
                            "like 2026-12-01T00:00") from None
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp(), None


def when(iso_text: str | None) -> str:
    """``2026-11-30 05:49:56`` (UTC; --json keeps the microseconds)."""
    return iso_text[:19].replace("T", " ") if iso_text else "-"


def task_id(arn: str | None) -> str:
    return arn.rsplit("/", 1)[-1] if arn else "-"


def dollars(amount: float) -> str:
    """Dollars to a millionth of a dollar below a cent (small jobs cost that little)."""
    return f"${amount:,.2f}" if amount >= 1 else f"${amount:.6f}"


def cost_text(c: JobCost) -> str:
    """A job's cost in words: dollars, its run time, and what is not settled yet."""
    tasks = f"{c.tasks} task" + ("s" if c.tasks != 1 else "")
    said = f"{dollars(c.dollars)} for {c.seconds:,.1f} s of runs on {tasks}"
    if c.final:
        return said + " (its share of their bills)"
    return (said + f"; {c.pending_seconds:,.1f} s on a task still running, or whose stop was "
            "not seen with its bill: added when it stops")


def cost_cell(c: JobCost | None) -> str:
    """A row's COST: dollars, with ``+`` while a task that ran it has not stopped."""
    if c is None:
        return "-"
    return dollars(c.dollars) + ("" if c.final else " +")


def progress_cell(p: Progress, now: float, wide: bool) -> str:
    """A row's PROGRESS: ``42% eta 4m10s`` (its message too with ``wide``)."""
    text = f"{p.percent:.0f}%" if p.percent is not None else f"{p.done:g} done"
    left = p.left(now)
    if left is not None:
        text += f" eta {left}"
    return text + (f" {p.message}" if wide and p.message else "")


def stop_said(code: str | None, exit_code: int | None, cls: str | None,
              outcome: str | None) -> str:
    """How an attempt's task stopped, in words: every stop names its cause, or says plainly
    that ECS gave none; an attempt its runner ended while the task went on has no stop."""
    if code is None and exit_code is None and cls is None:
        return "its runner ended it; the task went on (no stop of its own)" if outcome \
            else "no stop of its task seen yet"
    exit_said = "no exit code" if exit_code is None else f"exit {exit_code}"
    cause = f"stop code {code}" if code else "no stop code given by ECS (nor who stopped it)"
    return f"{cause}  {exit_said}  class {cls or 'not decided'}"


def waiting_text(w: dict[str, object]) -> str:
    """``reason`` then its numbers, e.g. ``kind_limit (render: 4/4 running)``."""
    reason = w["reason"]
    if reason == "kind_limit":
        text = f"{reason} ({w.get('kind')}: {w.get('running')}/{w.get('limit')} running)"
    elif reason == "capacity" and "limit" in w:
        text = f"{reason} (tasks {w.get('running')}/{w.get('limit')})"
    elif reason == "priority":
        text = f"{reason} ({w.get('ahead')} due bundles ahead)"
    elif reason == "rate_limit":
        text = f"{reason} ({w.get('key')}: its next tokens"
        text += ")" if "until" in w else " do not fit the burst)"
    else:
        text = str(reason)
    if "until" in w:
        text += f" until {when(str(w['until']))}"
    if "since" in w:
        text += f" since {when(str(w['since']))}"
    if "attempt" in w:
        text += f", attempt {w['attempt']}"
    for key in ("task_arn", "launch_id", "last_error", "detail"):
        if w.get(key):
            text += f"; {key.replace('_', ' ')}: {w[key]}"
    return text
