"""The stack's CloudWatch dashboard graphs what the code emits, under the names it emits.

The dashboard (``Dashboard`` in infra/template.yaml) and the EMF metrics
(``dispatcher/ops/metrics.py``) are written separately; a metric renamed on either side would
leave a graph silently empty. These tests read the DashboardBody (its ``Fn::Sub`` resolved with
sample deployed values), collect every metric each widget asks for (explicit metrics and the
schemas of SEARCH expressions), and check each one against the names and dimension sets the code
emits for a sample tick and sample task stops, or against the AWS/SQS metrics of the stack's own
queues.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest

from dispatcher.domain.stops import StopClass
from dispatcher.ops import metrics
from dispatcher.ports.queue import Backlog
from dispatcher.stages.admitted import AdmissionStats
from dispatcher.stages.launch import LaunchStats
from dispatcher.stages.rerun import StopOutcome, StopResult
from dispatcher.stages.tick import TickReport
from dispatcher.store.values import JobOutcomes
from tests.conftest import Aws
from tests.integration.test_infra import STACK_NAME, function_env, resolve, resources

NOW = 1_800_000_000.0
STACK = STACK_NAME
# What CloudWatch's AWS/SQS namespace publishes per queue (dimension QueueName) and the
# dashboard may graph.
SQS_METRICS = {"ApproximateNumberOfMessagesVisible", "ApproximateNumberOfMessagesNotVisible",
               "ApproximateNumberOfMessagesDelayed", "ApproximateAgeOfOldestMessage",
               "NumberOfMessagesSent", "NumberOfMessagesReceived", "NumberOfMessagesDeleted",
               "NumberOfEmptyReceives", "SentMessageSize"}
PRIORITY_QUEUES = {"high": "HighJobQueue", "normal": "JobQueue", "low": "LowJobQueue"}


@dataclass(frozen=True)
class MetricRef:
    """One metric a widget asks for: namespace, name, dimension names, and the dimension
    values it pins (a SEARCH pins only those its search terms name)."""

    widget: str
    namespace: str
    name: str
    dimensions: frozenset[str]
    values: tuple[tuple[str, str], ...]
    search: bool = False

    def __str__(self) -> str:
        dims = ",".join(sorted(self.dimensions))
        return f"{self.namespace}/{self.name}{{{dims}}} in '{self.widget}'"


# ------------------------------------------------------------------------- the template side


def sub(text: str, template: dict[str, Any]) -> str:
    """Fn::Sub with sample deployed values: parameters (their default), pseudo parameters,
    ``${Resource}`` and ``${Resource.Attribute}`` (as test_infra.py resolves them), and
    ``${!Literal}``, which CloudFormation writes as ``${Literal}``."""
    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name.startswith("!"):
            return "${" + name[1:] + "}"
        if name == "AWS::StackName":
            return STACK
        if "." in name:
            resource, attr = name.split(".", 1)
            assert resource in template["Resources"], f"${{{name}}}: no such resource"
            if attr == "QueueName":
                return queue_name_of(resource)
            return f"arn:aws:{resource}:{attr}"
        return str(resolve({"Ref": name}, template))

    return re.sub(r"\$\{([^}]+)\}", one, text)


def queue_name_of(resource: str) -> str:
    """The name a queue's ``Ref`` URL ends with (test_infra.resolve's sample URLs)."""
    return f"longjobs-{resource}"


def dashboard_body(template: dict[str, Any]) -> dict[str, Any]:
    (dashboard,) = resources(template, "AWS::CloudWatch::Dashboard").values()
    body = dashboard["Properties"]["DashboardBody"]
    assert set(body) == {"Fn::Sub"} and isinstance(body["Fn::Sub"], str), (
        "DashboardBody is expected as one Fn::Sub of a JSON text")
    parsed: dict[str, Any] = json.loads(sub(body["Fn::Sub"], template))
    return parsed


_SEARCH = re.compile(r"SEARCH\(\s*'(?P<query>(?:[^'\\]|\\.)*)'\s*,\s*'(?P<stat>\w+)'\s*,"
                     r"\s*(?P<period>\d+)\s*\)")
_TERM = re.compile(r'(?P<key>[A-Za-z_][\w.:-]*)\s*=\s*(?:"(?P<quoted>[^"]*)"|(?P<bare>\S+))')


def search_ref(widget: str, expression: str) -> MetricRef:
    """The metric a ``SEARCH('{Namespace,Dim,...} MetricName="X" Dim="v"', ...)`` selects."""
    match = _SEARCH.fullmatch(expression.strip())
    assert match, f"'{widget}': not a SEARCH expression this test reads: {expression}"
    query = match["query"]
    schema = re.match(r"\s*\{([^}]*)\}", query)
    assert schema, f"'{widget}': a SEARCH needs a schema {{Namespace,Dim,...}}: {expression}"
    namespace, *dims = [p.strip().strip('"') for p in schema.group(1).split(",")]
    terms = {m["key"]: m["quoted"] if m["quoted"] is not None else m["bare"]
             for m in _TERM.finditer(query[schema.end():])}
    assert "MetricName" in terms, f"'{widget}': a SEARCH without MetricName=: {expression}"
    name = terms.pop("MetricName")
    assert set(terms) <= set(dims), f"'{widget}': searches a dimension outside its schema"
    return MetricRef(widget, namespace, name, frozenset(dims), tuple(sorted(terms.items())),
                     search=True)


def widget_metrics(body: dict[str, Any]) -> list[MetricRef]:
    """Every metric the dashboard's widgets graph. Explicit rows are
    ``[namespace, name, dim, value, ..., {options}]`` (the "." shorthand is not used)."""
    refs = []
    for widget in body["widgets"]:
        if widget["type"] != "metric":
            continue
        title = widget["properties"]["title"]
        for row in widget["properties"]["metrics"]:
            if isinstance(row[0], dict):
                refs.append(search_ref(title, row[0]["expression"]))
                continue
            fields = [f for f in row if not isinstance(f, dict)]
            assert "." not in fields, f"'{title}': spell rows out (no '.' shorthand)"
            namespace, name, *pairs = fields
            assert len(pairs) % 2 == 0, f"'{title}': dimension without a value: {row}"
            values = tuple(zip(pairs[::2], pairs[1::2], strict=True))
            refs.append(MetricRef(title, namespace, name, frozenset(k for k, _ in values),
                                  tuple(sorted(values))))
    return refs


# ----------------------------------------------------------------------------- the code side


@dataclass(frozen=True)
class Emitted:
    namespace: str
    name: str
    dimensions: frozenset[str]
    values: tuple[tuple[str, str], ...]


def emitted_by(blobs: list[dict[str, Any]]) -> set[Emitted]:
    """(namespace, metric, dimension set, dimension values) of each EMF object's directives."""
    out = set()
    for blob in blobs:
        for directive in blob.get("_aws", {}).get("CloudWatchMetrics", []):
            for dims in directive["Dimensions"]:
                values = tuple(sorted((d, str(blob[d])) for d in dims))
                for metric in directive["Metrics"]:
                    out.add(Emitted(directive["Namespace"], metric["Name"], frozenset(dims),
                                    values))
    return out


