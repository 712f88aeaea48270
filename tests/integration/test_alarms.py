"""The stack's alarms watch what the code emits, for their own stack only, and fire on a bad image.

Two sides, written separately: the alarms of ``infra/template.yaml`` (read after the SAM
transform, as CloudFormation receives them) and the EMF lines the functions print. The lines
come from the real code paths on moto: the dispatch handler ticks (one RunTask refused, as a
bad subnet or quota would), and the task-event handler gets the STOPPED event ECS sends for a
task that failed to start (AWS's published sample, derived as ``tests/fixtures/README.md``
says) until the jobs' infrastructure budget is spent. For each alarm on a dispatcher metric
the test finds that metric in the alarm's namespace under exactly the alarm's dimension set
(an EMF dimension set), with the values the template gives it: ``service`` is the stack's name
(``POWERTOOLS_SERVICE_NAME: !Ref AWS::StackName``), ``Queue`` the job queue's name.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pytest

from dispatcher import handlers
from dispatcher.domain import task_events
from dispatcher.domain.costs import Prices
from dispatcher.domain.jobs import JobState
from dispatcher.domain.stops import TaskStop
from dispatcher.ops import metrics
from dispatcher.ops.client import JobClient
from dispatcher.wiring.adapters import open_store
from tests.conftest import Aws
from tests.integration.test_dashboard import dashboard_body
from tests.integration.test_infra import STACK_NAME, function_env, resolve, sam_expand
from tests.twins.test_event_fixtures import stopped

ALARM = "AWS::CloudWatch::Alarm"
TO_TOPIC = {"Fn::If": ["HasAlarmTopic", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]}
# The alarms on the dispatcher's metrics that must not page on an empty period.
JOB_ALARMS = {"JobsFailedAlarm", "LaunchFailuresAlarm", "TasksNeverStartedAlarm",
              "RerunStormAlarm", "DailySpendAlarm"}


@pytest.fixture(scope="module")
def alarms(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The alarms' properties after the SAM transform."""
    expanded = sam_expand(template)
    return {name: r["Properties"] for name, r in expanded["Resources"].items()
            if r["Type"] == ALARM}


@dataclass(frozen=True)
class Watched:
    """One metric an alarm reads: namespace, name and dimensions as the template writes them."""

    alarm: str
    namespace: Any
    name: str
    dimensions: tuple[tuple[str, Any], ...]


def watched(alarms: dict[str, dict[str, Any]]) -> list[Watched]:
    """Every metric of every alarm: its own, or each MetricStat of its metric math."""
    out = []
    for name, a in alarms.items():
        stats = [m["MetricStat"]["Metric"] for m in a.get("Metrics", []) if "MetricStat" in m]
        if "MetricName" in a:
            stats.append(a)
        assert stats, f"{name} reads no metric"
        for m in stats:
            dims = tuple((d["Name"], d["Value"]) for d in m.get("Dimensions", []))
            out.append(Watched(name, m["Namespace"], m["MetricName"], dims))
    return out


def dispatcher_metrics(alarms: dict[str, dict[str, Any]]) -> list[Watched]:
    return [w for w in watched(alarms) if w.namespace == {"Ref": "MetricsNamespace"}]


def deployed(value: Any, template: dict[str, Any]) -> str:
    """An alarm's dimension value as deployed: the stack's name, or the name of the job queue
    the functions' LONGJOBS_QUEUE_URL (``Ref JobQueue``, a URL ending in the queue's name)
    points at; here that is the queue the test's environment points at."""
    if value == {"Ref": "AWS::StackName"}:
        return str(resolve(value, template))
    if value == {"Fn::GetAtt": ["JobQueue", "QueueName"]}:
        assert function_env(template, "DispatcherFunction")["LONGJOBS_QUEUE_URL"] == {
            "Ref": "JobQueue"}
        return metrics.queue_name(os.environ["LONGJOBS_QUEUE_URL"])
    raise AssertionError(f"a dimension value this test does not know how to deploy: {value}")


