"""In-memory twin of the schedule-book port: schedules in a dict, fired by nobody (the local
loop and the tests fire them, as they would EventBridge Scheduler's)."""

from __future__ import annotations

import threading

from dispatcher.domain.errors import ScheduleExists, ScheduleNotFound
from dispatcher.domain.schedules import JobSchedule
from dispatcher.ports.schedule_book import ScheduleBook

__all__ = ["MemoryScheduleBook"]


class MemoryScheduleBook(ScheduleBook):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: dict[str, JobSchedule] = {}

    def create(self, schedule: JobSchedule) -> None:
        with self._lock:
            if schedule.name in self._kept:
                raise ScheduleExists(f"schedule {schedule.name!r} exists already")
            self._kept[schedule.name] = schedule

    def replace(self, schedule: JobSchedule) -> None:
        with self._lock:
            self._get(schedule.name)
            self._kept[schedule.name] = schedule

    def get(self, name: str) -> JobSchedule:
        with self._lock:
            return self._get(name)

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._kept)

    def delete(self, name: str) -> None:
        with self._lock:
            self._get(name)
            del self._kept[name]

    def _get(self, name: str) -> JobSchedule:
        try:
            return self._kept[name]
        except KeyError:
            raise ScheduleNotFound(f"no schedule {name!r}") from None