def sample_blobs(namespace: str, queue_url: str) -> list[dict[str, Any]]:
    """The EMF objects of a tick that did everything once (admitted, rejected, launched, failed
    a launch, saw every priority's backlog and two revisions) and of every kind of task stop,
    published for ``queue_url`` as the handlers publish them."""
    decision = TickReport(
        tick_id="t", active_bundles=2, elapsed_ms=1234,
        intake=AdmissionStats(received=4, admitted=3, rejected=1, duplicates=1,
                           oldest_sent_at=NOW - 30),
        launch=LaunchStats(bundles_launched=2, spot_fallbacks=1,
                           failures=Counter({"RESOURCE:MEMORY": 1, "Capacity": 2})))
    backlogs = {p: Backlog(3, 1, 0) for p in PRIORITY_QUEUES}
    blobs = metrics.tick_blobs(decision, backlog=metrics.total_backlog(backlogs.values()),
                               running_tasks=4, queue=queue_url, namespace=namespace, now=NOW,
                               backlogs=backlogs,
                               running_by_revision={"longjobs-worker:7": 3,
                                                    "longjobs-worker:8": 1})
    stops = [StopOutcome(StopResult.FINISHED, "arn", "b", finished=JobOutcomes(1, 1)),
             StopOutcome(StopResult.SETTLED, "arn", "b", StopClass.INFRASTRUCTURE,
                         rerun=["c"], relaunched=True),
             StopOutcome(StopResult.SETTLED, "arn", "b", StopClass.APPLICATION, failed=["d"])]
    return blobs + [metrics.stop_blob(o, queue=queue_url, namespace=namespace) for o in stops]


# --------------------------------------------------------------------------------- the check