# ----------------------------------------------------------------------------- the code side


@dataclass(frozen=True)
class Line:
    """One metric of one EMF line under one of its dimension sets."""

    namespace: str
    name: str
    dimensions: tuple[tuple[str, str], ...]  # sorted (name, value) pairs of the set
    value: float


def lines(out: str) -> list[Line]:
    found = []
    for text in out.splitlines():
        if not (text.startswith("{") and '"_aws"' in text):
            continue
        blob = json.loads(text)
        for directive in blob["_aws"]["CloudWatchMetrics"]:
            for dims in directive["Dimensions"]:
                pairs = tuple(sorted((d, str(blob[d])) for d in dims))
                for m in directive["Metrics"]:
                    v = blob[m["Name"]]
                    found.append(Line(directive["Namespace"], m["Name"], pairs,
                                      float(sum(v) if isinstance(v, list) else v)))
    return found


def matching(w: Watched, emitted: Iterable[Line], template: dict[str, Any]) -> list[Line]:
    """The emitted lines an alarm's metric reads: same namespace and name, exactly its
    dimension set, with the values the template gives them."""
    namespace = str(resolve(w.namespace, template))
    want = tuple(sorted((k, deployed(v, template)) for k, v in w.dimensions))
    return [e for e in emitted if (e.namespace, e.name, e.dimensions) == (namespace, w.name, want)]


class Context:
    def get_remaining_time_in_millis(self) -> int:
        return 50_000


