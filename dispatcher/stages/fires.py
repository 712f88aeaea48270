"""A schedule's fire at admission: noted on the schedule's record, and skipped if its schedule
says so (:mod:`dispatcher.domain.schedules`).

Scheduler sends a fire to the job queue with no code of ours in between, so the dispatcher
judges the overlap as it admits the fire: a fire of a ``skip`` schedule whose last run (the
job of its last fire that ran) is still pending or running runs nothing, nor does one while a
run is live that an operator's retry of a fire's job ran beside (the retried job is the last
run then, and the runs before it are kept on the record as well); it is recorded as its job,
CANCELLED with the reason, and its messages deleted. Every fire, run or skipped, is noted on
the schedule's record (``schedules show`` lists them). A fire judged once is judged
the same again: a second delivery of it (Scheduler's retry, SQS's at-least-once) finds itself
on the record and does what the first did; one noted as run whose job is not recorded (its
recording failed, and it comes back) is judged again against the last run, which may have
started meanwhile. A last run the table does not know (its fire noted, its job never
recorded) is not in the way: should it come back, it is judged then.

Costs a GetItem of the record, a read of the fire's own job (a delivery older than the record's
fires is still a duplicate) and, for ``skip``, of the runs it waits for (one BatchGetItem),
and a PutItem per fire, on the drain's thread: schedules fire at most once a minute each, so
this is no job's hot path.
"""

from __future__ import annotations

from collections.abc import Collection

from dispatcher.domain import schedules
from dispatcher.domain.jobs import Job, JobState
from dispatcher.domain.schedules import RAN, SKIPPED, Fire, FireRecord, Overlap
from dispatcher.store import StageStore

_LIVE = (str(JobState.PENDING), str(JobState.RUNNING))


class FireGate:
    """Judges and notes schedules' fires as a drain admits them."""

    def __init__(self, store: StageStore) -> None:
        self._store = store

    def judge(self, name: str, overlap: Overlap, job: Job, runs_here: Collection[str],
              now: float) -> str | None:
        """Note the fire whose job is ``job`` on schedule ``name``'s record; return why it is
        skipped, or None if it runs. ``runs_here``: the fires this drain let run, which the
        table may not show yet. A note another writer came between is judged again."""
        reason: str | None = None

        def change(record: FireRecord) -> FireRecord | None:
            nonlocal reason
            reason, fire = self._judged(record, name, overlap, job, runs_here, now)
            return record.noted(fire) if fire is not None else None

        self._store.note_fires(name, change)
        return reason

    def _judged(self, record: FireRecord, name: str, overlap: Overlap, job: Job,
                runs_here: Collection[str], now: float) -> tuple[str | None, Fire | None]:
        """(why it is skipped or None, the fire to note or None) on ``record``."""
        fire = schedules.fire_of(job.job_id)
        at = fire[1] if fire else schedules.fire_time(now)
        seen = next((f for f in record.fires if f.job_id == job.job_id), None)
        if seen is not None and seen.outcome == SKIPPED:
            return seen.reason, None  # delivered again: skipped again; record and job agree
        # The last run, and the runs an operator's retry put it beside (the retried job ran
        # beside them on purpose; the next fire may not): a fire of a skip schedule runs only
        # once none of them is live.
        waits = [j for j in record.runs if j != job.job_id] if overlap == Overlap.SKIP else []
        # One BatchGetItem; not job_states, whose look for a REJECTED record of each id not
        # found would cost a GetItem more for every new fire.
        states = {j.job_id: str(j.state) for j in self._store.get_jobs([job.job_id, *waits])}
        if states.get(job.job_id) is not None:
            return None, None  # recorded already: a duplicate of its job, however old
        for previous in waits:
            state = str(JobState.PENDING) if previous in runs_here else states.get(previous)
            if state in _LIVE:
                reason = schedules.skip_reason(name, previous, str(state),
                                               beside=previous != record.last_run)
                return reason, Fire(at, job.job_id, SKIPPED, reason)
        # Runs. One noted as run whose recording failed (it comes back now) was judged
        # against the runs again: another fire may have run while it was on its way.
        return None, (Fire(at, job.job_id, RAN) if seen is None else None)
