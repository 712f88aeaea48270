"""Operators' schedules: create, read, pause, resume, update, delete, and fire one now.

A schedule is kept in the schedule book (EventBridge Scheduler on AWS: the port
:mod:`dispatcher.ports.schedule_book`); what became of its fires is read from the job table
(:class:`dispatcher.domain.schedules.FireRecord`, one item per schedule, and the state of its
last fire's job). Everything a schedule is given is checked before it is kept: its name, its
expression and time zone (:mod:`dispatcher.domain.schedule_times`, with the rules Scheduler
applies) and the job each fire makes (the message schema the dispatcher enforces), so a
schedule that is kept makes jobs the dispatcher admits.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from pydantic import ValidationError

from dispatcher.domain import message, message_errors, schedule_times, schedules
from dispatcher.domain.errors import InvalidMessage, InvalidSchedule
from dispatcher.domain.schedule_times import BadSchedule
from dispatcher.domain.schedules import Fire, FireRecord, JobSchedule, Overlap
from dispatcher.ports.schedule_book import ScheduleBook
from dispatcher.store import Store

# How many next fires a listing shows; how many schedules are read at once.
NEXT_FIRES = 3
READERS = 8
# Submit options a schedule's job cannot take: a fixed time, and dependencies on fixed jobs,
# mean nothing for a job made again at every fire.
_NOT_FOR_SCHEDULES = {"not_before": "a fixed not_before would hold every fire's job to one "
                                    "time; the schedule's expression says when it runs",
                      "depends_on": "a recurring job cannot wait for fixed jobs; chain its "
                                    "work inside the job, or submit the dependents yourself"}


@dataclass(frozen=True)
class ScheduleView:
    """One schedule as ``schedules list`` shows it."""

    schedule: JobSchedule
    next_fires: list[float]
    last_fire: Fire | None
    last_state: str | None  # the state of the last fire's job (None: not recorded)


@dataclass(frozen=True)
class ScheduleDetail:
    """One schedule as ``schedules show`` shows it: its latest fires, each with its job's
    state, newest first."""

    view: ScheduleView
    fires: list[tuple[Fire, str | None]]
    last_run: str | None


class Schedules:
    """``book``: where schedules are kept; ``store``: the job table (read lazily);
    ``submit``: sends one job message (``run_now``); ``seconds``: rates in seconds are taken
    (local mode only: AWS refuses them); ``allowed_kinds``: the dispatcher's, if it limits
    them."""

    def __init__(self, book: ScheduleBook, store: Callable[[], Store],
                 submit: Callable[[Mapping[str, Any]], str], *, seconds: bool = False,
                 allowed_kinds: tuple[str, ...] = (),
                 clock: Callable[[], float] = time.time) -> None:
        self._book = book
        self._store = store
        self._submit = submit
        self._seconds = seconds
        self._allowed_kinds = allowed_kinds
        self._clock = clock

    # -- changing --------------------------------------------------------------------------
    def create(self, name: str, expression: str, job: Mapping[str, Any], *,
               timezone: str = "UTC", overlap: Overlap | str = Overlap.ALLOW,
               description: str = "", paused: bool = False) -> JobSchedule:
        """Check and keep a new schedule; ``job``: the fields of the job each fire makes
        (kind, payload, priority, and any other submit option but not_before and
        depends_on). ``ScheduleExists`` if the name is taken."""
        schedule = self.check(JobSchedule(name=name, expression=expression, job=dict(job),
                                       timezone=timezone, overlap=_overlap(overlap),
                                       enabled=not paused, start=self._start(),
                                       description=description))
        self._book.create(schedule)
        self._store().reset_fires(name)  # a deleted schedule's fires are not this one's
        return schedule

    def update(self, name: str, *, expression: str | None = None,
               timezone: str | None = None, overlap: Overlap | str | None = None,
               job: Mapping[str, Any] | None = None,
               description: str | None = None) -> JobSchedule:
        """Change what is given, keep the rest; ``job`` fields replace those of the same
        name (a None value removes one). A new expression counts from now."""
        old = self._book.get(name)
        fields = dict(old.job)
        for key, value in (job or {}).items():
            if value is None:
                fields.pop(key, None)
            else:
                fields[key] = value
        new = replace(old, job=fields,
                      expression=expression if expression is not None else old.expression,
                      timezone=timezone if timezone is not None else old.timezone,
                      overlap=_overlap(overlap) if overlap is not None else old.overlap,
                      description=description if description is not None
                      else old.description)
        new = replace(new, start=self._start()) if new.expression != old.expression \
            else self._rebased(new)
        self._book.replace(self.check(new))
        return new

    def pause(self, name: str) -> JobSchedule:
        """Stop its fires until :meth:`resume`."""
        new = self._rebased(replace(self._book.get(name), enabled=False))
        self._book.replace(new)
        return new

    def resume(self, name: str) -> JobSchedule:
        """Fire again from now: the fires it missed while paused are not made up (its
        StartDate becomes now; a rate counts its periods from now)."""
        new = replace(self._book.get(name), enabled=True, start=self._start())
        self._book.replace(new)
        return new

    def delete(self, name: str) -> None:
        """Delete it; the jobs of its past fires stay, as every job does."""
        self._book.delete(name)

    def run_now(self, name: str) -> str:
        """Fire it once now, as a fire at this second would (the same job id, the same
        overlap rule); the job's id."""
        schedule = self._book.get(name)
        return self._submit(schedule.message(schedules.fire_time(self._clock())))

    # -- reading ---------------------------------------------------------------------------
    def get(self, name: str) -> JobSchedule:
        return self._book.get(name)

    def list(self) -> builtins.list[ScheduleView]:
        """Every schedule, by name, with its next fires and its last one."""
        names = self._book.names()
        if not names:
            return []
        with ThreadPoolExecutor(READERS) as pool:
            kept = list(pool.map(self._book.get, names))
        return self._views(kept)

    def show(self, name: str) -> ScheduleDetail:
        schedule = self._book.get(name)
        (view,) = self._views([schedule])
        record = self._store().fire_record(name)
        states = self._store().job_states([f.job_id for f in record.fires])
        return ScheduleDetail(view, [(f, states.get(f.job_id)) for f in record.fires],
                              record.last_run)

    def next_fires(self, schedule: JobSchedule,
                   count: int = NEXT_FIRES) -> builtins.list[float]:
        """Its next fires from now (none while paused)."""
        if not schedule.enabled:
            return []
        try:
            expr = schedule_times.parse(schedule.expression, seconds=True)
            return schedule_times.fires(expr, schedule.timezone, self._clock(), count,
                                        start=schedule.start)
        except (BadSchedule, ValueError):  # made elsewhere, in a form we do not read
            return []

    def _views(self, kept: builtins.list[JobSchedule]) -> builtins.list[ScheduleView]:
        store = self._store()
        records: dict[str, FireRecord] = {}
        for i in range(0, len(kept), 100):
            records.update(store.fire_records([s.name for s in kept[i:i + 100]]))
        last = {n: r.last_fire for n, r in records.items() if r.last_fire is not None}
        states = store.job_states([f.job_id for f in last.values()]) if last else {}
        return [ScheduleView(s, self.next_fires(s), last.get(s.name),
                             states.get(last[s.name].job_id) if s.name in last else None)
                for s in kept]

    # -- checking --------------------------------------------------------------------------
    def check(self, schedule: JobSchedule) -> JobSchedule:
        """The schedule if Scheduler would take it and its fires make admissible jobs; else
        ``InvalidSchedule`` or ``InvalidMessage`` naming what is wrong."""
        problem = schedules.name_problem(schedule.name)
        if problem:
            raise InvalidSchedule(problem)
        try:
            expr = schedule_times.parse(schedule.expression, seconds=self._seconds)
            schedule_times.zone(schedule.timezone)
            if expr.kind == "at":
                schedule_times.check_at(expr, schedule.timezone)
                if schedule.enabled and not schedule_times.fires(
                        expr, schedule.timezone, self._clock(), 1):
                    raise InvalidSchedule(f"{expr.text} in {schedule.timezone} is past: it "
                                          "would never fire; give a later time, or `longjobs "
                                          "schedules run-now NAME` to fire it now")
        except BadSchedule as exc:
            raise InvalidSchedule(str(exc)) from None
        for key, why in _NOT_FOR_SCHEDULES.items():
            if schedule.job.get(key) is not None:
                raise InvalidMessage(f"{key}: {why}")
        sample = schedule.message(schedules.fire_time(self._clock()))
        try:
            msg = message.JobMessage.model_validate(sample)
            message.check(msg, self._allowed_kinds)
        except ValidationError as exc:
            raise InvalidMessage(message_errors.describe(exc)) from None
        return schedule

    def _rebased(self, schedule: JobSchedule) -> JobSchedule:
        """``schedule`` with a StartDate Scheduler takes on an update: not in the past (it
        refuses one more than 5 minutes back on a recurring schedule: "The StartDate you
        specify cannot be earlier than 5 minutes ago"), and the same fires. A rate's start
        moves to its next fire from now (its periods keep their phase); a cron's to now (no
        fire before now is made either way); an at() has none (Scheduler ignores it)."""
        start, now = schedule.start, self._start()
        if start is None or start >= now:
            return schedule
        try:
            expr = schedule_times.parse(schedule.expression, seconds=True)
        except BadSchedule:  # made elsewhere, in a form we do not read: as it was
            return schedule
        if expr.kind == "rate":
            ahead = schedule_times.fires(expr, schedule.timezone, now - 1e-6, 1, start=start)
            return replace(schedule, start=ahead[0] if ahead else now)
        return replace(schedule, start=None if expr.kind == "at" else now)

    def _start(self) -> float:
        """A new or resumed schedule's StartDate: this second."""
        return float(int(self._clock()))


def _overlap(value: Overlap | str) -> Overlap:
    try:
        return Overlap(value)
    except ValueError:
        raise InvalidSchedule(f"overlap {str(value)[:40]!r} is not allow or skip: allow runs "
                              "every fire, skip runs none while the last one's job is pending "
                              "or running") from None
