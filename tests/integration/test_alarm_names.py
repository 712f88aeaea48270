"""The stack's alarms are all named under one prefix, the one its AlarmNamePrefix output
gives and the OperatorPolicy lets operators read by: the console's overview finds exactly
this stack's alarms in alarm with one DescribeAlarms (dispatcher/aws/cloudwatch_alarms.py)."""

from __future__ import annotations

from typing import Any

from samtranslator.yaml_helper import yaml_parse

from tests.integration.test_infra import TEMPLATE

PREFIX = "${AWS::StackName}-longjobs-"


def _template() -> dict[str, Any]:
    parsed: dict[str, Any] = yaml_parse(TEMPLATE.read_text())
    return parsed


def test_every_alarm_is_named_under_the_output_prefix() -> None:
    template = _template()
    alarms = {name: r["Properties"] for name, r in template["Resources"].items()
              if r["Type"] == "AWS::CloudWatch::Alarm"}
    assert len(alarms) >= 14
    names = [props.get("AlarmName", {}).get("Fn::Sub", "") for props in alarms.values()]
    assert all(n.startswith(PREFIX) and len(n) > len(PREFIX) for n in names), names
    assert len(set(names)) == len(names)
    assert template["Outputs"]["AlarmNamePrefix"]["Value"] == {"Fn::Sub": PREFIX}


def test_the_operator_policy_reads_those_alarms_only() -> None:
    statements = _template()["Resources"]["OperatorPolicy"]["Properties"]["PolicyDocument"][
        "Statement"]
    (read,) = [s for s in statements if s["Sid"] == "ReadAlarms"]
    assert read["Action"] == "cloudwatch:DescribeAlarms"
    assert read["Resource"]["Fn::Sub"].endswith(":alarm:" + PREFIX + "*")