def set_function_env(template: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """The metric settings the template hands the functions (service, namespace)."""
    env = function_env(template, "DispatcherFunction")
    # The two functions share their settings; only the tick runs one invocation at a time.
    assert function_env(template, "TaskEventFunction") == {
        **env, "LONGJOBS_TICK_ONE_AT_A_TIME": "false"}
    for name in ("POWERTOOLS_SERVICE_NAME", "POWERTOOLS_METRICS_NAMESPACE"):
        monkeypatch.setenv(name, str(resolve(env[name], template)))
    monkeypatch.delenv("LONGJOBS_METRICS_NAMESPACE", raising=False)
    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED", raising=False)


def failed_to_start(task_arn: str) -> dict[str, Any]:
    """ECS's STOPPED event of a task whose image did not pull (TaskFailedToStart)."""
    event = copy.deepcopy(stopped("TaskFailedToStart"))
    event["detail"]["taskArn"] = task_arn
    event["resources"] = [task_arn]
    return event


@pytest.fixture
def bad_image(aws: Aws, template: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
              capsys: pytest.CaptureFixture[str]) -> list[Line]:
    """The EMF lines of a stack whose image does not pull: two jobs, one RunTask refused,
    then every task fails to start until the jobs fail (an infrastructure budget of 1)."""
    set_function_env(template, monkeypatch)
    monkeypatch.setenv("LONGJOBS_MAX_INFRA_ATTEMPTS", "1")
    jobs = ["bad-1", "bad-2"]
    JobClient().submit_many([{"kind": "k", "payload": {}, "job_id": j} for j in jobs])
    aws.proxy.inject_runtask_failures(["RESOURCE:ENI"])
    capsys.readouterr()
    handlers.dispatch({}, Context())  # one launched, one refused (backoff 0 in these tests)
    handlers.dispatch({}, Context())  # the refused one launched
    store = open_store(aws.env["LONGJOBS_TABLE"])
    for _ in range(4):  # each job: the first launch and its one rerun never start
        for job_id in jobs:
            job = store.get_job(job_id)
            assert job is not None and job.bundle_id
            bundle = store.get_bundle(job.bundle_id)
            assert bundle is not None
            if job.state == JobState.FAILED or not bundle.task_arn:
                continue
            handlers.task_event(failed_to_start(bundle.task_arn), None)
    states = [store.get_job(j) for j in jobs]
    assert [j.state if j else None for j in states] == [JobState.FAILED] * 2
    return lines(capsys.readouterr().out)


def total(w: Watched, emitted: list[Line], template: dict[str, Any]) -> float:
    return sum(e.value for e in matching(w, emitted, template))


# --------------------------------------------------------------------------------- the checks


def test_the_job_alarms_exist(alarms: dict[str, dict[str, Any]]) -> None:
    names = {(w.alarm, w.name) for w in dispatcher_metrics(alarms)}
    assert {("JobsFailedAlarm", "JobsFailed"), ("LaunchFailuresAlarm", "LaunchFailures"),
            ("LaunchFailuresAlarm", "SpotFallbacks"),
            ("TasksNeverStartedAlarm", "TasksNeverStarted"),
            ("RerunStormAlarm", "BundlesRerun"), ("DailySpendAlarm", "JobCost"),
            ("DispatcherHeartbeatAlarm", "TickCompleted")} <= names
    assert {w.alarm for w in dispatcher_metrics(alarms)} == JOB_ALARMS | {
        "DispatcherHeartbeatAlarm"}


def unfed(alarms: dict[str, dict[str, Any]], emitted: list[Line],
          template: dict[str, Any]) -> list[str]:
    """The alarm metrics no emitted line feeds (with exactly their dimensions and values)."""
    return [f"{w.alarm}: nothing emits {w.name} with exactly {[k for k, _ in w.dimensions]} "
            f"= the deployed values; emitted: "
            f"{sorted({e.dimensions for e in emitted if e.name == w.name})}"
            for w in dispatcher_metrics(alarms) if not matching(w, emitted, template)]


def test_a_bad_image_feeds_and_breaches_the_alarms_of_its_own_stack_only(
        alarms: dict[str, dict[str, Any]], template: dict[str, Any],
        bad_image: list[Line]) -> None:
    """Every alarm metric is emitted under the alarm's dimension set and values. At the default
    thresholds the job alarms breach in one period: two jobs fail, four tasks never start, and
    a launch failed that no Spot fallback recovered (the rerun alarm wants a storm that lasts;
    its two bundle reruns are counted). The same lines under another stack's name (two stacks
    in one account and namespace) feed none of this stack's alarms."""
    assert unfed(alarms, bad_image, template) == []

    by_name = {w.name: w for w in dispatcher_metrics(alarms)}

    def threshold(alarm: str) -> float:
        return float(resolve(alarms[alarm]["Threshold"], template))

    assert total(by_name["JobsFailed"], bad_image, template) == 2 > threshold("JobsFailedAlarm")
    never = total(by_name["TasksNeverStarted"], bad_image, template)
    assert never == 4 > threshold("TasksNeverStartedAlarm")
    assert total(by_name["BundlesRerun"], bad_image, template) == 2
    unrecovered = total(by_name["LaunchFailures"], bad_image, template) - total(
        by_name["SpotFallbacks"], bad_image, template)
    assert unrecovered == 1 > threshold("LaunchFailuresAlarm")
    assert total(by_name["TickCompleted"], bad_image, template) == 2
    # Each task that never started was billed all the same (AWS's sample event: 256 CPU units,
    # 512 MiB, on demand, 81 s from its image pull to its stop), under the stack's JobCost.
    stop = task_events.parse(failed_to_start("arn:t"), "worker")
    assert isinstance(stop, TaskStop) and stop.bill is not None
    assert total(by_name["JobCost"], bad_image, template) == pytest.approx(
        4 * stop.bill.cost(Prices()))

    other = [Line(e.namespace, e.name, tuple((k, "other-stack" if k == "service" else v)
                                             for k, v in e.dimensions), e.value)
             for e in bad_image]
    assert len(unfed(alarms, other, template)) == len(dispatcher_metrics(alarms))


def test_no_alarm_is_scoped_to_a_literal_service(alarms: dict[str, dict[str, Any]]) -> None:
    for w in watched(alarms):
        for name, value in w.dimensions:
            assert value != "longjobs", f"{w.alarm}: dimension {name} is the literal 'longjobs'"
            if name == "service":
                assert value == {"Ref": "AWS::StackName"}, w.alarm
    custom = dispatcher_metrics(alarms)
    assert custom and all(("service", {"Ref": "AWS::StackName"}) in w.dimensions
                          for w in custom)


def test_every_function_and_its_metrics_are_named_for_the_stack(
        template: dict[str, Any]) -> None:
    for name in ("DispatcherFunction", "TaskEventFunction"):
        env = function_env(template, name)
        assert env["POWERTOOLS_SERVICE_NAME"] == {"Ref": "AWS::StackName"}, name
        assert resolve(env["POWERTOOLS_SERVICE_NAME"], template) == STACK_NAME


def test_every_alarm_notifies_the_topic_when_one_is_given(
        alarms: dict[str, dict[str, Any]]) -> None:
    assert len(alarms) >= 12
    for name, a in alarms.items():
        assert a.get("AlarmActions") == TO_TOPIC, name
        assert a.get("OKActions") == TO_TOPIC, name


def test_the_job_alarms_do_not_page_on_an_empty_period(
        alarms: dict[str, dict[str, Any]], template: dict[str, Any]) -> None:
    for name in JOB_ALARMS:
        a = alarms[name]
        assert a["TreatMissingData"] == "notBreaching", name
        assert a["ComparisonOperator"] == "GreaterThanThreshold", name
        threshold = a["Threshold"]
        if "Fn::If" in threshold:  # the budget's: without one, a threshold none reaches
            condition, threshold, unreached = threshold["Fn::If"]
            assert condition == "HasDailyBudget" and unreached >= 1e9, name
            assert a["ActionsEnabled"] == {"Fn::If": ["HasDailyBudget", True, False]}, name
        param = threshold["Ref"]
        assert param in template["Parameters"], name
        groups = template["Metadata"]["AWS::CloudFormation::Interface"]["ParameterGroups"]
        assert any(param in g["Parameters"] for g in groups), f"{param} is in no group"


def test_a_long_healthy_tick_cannot_breach_the_heartbeat(
        alarms: dict[str, dict[str, Any]], template: dict[str, Any]) -> None:
    """Two completed ticks are at most the dispatcher's Timeout plus a minute apart (the
    schedule's rate, and an invocation throttled meanwhile is dropped after 60 s). A silence
    breaches only when it fills DatapointsToAlarm whole periods, so that must take longer."""
    beat = alarms["DispatcherHeartbeatAlarm"]
    assert (beat["MetricName"], beat["TreatMissingData"]) == ("TickCompleted", "breaching")
    fn = template["Resources"]["DispatcherFunction"]["Properties"]
    assert fn["Events"]["Tick"]["Properties"]["ScheduleExpression"] == "rate(1 minute)"
    assert fn["EventInvokeConfig"]["MaximumEventAgeInSeconds"] <= 60
    reserve = float(function_env(template, "DispatcherFunction")[
        "LONGJOBS_TICK_RESERVE_SECONDS"])
    assert 0 < reserve < fn["Timeout"]  # the tick stops draining before its Timeout
    longest_gap = fn["Timeout"] + 60
    assert beat["DatapointsToAlarm"] * beat["Period"] > longest_gap
    assert beat["EvaluationPeriods"] == beat["DatapointsToAlarm"]


def test_the_dashboard_shows_the_state_of_every_alarm(
        alarms: dict[str, dict[str, Any]], template: dict[str, Any]) -> None:
    (widget,) = [w for w in dashboard_body(template)["widgets"] if w["type"] == "alarm"]
    shown = widget["properties"]["alarms"]
    assert sorted(shown) == sorted(f"arn:aws:{name}:Arn" for name in alarms)
