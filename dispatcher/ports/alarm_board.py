"""The alarm-board port: the stack's alarms that are in alarm now.

Every alarm of a stack is named under one prefix (``infra/template.yaml``'s AlarmNamePrefix
output, ``LONGJOBS_ALARM_PREFIX``), so one read by that prefix finds them all and no other
stack's. Adapters: CloudWatch (``dispatcher.aws.cloudwatch_alarms``) and the in-memory twin
(``dispatcher.testing.memory_alarms``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass


@dataclass(frozen=True)
class FiringAlarm:
    """One alarm in alarm: its ``name`` (the prefix left off), what it watches, why
    CloudWatch says it fired, and since when (epoch seconds)."""

    name: str
    description: str
    reason: str
    since: float


class AlarmBoard(ABC):
    """The alarms named under one prefix that are in the ALARM state, longest firing first."""

    @abstractmethod
    def firing(self) -> list[FiringAlarm]: ...