def unmatched(refs: list[MetricRef], emitted: set[Emitted], template: dict[str, Any],
              namespace: str) -> list[str]:
    """The widget metrics nothing provides: neither the code (same namespace, name and
    dimension names; the dimension values a widget pins must be the emitted ones) nor the
    AWS/SQS metrics of one of this stack's queues."""
    queues = {queue_name_of(q) for q in resources(template, "AWS::SQS::Queue")}
    missing = []
    for ref in refs:
        if ref.namespace == "AWS/SQS":
            pinned = dict(ref.values)
            if not (ref.name in SQS_METRICS and ref.dimensions == {"QueueName"}
                    and pinned.get("QueueName") in queues):
                missing.append(f"{ref}: not an AWS/SQS metric of this stack's queues")
            continue
        if ref.namespace != namespace:
            missing.append(f"{ref}: namespace is not the MetricsNamespace parameter")
            continue
        found = [e for e in emitted if (e.namespace, e.name, e.dimensions)
                 == (ref.namespace, ref.name, ref.dimensions)]
        if not found:
            missing.append(f"{ref}: the code emits no such metric with these dimensions")
        elif not any(set(ref.values) <= set(e.values) for e in found):
            missing.append(f"{ref}: pins {dict(ref.values)}, the code emits "
                           f"{sorted({e.values for e in found})}")
    return missing


@pytest.fixture
def namespace(template: dict[str, Any]) -> str:
    default = template["Parameters"]["MetricsNamespace"]["Default"]
    assert isinstance(default, str)
    return default


@pytest.fixture
def emitted(template: dict[str, Any], namespace: str,
            monkeypatch: pytest.MonkeyPatch) -> set[Emitted]:
    """What the functions emit as deployed: the service name and namespace the template hands
    them, and the queue URL ``Ref JobQueue`` gives (handlers pass LONGJOBS_QUEUE_URL)."""
    env = function_env(template, "DispatcherFunction")
    assert env["POWERTOOLS_METRICS_NAMESPACE"] == {"Ref": "MetricsNamespace"}
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", resolve(env["POWERTOOLS_SERVICE_NAME"], template))
    monkeypatch.delenv("LONGJOBS_METRICS_NAMESPACE", raising=False)
    queue_url = str(resolve(env["LONGJOBS_QUEUE_URL"], template))
    return emitted_by(sample_blobs(namespace, queue_url))


@pytest.fixture
def refs(template: dict[str, Any]) -> list[MetricRef]:
    return widget_metrics(dashboard_body(template))


def test_dashboard_body_is_json_once_substituted(template: dict[str, Any]) -> None:
    body = dashboard_body(template)
    assert body["widgets"], "the dashboard has no widgets"
    for widget in body["widgets"]:
        assert {"type", "x", "y", "width", "height", "properties"} <= set(widget)
        assert widget["x"] >= 0 and widget["x"] + widget["width"] <= 24
        if widget["type"] == "metric":
            assert widget["properties"]["region"] == resolve({"Ref": "AWS::Region"}, template)
            assert widget["properties"]["metrics"], widget["properties"]["title"]


def test_every_widget_metric_is_emitted_or_an_sqs_metric(
        template: dict[str, Any], refs: list[MetricRef], emitted: set[Emitted],
        namespace: str) -> None:
    assert unmatched(refs, emitted, template, namespace) == []


def test_the_dashboard_shows_every_figure_an_operator_watches(refs: list[MetricRef]) -> None:
    """Backlog and oldest age per priority queue, running tasks by revision, the job rates,
    launch failures by reason, dispatch lag, tick duration, bundles rerun and tasks that never
    started."""
    shown = {(r.namespace if r.namespace == "AWS/SQS" else "custom", r.name, r.dimensions)
             for r in refs}
    base = frozenset({"service", "Queue"})
    required = {
        ("custom", "RunningTasks", base | {"TaskDefinition"}),
        ("custom", "RunningTasks", base),
        ("custom", "Backlog", base | {"Priority"}),
        ("custom", "JobsAdmitted", base),
        ("custom", "JobsSucceeded", base),
        ("custom", "JobsFailed", base),
        ("custom", "Reruns", base),
        ("custom", "LaunchFailures", base | {"Reason"}),
        ("custom", "DispatchLagSeconds", base),
        ("custom", "TickDurationMs", base),
        ("custom", "BundlesRerun", base),
        ("custom", "TasksNeverStarted", base),
    }
    assert required - shown == set()
    for metric in ("ApproximateNumberOfMessagesVisible", "ApproximateAgeOfOldestMessage"):
        queues = {dict(r.values)["QueueName"] for r in refs if r.name == metric}
        assert {queue_name_of(q) for q in PRIORITY_QUEUES.values()} <= queues, metric
    priorities = {dict(r.values).get("Priority") for r in refs if r.name == "Backlog"}
    assert priorities == set(PRIORITY_QUEUES)


