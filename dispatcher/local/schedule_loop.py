"""Local mode's EventBridge Scheduler: fires the schedules the local endpoint keeps (moto keeps
them but never fires them), as Scheduler does, so a schedule made with ``longjobs schedules``
runs locally with the same job ids and the same overlap rule as on AWS.

Each step reads every schedule and sends, to the job queue of its priority, one message for
each of its fires that came due since the last step: its input with the fire's time written
into it (what Scheduler does with ``<aws.scheduler.scheduled-time>``). Like Scheduler, it makes
no fire of a paused schedule, and none from before its StartDate: a resumed schedule (its
StartDate set to the resume) fires from then on, without a burst of the fires it missed. A
send that fails is tried again at the next step, for the same fire (Scheduler retries the
same way; the fire's job id makes a second delivery one job).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from dispatcher.domain import schedule_times, schedules
from dispatcher.domain.errors import ScheduleNotFound
from dispatcher.domain.jobs import Priority
from dispatcher.domain.schedule_times import BadSchedule
from dispatcher.domain.schedules import JobSchedule
from dispatcher.ports.queue import Queue
from dispatcher.ports.schedule_book import ScheduleBook

log = logging.getLogger(__name__)

# Fires of one schedule made in one step at most (a loop that slept long catches up in steps).
FIRES_PER_STEP = 100


@dataclass
class _Seen:
    schedule: JobSchedule
    since: float  # fires after this time are still to be made
    next_at: list[float] = field(default_factory=list)  # its next fires, computed once


class ScheduleLoop:
    """``queues``: the job queue of each priority. :meth:`step` at least once a second for
    fires made within their second, as Scheduler's are within their minute."""

    def __init__(self, book: ScheduleBook, queues: Mapping[Priority, Queue],
                 clock: Callable[[], float]) -> None:
        self._book = book
        self._queues = queues
        self._clock = clock
        self._seen: dict[str, _Seen] = {}
        self.sent = 0  # fires sent so far

    def step(self) -> list[str]:
        """Send every fire due now; the job ids sent."""
        now = self._clock()
        sent: list[str] = []
        names = self._book.names()
        for gone in set(self._seen) - set(names):
            del self._seen[gone]
        for name in names:
            try:
                schedule = self._book.get(name)
            except ScheduleNotFound:  # deleted meanwhile
                self._seen.pop(name, None)
                continue
            sent += self._fire(schedule, now)
        self.sent += len(sent)
        return sent

    def _fire(self, schedule: JobSchedule, now: float) -> list[str]:
        seen = self._seen.get(schedule.name)
        if not schedule.enabled:
            self._seen.pop(schedule.name, None)  # a resume starts from its new StartDate
            return []
        if seen is None or seen.schedule != schedule:
            # New, or changed (a resume or an update sets its StartDate): from its start, or
            # from now when it has none; never before a fire already made.
            since = schedule.start if schedule.start is not None else now
            if seen is not None:
                since = max(since, seen.since)
            seen = self._seen[schedule.name] = _Seen(schedule, since - 1e-6)
        if not seen.next_at:
            seen.next_at = self._next(schedule, seen.since)
        sent: list[str] = []
        while seen.next_at and seen.next_at[0] <= now and len(sent) < FIRES_PER_STEP:
            at = seen.next_at[0]
            job_id = self._send(schedule, at)
            if job_id is None:
                break  # the same fire at the next step
            sent.append(job_id)
            seen.since = at
            seen.next_at.pop(0)
            if not seen.next_at:
                seen.next_at = self._next(schedule, at)
        return sent

    @staticmethod
    def _next(schedule: JobSchedule, after: float) -> list[float]:
        try:
            expr = schedule_times.parse(schedule.expression, seconds=True)
            return schedule_times.fires(expr, schedule.timezone, after, 10,
                                        start=schedule.start)
        except (BadSchedule, ValueError) as exc:
            log.warning("a schedule's expression cannot be read; it does not fire",
                        extra={"schedule": schedule.name, "error": str(exc)})
            return [math.inf]

    def _send(self, schedule: JobSchedule, at: float) -> str | None:
        fire = schedules.fire_time(at)
        body = schedules.render(schedule.body(), fire)
        queue = self._queues[Priority(schedule.priority)]
        try:
            failed = queue.send([("fire", body)])
        except Exception as exc:
            failed = {"fire": repr(exc)}
        if failed:
            log.warning("a schedule's fire was not sent; tried again at the next step",
                        extra={"schedule": schedule.name, "fire": fire,
                               "error": failed.get("fire")})
            return None
        return schedules.fire_id(schedule.name, fire)
