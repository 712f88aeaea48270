"""The whole-system model's check of the kind limits (``LONGJOBS_KIND_LIMITS``): the handlers
of a limited kind running at once, in all tasks, never exceed its limit.

A changed limit applies to the bundles launched from then on (a running bundle keeps the slots
its launch decided), so the bound is the largest limit in force since the kind last had no
handler running: every run live now started after that. A kind without a limit at any moment
of that window has no bound in it. The model's settings change only between steps, and the
check runs after every step, so it sees every limit in force."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from tests.model_runner import SimTask


class KindLimitWatch:
    def __init__(self) -> None:
        # Per kind with live runs: the largest limit in force since it had none (None: it
        # was unlimited at some moment since).
        self._bound: dict[str, int | None] = {}

    def check(self, tasks: Iterable[SimTask], limits: Mapping[str, int]) -> list[str]:
        live: Counter[str] = Counter()
        for sim in tasks:
            for job_id in sim.live_runs():
                live[sim.runs[job_id].job.kind] += 1
        out = []
        for kind in list(self._bound):
            if not live[kind]:
                del self._bound[kind]  # idle: its next runs start under the limits of then
        for kind, n in sorted(live.items()):
            now = limits.get(kind)
            was = self._bound.get(kind, now) if kind in self._bound else now
            bound = None if now is None or was is None else max(now, was)
            self._bound[kind] = bound
            if bound is not None and n > bound:
                out.append(f"{n} handlers of kind {kind} run at once, over its limit {bound} "
                           f"(the largest in force since it last had none running)")
        return out


def parse_limits(text: str) -> dict[str, int]:
    """``LONGJOBS_KIND_LIMITS`` as the model sets it (``report=2,resize=1``)."""
    return {k: int(v) for k, v in (part.split("=") for part in text.split(",") if part)}
