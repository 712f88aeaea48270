"""The record of each schedule's fires (``SCHEDULE#<name>``), and the skipped fire's job.

One small item per schedule (:class:`dispatcher.domain.schedules.FireRecord`: the job of the
fire admitted to run last in ``job_id``, the runs an operator's retry put it beside in
``job_ids``, its latest fires), written by the tick that admits a fire, by an operator's retry
of a fire's job (the retried job is the last run then, beside the runs before it) and by
``schedules create`` (a new schedule starts with no fires). Each write is conditional on the
version read, so two writers (a tick and an operator; a tick that took over a lease and the
slow one it took it from) never lose each other's note: the later one gets a ``ConflictError``
and reads again.
A skipped fire is recorded as its job, CANCELLED with the reason, written only if no job of its
id exists: a second delivery of the fire is then a duplicate, as for any job.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from dispatcher.domain.errors import ConflictError
from dispatcher.domain.jobs import Job, JobState
from dispatcher.domain.schedules import RAN, Fire, FireRecord, fire_id, fire_of
from dispatcher.ports.table import Absent, ConditionFailed, Eq, Put, Record
from dispatcher.store import codec as r
from dispatcher.store.base import Reads


def _record(rec: Record) -> FireRecord:
    fires = rec.history if isinstance(rec.history, list) else []
    return FireRecord(name=r.ident(rec.pk), last_run=rec.job_id,
                      fires=tuple(Fire.from_json(f) for f in fires if isinstance(f, dict)),
                      version=int(rec.version or 0), beside=tuple(rec.job_ids or ()))


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
        """Replace the record read as ``record.version`` (0: there was none) with ``record``;
        ``ConflictError`` if another writer wrote it since (nothing is written then)."""
        history: list[dict[str, Any]] = [f.as_json() for f in record.fires]
        expected = Absent() if record.version == 0 else Eq("version", record.version)
        self._write(Put(Record(r.schedule_key(record.name), job_id=record.last_run,
                               job_ids=list(record.beside) or None,
                               history=history or None, version=record.version + 1,
                               updated_at=self.clock()), expected),
                    f"schedule {record.name}'s record of fires changed meanwhile")

    def note_fires(self, name: str, change: Callable[[FireRecord], FireRecord | None],
                   tries: int = 3) -> FireRecord | None:
        """Read schedule ``name``'s record, write what ``change`` makes of it (None: leave it),
        read and change again if another writer came between (``tries`` in all); the record
        written."""
        for attempt in range(tries):
            new = change(self.fire_record(name))
            if new is None:
                return None
            try:
                self.save_fire_record(new)
                return new
            except ConflictError:
                if attempt == tries - 1:
                    raise
        return None

    def retried_fires(self, job_ids: list[str]) -> None:
        """An operator retried these jobs: each that is a fire's (or a fire's array child's)
        becomes its schedule's last run, a fire that ran, beside the runs before it, so that a
        skip schedule's next fire waits for it and for them."""
        by_name: dict[str, list[Fire]] = {}
        for job_id in job_ids:
            fire = fire_of(job_id)
            if fire is not None:
                name, at = fire
                by_name.setdefault(name, []).append(
                    Fire(at, fire_id(name, at), RAN, "retried by an operator"))
        for name, fires in by_name.items():
            def change(record: FireRecord, fires: list[Fire] = fires) -> FireRecord:
                for fire in fires:
                    record = record.retried(fire)
                return record

            self.note_fires(name, change)

    def reset_fires(self, name: str) -> None:
        """A new schedule of this name starts with no fires (a deleted one's are not its)."""
        self.note_fires(name, lambda record: FireRecord(name, version=record.version))

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
