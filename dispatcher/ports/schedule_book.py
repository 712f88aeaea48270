"""The schedule-book port: where schedules are kept, and by whom they are fired.

On AWS, EventBridge Scheduler keeps them and fires them: each schedule's target is the job
queue of its priority, its input the fire's job message (:mod:`dispatcher.domain.schedules`).
Implementations:

- ``dispatcher.aws.scheduler.EventBridgeScheduleBook``: CreateSchedule, GetSchedule,
  UpdateSchedule, DeleteSchedule and ListSchedules in the stack's schedule group;
- ``dispatcher.testing.memory_schedule_book.MemoryScheduleBook``: the in-memory twin.

Local mode fires the schedules itself (``dispatcher.local.schedule_loop``), read through this
port from the emulator's Scheduler, which keeps them but never fires them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from dispatcher.domain.schedules import JobSchedule


class ScheduleBook(ABC):
    """Errors: ``ScheduleNotFound``, ``ScheduleExists``, ``InvalidSchedule`` (a value the
    service refuses). Anything else: the outcome is unknown."""

    @abstractmethod
    def create(self, schedule: JobSchedule) -> None:
        """Keep a new schedule (``ScheduleExists`` if one has its name)."""

    @abstractmethod
    def replace(self, schedule: JobSchedule) -> None:
        """Replace the schedule of that name, every field (``ScheduleNotFound`` if none)."""

    @abstractmethod
    def get(self, name: str) -> JobSchedule:
        """The schedule of that name (``ScheduleNotFound`` if none)."""

    @abstractmethod
    def names(self) -> list[str]:
        """Every schedule's name, sorted."""

    @abstractmethod
    def delete(self, name: str) -> None:
        """Delete it (``ScheduleNotFound`` if none)."""
