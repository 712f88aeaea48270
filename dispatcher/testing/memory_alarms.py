"""The in-memory twin of the alarm-board port: alarms by full name, each with its state, as
CloudWatch holds them; only those under the board's prefix are its."""

from __future__ import annotations

from dataclasses import dataclass

from dispatcher.ports.alarm_board import AlarmBoard, FiringAlarm


@dataclass
class _Alarm:
    description: str
    state: str = "OK"
    reason: str = ""
    since: float = 0.0


class MemoryAlarmBoard(AlarmBoard):
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.alarms: dict[str, _Alarm] = {}
        self.reads = 0

    def put(self, name: str, description: str = "") -> None:
        """An alarm (OK until :meth:`set_state` says otherwise), by its full name."""
        self.alarms[name] = _Alarm(description)

    def set_state(self, name: str, state: str, reason: str, at: float) -> None:
        alarm = self.alarms[name]
        alarm.state, alarm.reason, alarm.since = state, reason, at

    def firing(self) -> list[FiringAlarm]:
        self.reads += 1
        return sorted((FiringAlarm(name.removeprefix(self.prefix), a.description, a.reason,
                                   a.since)
                       for name, a in self.alarms.items()
                       if name.startswith(self.prefix) and a.state == "ALARM"),
                      key=lambda f: (f.since, f.name))
