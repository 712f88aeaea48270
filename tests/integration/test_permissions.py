"""Permissions checked against behaviour: every AWS call a component makes is allowed by its role.

Each component runs against moto through the proxy (the scenario:
:mod:`tests.integration.permission_scenario`), which records every AWS request it makes
(:meth:`AwsProxy.recording`): the dispatcher's tick (``handlers.dispatch``, a first one whose
recording fails and gives its message back), the task-event function (``handlers.task_event``,
a finished task and reruns, one of a bundle too large for one transaction), the job runner
(``python -m job_runner`` as a subprocess), the dependents function
(``handlers.release_dependents`` on the table's stream), the job state-change publisher
(``handlers.publish_job_events`` on the same stream records) and ``longjobs deploy``; the tick runs
again after the stops (it settles what it stopped) and after a stack update that follows the
deploy (it re-derives the deployment).
Each request is mapped to the IAM authorizations AWS performs for it
(:mod:`tests.integration.iam_checks`), what AWS itself does with a function's role is added
(:mod:`tests.integration.aws_on_behalf`), and a small evaluator checks the component's policy in
``infra/template.yaml`` (after the SAM transform) allows each of them.

An AWS call added without its permission fails ``test_every_call_is_allowed``; a statement
whose removal would go unnoticed fails ``test_removing_a_statement_is_caught``; a grant no call
uses fails ``test_every_grant_is_exercised``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from samtranslator.yaml_helper import yaml_parse

from dispatcher.testing.moto import MotoEndpoint
from dispatcher.testing.proxy import AwsProxy, RecordedCall
from tests.integration.aws_on_behalf import ON_BEHALF, OnBehalf, configured
from tests.integration.iam_checks import (
    ACCOUNT,
    ATTRS,
    EVENT_BUS,
    NAMES,
    QUEUE_ARN,
    REGION,
    TABLE_ARN,
    Auth,
    allowed,
    as_list,
    matches,
    resolve,
)
from tests.integration.permission_scenario import Exercise, exercised
from tests.integration.test_infra import TEMPLATE

# component label -> the template resource holding its policy
COMPONENTS = {
    "dispatcher": "DispatcherFunctionRole",
    "task-event": "TaskEventFunctionRole",
    "runner": "WorkerTaskRole",
    "deploy": "DeployPolicy",
    "dependents": "DependentsFunctionRole",
    "job-events": "JobEventsFunctionRole",
}
# The functions whose every statement must be needed (the proof that the test has teeth).
PROVEN = {"dispatcher": "DispatcherFunction", "task-event": "TaskEventFunction",
          "dependents": "DependentsFunction", "job-events": "JobEventsFunction"}



# ------------------------------------------------------------------------- the components run
@pytest.fixture(scope="module")
def exercise(moto_server: MotoEndpoint, proxy: AwsProxy,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exercise]:
    """Every component run once (:mod:`tests.integration.permission_scenario`)."""
    yield from exercised(moto_server, proxy, tmp_path_factory)


# ---------------------------------------------------------------------------- the template side


def policy(expanded: dict[str, Any], component: str) -> list[dict[str, Any]]:
    """The statements of a component's role (all inline policies) or managed policy."""
    props = expanded["Resources"][COMPONENTS[component]]["Properties"]
    documents = ([props["PolicyDocument"]] if "PolicyDocument" in props
                 else [p["PolicyDocument"] for p in props.get("Policies", [])])
    return [s for d in documents for s in d["Statement"]]


def denied(expanded: dict[str, Any], exercise: Exercise, component: str,
           statements: list[dict[str, Any]] | None = None) -> list[str]:
    statements = policy(expanded, component) if statements is None else statements
    return sorted({str(a) for a in exercise.auths(component) if not allowed(statements, a)})


def _function_sids(function: str) -> list[str]:
    """The Sids of the statements the template writes for a function (at collection time).

    The transformed role holds more (SAM adds the dead-letter queue's sqs:SendMessage, which
    Lambda itself uses); the proof is about the statements written here.
    """
    template = yaml_parse(TEMPLATE.read_text())
    policies = template["Resources"][function]["Properties"]["Policies"]
    sids = [st.get("Sid", "") for p in policies for st in p["Statement"]]
    assert all(sids) and len(set(sids)) == len(sids), f"{function}: give each statement a Sid"
    return sids


# ------------------------------------------------------------------------------------ the tests


@pytest.mark.parametrize("component", sorted(COMPONENTS))
def test_every_call_is_allowed(expanded: dict[str, Any], exercise: Exercise,
                               component: str) -> None:
    auths = exercise.auths(component)
    assert auths, f"the scenario made no AWS call as {component}"
    assert denied(expanded, exercise, component) == [], (
        f"{COMPONENTS[component]} does not allow what {component} does")


@pytest.mark.parametrize(("component", "sid"), [
    (component, sid) for component, function in sorted(PROVEN.items())
    for sid in _function_sids(function)])
def test_removing_a_statement_is_caught(expanded: dict[str, Any], exercise: Exercise,
                                        component: str, sid: str) -> None:
    """The proof that the check has teeth: without any one statement, some call is denied."""
    statements = policy(expanded, component)
    rest = [s for s in statements if s.get("Sid") != sid]
    assert len(rest) == len(statements) - 1
    assert denied(expanded, exercise, component, rest), (
        f"removing {sid} from {COMPONENTS[component]} went unnoticed: either no test "
        "exercises it (exercise it) or nothing needs it (drop it)")


