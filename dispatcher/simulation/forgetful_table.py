"""A table twin that forgets a job's item some minutes after the job ended: for a stream of
millions of jobs, which the twin would otherwise hold all at once (about 10 KB a job).

The stack's table keeps an ended job until its TTL (days); nothing the dispatcher, the runner or
the stop handler does reads a job long after it ended: the next take reads the follow-ons, a
task's stop settles only the bundle it ran last, the timeout check reads RUNNING jobs, and a
message delivered again comes back within ``LONGJOBS_HOLD_SECONDS`` (120 s) of its receipt,
long before its job's item is forgotten. So the model's stream forgets ended jobs
``keep_seconds`` after they ended (10 minutes of virtual time), keeping only what the run's
ledger judges them by (:attr:`ForgetfulTable.ended`: each one's final state and attempts
budget)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from dispatcher.domain.jobs import JobState
from dispatcher.ports.table import Record
from dispatcher.testing.memory_table import MemoryTable

FINAL = (str(JobState.SUCCEEDED), str(JobState.FAILED))
KEEP_SECONDS = 600.0


class ForgetfulTable(MemoryTable):
    def __init__(self, clock: Callable[[], float], keep_seconds: float = KEEP_SECONDS) -> None:
        super().__init__(clock=clock)
        self.keep_seconds = keep_seconds
        self.ended: dict[str, tuple[str, float]] = {}  # job id -> (final state, max_attempts)
        self._due: deque[tuple[float, str]] = deque()  # (when to forget, pk), in that order

    def _set(self, pk: str, rec: Record | None) -> None:
        super()._set(pk, rec)
        now = self._clock()
        if rec is not None and rec.job_id and rec.state in FINAL and pk.startswith("JOB#"):
            self.ended[rec.job_id] = (rec.state, float(rec.max_attempts or 0))
            self._due.append((now + self.keep_seconds, pk))
        while self._due and self._due[0][0] <= now:
            _, old = self._due.popleft()
            item = self._items.get(old)
            if item is not None and item.state in FINAL:  # not moved on since (a retry)
                super()._set(old, None)
