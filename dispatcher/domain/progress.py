"""How far a running job got, as its handler says (``ctx.progress(done, total, message)``).

A report costs no call: the runner carries each running job's latest report in its heartbeat's
write of the bundle item (``progress``, by job id), and in the job's own item with each
checkpoint, so a rerun that resumes from its checkpoint resumes its progress too. The ETA is
the rate of this attempt so far: what it has done since it started (``base``: what the attempt
resumed from) over the time it took, carried to ``total``.
"""

from __future__ import annotations

import math
import reprlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from dispatcher.domain import sizes
from dispatcher.domain.errors import PermanentError

MAX_MESSAGE = 200  # characters of a report's message kept (a longer one is cut)
# An ETA further off than this (a year) is none: a rate that slow says nothing yet.
MAX_ETA_SECONDS = 366 * 86_400.0
# Reports a heartbeat carries at most (the latest ones), within the bundle item's budget
# (dispatcher.domain.sizes), however many jobs its task runs at once.
MAX_REPORTED = sizes.MAX_PROGRESS_REPORTED


class InvalidProgress(PermanentError):
    """A report a person could not read: ``done`` or ``total`` not a finite number >= 0 (a
    handler's bug: uncaught, it fails the job at once, as a PermanentError does)."""


@dataclass(frozen=True)
class Progress:
    done: float
    total: float | None
    message: str | None
    at: float  # when it was reported
    since: float  # when this attempt started
    base: float = 0.0  # what this attempt resumed from (its checkpoint's report's done)

    @property
    def percent(self) -> float | None:
        if not self.total:
            return None
        return min(100.0, 100.0 * self.done / self.total)

    def eta(self) -> float | None:
        """When it ends at the rate of this attempt so far (None: no total, no rate yet, or
        further off than :data:`MAX_ETA_SECONDS`, which says nothing a person can use)."""
        if self.total is None or self.done >= self.total:
            return None
        elapsed, made = self.at - self.since, self.done - self.base
        if elapsed <= 0 or made <= 0:
            return None
        left = (self.total - self.done) * elapsed / made
        return self.at + left if math.isfinite(left) and left <= MAX_ETA_SECONDS else None

    def left(self, now: float) -> str | None:
        """How long until the ETA, as ``4m10s`` (None: no ETA)."""
        eta = self.eta()
        return None if eta is None else _span(max(0.0, eta - now))

    def words(self, now: float, *, eta: bool = True) -> str:
        """``42% (420 of 1000), eta 12:03:10 UTC (in 4m10s): resizing`` (``eta``: with the
        ETA, for a job that runs)."""
        count = f"{_num(self.done)} of {_num(self.total)}" if self.total is not None \
            else _num(self.done)
        text = f"{self.percent:.0f}% ({count})" if self.percent is not None else count
        eta_at = self.eta() if eta else None
        if eta_at is not None:
            clock = datetime.fromtimestamp(eta_at, UTC).strftime("%H:%M:%S UTC")
            text += f", eta {clock} (in {self.left(now)})"
        return text + (f": {self.message}" if self.message else "")

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"done": self.done, "at": self.at, "since": self.since}
        if self.total is not None:
            out["total"] = self.total
        if self.message:
            out["message"] = self.message
        if self.base:
            out["base"] = self.base
        return out

    @staticmethod
    def from_json(data: Any) -> Progress | None:
        """A stored report, or None for anything that is not one."""
        if not isinstance(data, dict):
            return None
        try:
            total = data.get("total")
            return Progress(float(data["done"]), None if total is None else float(total),
                            data.get("message") or None, float(data["at"]),
                            float(data["since"]), float(data.get("base") or 0.0))
        except (KeyError, TypeError, ValueError):
            return None


def report(done: Any, total: Any, message: Any, *, at: float, since: float, base: float,
           job_id: str) -> Progress:
    """A handler's report, checked: numbers finite and >= 0, a message text or None
    (``InvalidProgress`` naming the job), the message cut to :data:`MAX_MESSAGE`
    characters."""
    def number(name: str, value: Any) -> float:
        try:
            ok = not isinstance(value, bool) and isinstance(value, (int, float)) \
                and math.isfinite(float(value)) and value >= 0
        except OverflowError:  # an int past a float's range
            ok = False
        if not ok:
            raise InvalidProgress(f"ctx.progress: {name} must be a finite number >= 0, not "
                                  f"{reprlib.repr(value)}", job_id=job_id)
        return float(value)

    if message is not None and not isinstance(message, str):
        raise InvalidProgress(f"ctx.progress: message must be text or None, not "
                              f"{type(message).__name__}", job_id=job_id)
    return Progress(number("done", done), None if total is None else number("total", total),
                    message[:MAX_MESSAGE] if message else None, at, since, base)


def latest(reports: dict[str, Progress]) -> dict[str, dict[str, Any]]:
    """What a heartbeat carries of its running jobs' reports: the latest
    :data:`MAX_REPORTED`, as JSON."""
    kept = sorted(reports.items(), key=lambda kv: kv[1].at, reverse=True)[:MAX_REPORTED]
    return {job_id: p.as_json() for job_id, p in kept}


def _num(value: float | None) -> str:
    if value is None:
        return "?"
    return str(int(value)) if value == int(value) else f"{value:g}"


def _span(seconds: float) -> str:
    s = int(seconds)
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"