def test_the_runner_is_granted_exactly_what_it_calls(expanded: dict[str, Any],
                                                    exercise: Exercise) -> None:
    """Job handlers run in the runner's process, with the worker task role's credentials: the
    role grants the actions the runner performs on the table and no other (what handlers need
    beyond that comes from JobPolicyArns)."""
    statements = policy(expanded, "runner")
    granted = {a for s in statements if s["Effect"] == "Allow" for a in as_list(s["Action"])}
    performed = {a.action for a in exercise.auths("runner")}
    assert granted == performed == {"dynamodb:GetItem", "dynamodb:BatchGetItem",
                                    "dynamodb:UpdateItem", "dynamodb:ConditionCheckItem",
                                    "dynamodb:Query"}
    assert {str(resolve(s["Resource"])) for s in statements} == {
        TABLE_ARN, f"{TABLE_ARN}/index/by_status_shard"}


@pytest.mark.parametrize("queue", ["JobQueue", "HighJobQueue", "LowJobQueue"])
def test_every_priority_queue_is_drained_under_its_grant(expanded: dict[str, Any],
                                                         exercise: Exercise, queue: str) -> None:
    """The tick drains the three priorities' queues; DrainQueue names each one, and
    without any one of them the dispatcher is denied."""
    arn = ATTRS[f"{queue}.Arn"]
    used = {a.action for a in exercise.auths("dispatcher") if a.resource == arn}
    assert {"sqs:GetQueueAttributes", "sqs:ReceiveMessage", "sqs:DeleteMessage"} <= used, used
    statements = copy.deepcopy(policy(expanded, "dispatcher"))
    (drain,) = [s for s in statements if s.get("Sid") == "DrainQueue"]
    drain["Resource"] = [r for r in as_list(drain["Resource"])
                         if r != {"Fn::GetAtt": [queue, "Arn"]}]
    assert len(drain["Resource"]) == 2
    assert any(a.resource == arn for a in _denied_auths(statements, exercise))


def _denied_auths(statements: list[dict[str, Any]], exercise: Exercise) -> list[Auth]:
    return [a for a in exercise.auths("dispatcher") if not allowed(statements, a)]


def test_a_call_without_its_permission_fails(expanded: dict[str, Any]) -> None:
    """A new AWS call made by a component without a grant is reported (the failure mode)."""
    new = Exercise([RecordedCall("task-event", "sqs.SendMessageBatch",
                                 {"QueueUrl": f"https://sqs/{ACCOUNT}/{NAMES.queue}"}),
                    RecordedCall("runner", "ecs.StopTask",
                                 {"cluster": NAMES.cluster, "task": "abc"}),
                    RecordedCall("dispatcher", "dynamodb.Scan", {"TableName": NAMES.table}),
                    # Events sent to a bus other than the stack's (here: the default bus).
                    RecordedCall("job-events", "events.PutEvents",
                                 {"EventBusNames": ["default", EVENT_BUS]})])
    assert denied(expanded, new, "task-event") == [
        f"sqs:SendMessage on {QUEUE_ARN} (from sqs.SendMessageBatch)"]
    assert denied(expanded, new, "job-events") == [
        f"events:PutEvents on arn:aws:events:{REGION}:{ACCOUNT}:event-bus/default "
        "(from events.PutEvents)"]
    assert len(denied(expanded, new, "runner")) == 1
    assert len(denied(expanded, new, "dispatcher")) == 1


@pytest.mark.parametrize("entry", ON_BEHALF, ids=lambda o: f"{o.component}-{o.action}")
def test_what_aws_does_for_a_function_is_configured(entry: OnBehalf) -> None:
    """A grant kept for AWS's use (not our calls') is kept only while the template makes AWS
    use it with that function's role: its stream mapping, its on-failure destination, its
    dead-letter queue."""
    template = yaml_parse(TEMPLATE.read_text())
    function = PROVEN[entry.component]
    assert configured(template, entry, function), (
        f"{entry.configured_by} no longer makes AWS perform {entry.action} with {function}'s "
        "role: drop its grant and its entry in tests/integration/aws_on_behalf.py")
    name, path, _ = entry.configured_by
    unconfigured = copy.deepcopy(template)
    *parents, last = path.split(".")
    holder = unconfigured["Resources"][name]["Properties"]
    for key in parents:
        holder = holder[key]
    del holder[last]
    assert not configured(unconfigured, entry, function)


def permission_matrix(exercise: Exercise) -> dict[str, list[str]]:
    return {c: sorted({a.action for a in exercise.auths(c)}) for c in sorted(COMPONENTS)}


def unexercised(expanded: dict[str, Any], exercise: Exercise) -> list[str]:
    """Granted (statement, action) pairs that no recorded call needed."""
    unused = []
    for component in sorted(COMPONENTS):
        auths = exercise.auths(component)
        for i, statement in enumerate(policy(expanded, component)):
            if statement["Effect"] != "Allow":
                continue
            for action in as_list(statement["Action"]):
                if not any(matches(statement, a, action) for a in auths):
                    unused.append(f"{COMPONENTS[component]} "
                                  f"{statement.get('Sid', f'statement {i}')}: {action}")
    return unused


def test_every_grant_is_exercised(expanded: dict[str, Any], exercise: Exercise,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Least privilege, kept: a grant that no recorded call uses and that AWS does not use
    on the function's behalf (aws_on_behalf.py) fails this, to be exercised or dropped."""
    matrix = permission_matrix(exercise)
    unused = unexercised(expanded, exercise)
    with capsys.disabled():
        print("\npermission matrix (component -> IAM actions performed):")
        for component, actions in matrix.items():
            print(f"  {component}: {', '.join(actions)}")
    assert not unused, "granted but not exercised by any test:\n  " + "\n  ".join(unused)
    assert all(matrix.values())