def test_every_dimension_value_the_dashboard_pins_is_the_deployed_one(
        template: dict[str, Any], refs: list[MetricRef]) -> None:
    """service is POWERTOOLS_SERVICE_NAME as the template sets it, Queue the job queue's name
    (what the code derives from LONGJOBS_QUEUE_URL), for every custom metric."""
    env = function_env(template, "DispatcherFunction")
    queue = metrics.queue_name(str(resolve(env["LONGJOBS_QUEUE_URL"], template)))
    assert queue == queue_name_of("JobQueue")
    for ref in refs:
        if ref.namespace == "AWS/SQS":
            continue
        pinned = dict(ref.values)
        assert pinned.get("service") == resolve(env["POWERTOOLS_SERVICE_NAME"], template) \
            == STACK, str(ref)
        if "Queue" in ref.dimensions:
            assert pinned.get("Queue") == queue, str(ref)


@pytest.mark.parametrize("side", ["code", "dashboard"])
def test_a_renamed_metric_is_caught(template: dict[str, Any], refs: list[MetricRef],
                                    emitted: set[Emitted], namespace: str, side: str) -> None:
    """The check has teeth: renaming a metric on either side (or a dimension) is reported."""
    if side == "code":
        changed = {Emitted(e.namespace, "JobsStarted" if e.name == "JobsAdmitted" else e.name,
                           e.dimensions, e.values) for e in emitted}
        assert any("JobsAdmitted" in m for m in unmatched(refs, changed, template, namespace))
        regrouped = {Emitted(e.namespace, e.name, frozenset(
            "Revision" if d == "TaskDefinition" else d for d in e.dimensions), e.values)
            for e in emitted}
        assert any("RunningTasks" in m
                   for m in unmatched(refs, regrouped, template, namespace))
    else:
        renamed = [MetricRef(r.widget, r.namespace, "TickMillis", r.dimensions, r.values,
                             r.search) if r.name == "TickDurationMs" else r for r in refs]
        assert any("TickMillis" in m for m in unmatched(renamed, emitted, template, namespace))


def test_the_search_expressions_are_read() -> None:
    ref = search_ref("w", "SEARCH('{\"ns\",service,Queue,Reason} MetricName=\"LaunchFailures\" "
                          "Queue=\"q\"', 'Sum', 60)")
    assert (ref.namespace, ref.name, ref.dimensions, ref.values) == (
        "ns", "LaunchFailures", frozenset({"service", "Queue", "Reason"}), (("Queue", "q"),))


def test_the_dashboard_url_is_an_output(template: dict[str, Any]) -> None:
    url = template["Outputs"]["DashboardUrl"]["Value"]["Fn::Sub"]
    assert "#dashboards:name=${Dashboard}" in url


def test_the_dispatch_handler_emits_the_dashboards_lines(
        aws: Aws, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """End to end on moto, as Lambda runs it: the backlog of each priority that has a queue of
    its own (low has none here: its jobs go to the normal queue), the tasks of each revision,
    and the Queue dimension is the queue's name, not its URL."""
    from dispatcher import handlers
    from dispatcher.ops.client import JobClient
    from tests.helpers import client

    sqs = client("sqs", aws.proxy.url)
    high = sqs.create_queue(QueueName="longjobs-jobs-high")["QueueUrl"]
    monkeypatch.setenv("LONGJOBS_HIGH_QUEUE_URL", high)
    monkeypatch.delenv("LONGJOBS_LOW_QUEUE_URL", raising=False)  # low shares the normal queue
    monkeypatch.setenv("LONGJOBS_MAX_RUNNING_TASKS", "2")
    JobClient().submit_many([{"kind": "k", "payload": {}, "job_id": f"j{i}"} for i in range(3)])
    sqs.send_message(QueueUrl=high, MessageBody=json.dumps(
        {"schema_version": 1, "job_id": "h", "kind": "k", "payload": {}}))

    class Context:
        def get_remaining_time_in_millis(self) -> int:
            return 50_000

    capsys.readouterr()
    handlers.dispatch({}, Context())
    blobs = [json.loads(line) for line in capsys.readouterr().out.splitlines()
             if line.startswith('{"_aws"')]
    emitted = emitted_by(blobs)
    assert all(dict(e.values).get("Queue") in (None, "longjobs-jobs") for e in emitted)

    def value(name: str, **dims: str) -> float:
        (blob,) = [b for b in blobs if name in b and all(b.get(k) == v for k, v in dims.items())
                   and set(b["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0])
                   == {"service", "Queue", *dims}]
        v = blob[name]
        return float(v[0] if isinstance(v, list) else v)

    backlog = {p: value("Backlog", Priority=p) for p in ("high", "normal")}
    assert not any(b.get("Priority") == "low" for b in blobs)
    assert backlog["high"] + backlog["normal"] == value("Backlog") == 2  # 4 sent, 2 admitted
    assert value("RunningTasks", TaskDefinition="longjobs-worker:1") == value("RunningTasks") == 2
