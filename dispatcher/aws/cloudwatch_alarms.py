"""The alarm-board port on CloudWatch: DescribeAlarms by the stack's prefix, in ALARM only.

One call a page of 100 (MaxRecords' maximum), metric alarms only (the stack has no composite
alarm): https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_DescribeAlarms.html
"""

from __future__ import annotations

from typing import Any

from dispatcher.ports.alarm_board import AlarmBoard, FiringAlarm


class CloudWatchAlarmBoard(AlarmBoard):
    def __init__(self, client: Any, prefix: str) -> None:
        self._client = client
        self.prefix = prefix

    def firing(self) -> list[FiringAlarm]:
        out: list[FiringAlarm] = []
        pages = self._client.get_paginator("describe_alarms").paginate(
            AlarmNamePrefix=self.prefix, StateValue="ALARM", AlarmTypes=["MetricAlarm"],
            PaginationConfig={"PageSize": 100})
        for page in pages:
            for alarm in page.get("MetricAlarms", []):
                # The request asks for ALARM only; each answer's state is checked as well, so
                # an endpoint that applies the prefix alone (moto's does) tells no OK alarm.
                if alarm.get("StateValue") != "ALARM":
                    continue
                updated = alarm.get("StateTransitionedTimestamp") \
                    or alarm.get("StateUpdatedTimestamp")
                out.append(FiringAlarm(
                    str(alarm["AlarmName"]).removeprefix(self.prefix),
                    str(alarm.get("AlarmDescription") or ""),
                    str(alarm.get("StateReason") or ""),
                    updated.timestamp() if updated is not None else 0.0))
        return sorted(out, key=lambda f: (f.since, f.name))
