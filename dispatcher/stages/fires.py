"""A schedule's fire at admission: noted on the schedule's record, and skipped if its schedule
says so (:mod:`dispatcher.domain.schedules`).

Scheduler sends a fire to the job queue with no code of ours in between, so the dispatcher
judges the overlap as it admits the fire: a fire of a ``skip`` schedule whose last run (the
job of its last fire that ran) is still pending or running runs nothing; it is recorded as
its job, CANCELLED with the reason, and its messages deleted. Every fire, run or skipped, is
noted on the schedule's record (``schedules show`` lists them). A fire judged once is judged
the same again: a second delivery of it (Scheduler's retry, SQS's at-least-once) finds itself
on the record and does what the first did.

Costs a GetItem and a PutItem per fire (and a read of the last run's state for ``skip``), on
the drain's thread: schedules fire at most once a minute each, so this is no job's hot path.
"""

from __future__ import annotations

from collections.abc import Mapping

from dispatcher.domain import schedules
from dispatcher.domain.dependencies import UNKNOWN_GRACE_SECONDS
from dispatcher.domain.jobs import Job, JobState
from dispatcher.domain.schedules import RAN, SKIPPED, Fire, Overlap
from dispatcher.store import StageStore

_LIVE = (str(JobState.PENDING), str(JobState.RUNNING))


class FireGate:
    """Judges and notes schedules' fires as a drain admits them."""

    def __init__(self, store: StageStore) -> None:
        self._store = store

    def judge(self, name: str, overlap: Overlap, job: Job, admitted_here: Mapping[str, str],
              now: float) -> str | None:
        """Note the fire whose job is ``job`` on schedule ``name``'s record; return why it is
        skipped, or None if it runs. ``admitted_here``: the job ids this drain admitted and
        has not necessarily recorded yet (a live run the table does not show)."""
        fire = schedules.fire_of(job.job_id)
        at = fire[1] if fire else schedules.fire_time(now)
        record = self._store.fire_record(name)
        seen = next((f for f in record.fires if f.job_id == job.job_id), None)
        if seen is not None:  # delivered again: as it was judged the first time
            return seen.reason if seen.outcome == SKIPPED else None
        reason = None
        previous = record.last_run
        if overlap == Overlap.SKIP and previous is not None and previous != job.job_id:
            state = self._live_state(previous, admitted_here, now)
            if state is not None:
                reason = schedules.skip_reason(name, previous, state)
        outcome = SKIPPED if reason else RAN
        self._store.save_fire_record(record.noted(Fire(at, job.job_id, outcome, reason)))
        return reason

    def _live_state(self, job_id: str, admitted_here: Mapping[str, str],
                    now: float) -> str | None:
        """The state of the last run if it is live (pending, running, or on its way to the
        table), else None."""
        if job_id in admitted_here:
            return str(JobState.PENDING)
        state = self._store.job_states([job_id]).get(job_id)
        if state in _LIVE:
            return state
        if state is None:
            # Noted as run but not recorded: its recording failed and its message comes back,
            # or it never will (sent to the dead-letter queue). Live for as long as a
            # dependency on an unknown job waits for it, then no longer in the way.
            fire = schedules.fire_of(job_id)
            at = schedules.fire_epoch(fire[1]) if fire else 0.0
            if now - at < UNKNOWN_GRACE_SECONDS:
                return "on its way to the table (its fire was noted, its job not recorded yet)"
        return None

