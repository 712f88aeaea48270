"""A schedule's fire at admission: noted on the schedule's record, and skipped if its schedule
says so (:mod:`dispatcher.domain.schedules`).

Scheduler sends a fire to the job queue with no code of ours in between, so the dispatcher
judges the overlap as it admits the fire: a fire of a ``skip`` schedule whose last run (the
job of its last fire that ran) is still pending or running runs nothing; it is recorded as
its job, CANCELLED with the reason, and its messages deleted. Every fire, run or skipped, is
noted on the schedule's record (``schedules show`` lists them). A fire judged once is judged
the same again: a second delivery of it (Scheduler's retry, SQS's at-least-once) finds itself
on the record and does what the first did; one noted as run whose job is not recorded (its
recording failed, and it comes back) is judged again against the last run, which may have
started meanwhile. A last run the table does not know (its fire noted, its job never
recorded) is not in the way: should it come back, it is judged then.

Costs a GetItem and a PutItem per fire (and a read of the last run's state for ``skip``), on
the drain's thread: schedules fire at most once a minute each, so this is no job's hot path.
"""

from __future__ import annotations

from collections.abc import Mapping

from dispatcher.domain import schedules
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
        if seen is not None and seen.outcome == SKIPPED:
            return seen.reason  # delivered again: skipped again, its record and job agree
        previous = record.last_run
        if overlap != Overlap.SKIP or previous is None or previous == job.job_id:
            if seen is None:
                self._store.save_fire_record(record.noted(Fire(at, job.job_id, RAN)))
            return None
        asked = [previous] if seen is None else [previous, job.job_id]
        states = self._store.job_states(asked)
        if seen is not None and states.get(job.job_id) is not None:
            return None  # ran, and recorded: a duplicate of its job
        # Noted as run but not recorded (its recording failed; it comes back now) is judged
        # again: another fire may have run since, while this one was on its way.
        state = str(JobState.PENDING) if previous in admitted_here else states.get(previous)
        if state in _LIVE:
            reason = schedules.skip_reason(name, previous, str(state))
            self._store.save_fire_record(record.noted(Fire(at, job.job_id, SKIPPED, reason)))
            return reason
        if seen is None:
            self._store.save_fire_record(record.noted(Fire(at, job.job_id, RAN)))
        return None
