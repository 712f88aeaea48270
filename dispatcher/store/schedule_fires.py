"""The record of each schedule's fires (``SCHEDULE#<name>``), and the skipped fire's job.

One small item per schedule (:class:`dispatcher.domain.schedules.FireRecord`: the job of its
last fire that ran, its latest fires), written only by the tick that admits a fire (the tick
holds the dispatcher's lease, so no two write it at once) and read by operators' ``schedules``
commands. A skipped fire is recorded as its job, CANCELLED with the reason, written only if no
job of its id exists: a second delivery of the fire is then a duplicate, as for any job.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from dispatcher.domain.jobs import Job, JobState
from dispatcher.domain.schedules import Fire, FireRecord
from dispatcher.ports.table import Absent, ConditionFailed, Put, Record
from dispatcher.store import codec as r
from dispatcher.store.base import Reads


def _record(rec: Record) -> FireRecord:
    fires = rec.history if isinstance(rec.history, list) else []
    return FireRecord(name=r.ident(rec.pk), last_run=rec.job_id,
                      fires=tuple(Fire.from_json(f) for f in fires if isinstance(f, dict)))


class ScheduleFires(Reads):
    """Read and write schedules' fire records; record a skipped fire's job."""

    def fire_record(self, name: str) -> FireRecord:
        """The record of schedule ``name``'s fires (empty if it never fired; one GetItem)."""
        rec = self.table.get(r.schedule_key(name))
        return _record(rec) if rec else FireRecord(name)

    def fire_records(self, names: list[str]) -> dict[str, FireRecord]:
        """The records of these schedules' fires (BatchGetItem, 100 a call)."""
        found = {r.ident(rec.pk): _record(rec)
                 for rec in self.table.get_many([r.schedule_key(n) for n in names])}
        return {n: found.get(n) or FireRecord(n) for n in names}

    def save_fire_record(self, record: FireRecord) -> None:
        """Replace the record (its writer is the tick holding the lease: one at a time)."""
        history: list[dict[str, Any]] = [f.as_json() for f in record.fires]
        self.table.write(Put(Record(r.schedule_key(record.name), job_id=record.last_run,
                                    history=history or None, updated_at=self.clock())))

    def record_skipped(self, job: Job, reason: str) -> bool:
        """Record a skipped fire's job, CANCELLED with ``reason``, unless a job of its id is
        recorded already (then False: a duplicate)."""
        now = self.clock()
        ended = replace(job, state=JobState.CANCELLED, reason=reason, created_at=now)
        rec = replace(r.job_record(ended), expires_at=self._expiry(now), updated_at=now)
        try:
            self.table.write(Put(rec, Absent()))
        except ConditionFailed:
            return False
        return True
