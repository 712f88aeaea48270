"""The EventBridge Scheduler adapter of the schedule-book port.

Each schedule lives in the stack's schedule group. Its target is a templated SQS target: the
job queue of its priority (``Target.Arn``), the fire's job message as its input, sent with the
stack's scheduler role ("Using templated targets",
https://docs.aws.amazon.com/scheduler/latest/UserGuide/managing-targets-templated.html). A fire
Scheduler could not deliver is tried again for up to a day (``RetryPolicy``: 86,400 s, 185
attempts, the service's maxima, https://docs.aws.amazon.com/scheduler/latest/APIReference/
API_RetryPolicy.html), then kept in the stack's schedule dead-letter queue
(``DeadLetterConfig``). No flexible window: a fire is made at its minute
(``FlexibleTimeWindow`` OFF, https://docs.aws.amazon.com/scheduler/latest/APIReference/
API_FlexibleTimeWindow.html).

UpdateSchedule replaces the whole schedule ("parameters you leave out become null",
https://docs.aws.amazon.com/scheduler/latest/UserGuide/managing-schedule-state.html), so
:meth:`replace` always sends every field.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from dispatcher.domain import schedules
from dispatcher.domain.errors import InvalidSchedule, ScheduleExists, ScheduleNotFound
from dispatcher.domain.schedules import JobSchedule
from dispatcher.ports.schedule_book import ScheduleBook

RETRY_POLICY = {"MaximumEventAgeInSeconds": 86_400, "MaximumRetryAttempts": 185}


class EventBridgeScheduleBook(ScheduleBook):
    """``queue_arn(priority)``: the ARN of the job queue of that priority."""

    def __init__(self, client: Any, group: str, role_arn: str, dead_letter_arn: str,
                 queue_arn: Callable[[str], str]) -> None:
        self._client = client
        self._group = group
        self._role = role_arn
        self._dead_letters = dead_letter_arn
        self._queue_arn = queue_arn

    def create(self, schedule: JobSchedule) -> None:
        self._call("CreateSchedule", schedule.name, self._client.create_schedule,
                   **self._request(schedule))

    def replace(self, schedule: JobSchedule) -> None:
        self._call("UpdateSchedule", schedule.name, self._client.update_schedule,
                   **self._request(schedule))

    def get(self, name: str) -> JobSchedule:
        got = self._call("GetSchedule", name, self._client.get_schedule, Name=name,
                         GroupName=self._group)
        start = got.get("StartDate")
        return schedules.from_body(
            name, got["ScheduleExpression"], got["Target"]["Input"],
            timezone=got.get("ScheduleExpressionTimezone") or "UTC",
            enabled=got.get("State", "ENABLED") == "ENABLED",
            start=_epoch(start) if start is not None else None,
            description=got.get("Description") or "")

    def names(self) -> list[str]:
        found: list[str] = []
        kwargs: dict[str, Any] = {"GroupName": self._group}
        while True:
            page = self._call("ListSchedules", "", self._client.list_schedules, **kwargs)
            found += [s["Name"] for s in page.get("Schedules", [])]
            token = page.get("NextToken")
            if not token:
                return sorted(found)
            kwargs["NextToken"] = token

    def delete(self, name: str) -> None:
        self._call("DeleteSchedule", name, self._client.delete_schedule, Name=name,
                   GroupName=self._group)

    def _request(self, schedule: JobSchedule) -> dict[str, Any]:
        target: dict[str, Any] = {"Arn": self._queue_arn(schedule.priority),
                                  "RoleArn": self._role, "Input": schedule.body(),
                                  "RetryPolicy": dict(RETRY_POLICY)}
        if self._dead_letters:
            target["DeadLetterConfig"] = {"Arn": self._dead_letters}
        request: dict[str, Any] = {
            "Name": schedule.name, "GroupName": self._group,
            "ScheduleExpression": schedule.expression,
            "ScheduleExpressionTimezone": schedule.timezone,
            "State": "ENABLED" if schedule.enabled else "DISABLED",
            "FlexibleTimeWindow": {"Mode": "OFF"}, "Target": target,
        }
        if schedule.start is not None:
            request["StartDate"] = datetime.fromtimestamp(schedule.start, UTC)
        if schedule.description:
            request["Description"] = schedule.description
        return request

    def _call(self, what: str, name: str, call: Callable[..., Any], **kwargs: Any) -> Any:
        try:
            return call(**kwargs)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            said = exc.response.get("Error", {}).get("Message", "") or str(exc)
            if code == "ResourceNotFoundException":
                if "group" in said.lower():  # the group itself: the settings name another
                    raise ScheduleNotFound(f"schedule group {self._group!r} does not exist "
                                           f"({said})") from None
                raise ScheduleNotFound(f"no schedule {name!r} in schedule group "
                                       f"{self._group!r}") from None
            if code == "ConflictException":
                raise ScheduleExists(f"schedule {name!r} exists already in schedule group "
                                     f"{self._group!r}") from None
            if code == "ValidationException":
                raise InvalidSchedule(f"EventBridge Scheduler refused {what} of "
                                         f"{name!r}: {said}") from None
            raise


def _epoch(value: Any) -> float:
    if isinstance(value, datetime):
        return value.timestamp()
    return float(value)
