"""Permissions checked against behaviour: every AWS call a component makes is allowed by its role.

Each component runs against moto through the proxy, which records every AWS request it makes
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
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from samtranslator.yaml_helper import yaml_parse
from typer.testing import CliRunner

from dispatcher import handlers
from dispatcher.aws.clients import endpoint_client
from dispatcher.aws.dynamodb import open_store
from dispatcher.cli.app import app
from dispatcher.domain import task_events
from dispatcher.domain.bundles import Bundle
from dispatcher.domain.jobs import Job
from dispatcher.local.event_feed import BATCH
from dispatcher.local.provision import provision
from dispatcher.ops.client import JobClient
from dispatcher.store import Store
from dispatcher.store.runner import JOBS_PER_TRANSACTION
from dispatcher.testing.moto import MotoEndpoint
from dispatcher.testing.proxy import AwsProxy, RecordedCall
from tests.conftest import BASE_ENV
from tests.helpers import stream_records
from tests.integration.aws_on_behalf import ON_BEHALF, OnBehalf, configured, on_behalf
from tests.integration.iam_checks import (
    ACCOUNT,
    ATTRS,
    CLUSTER_ARN,
    EVENT_BUS,
    EXECUTION_ROLE,
    HIGH_QUEUE,
    LOW_QUEUE,
    NAMES,
    QUEUE_ARN,
    REGION,
    TABLE_ARN,
    TASK_ROLE,
    Auth,
    allowed,
    as_list,
    authorizations,
    matches,
    resolve,
)
from tests.integration.test_infra import TEMPLATE, sam_expand

ROOT = Path(__file__).resolve().parents[2]

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


class _Context:
    def get_remaining_time_in_millis(self) -> int:
        return 50_000


@dataclass
class Exercise:
    calls: list[RecordedCall]
    roles: dict[str, list[str]] = field(default_factory=dict)  # task definition -> roles

    def task_definition_roles(self, td: str) -> list[str]:
        key = td.rsplit("/", 1)[-1]
        assert key in self.roles, f"RunTask of an unknown task definition {td}"
        return self.roles[key]

    def auths(self, component: str) -> list[Auth]:
        """The authorizations made with ``component``'s role: for each call it made, and
        those AWS makes on its behalf (:mod:`tests.integration.aws_on_behalf`)."""
        return [a for c in self.calls if c.component == component
                for a in authorizations(c, self.task_definition_roles)] + on_behalf(component)


def _run_runner(env: dict[str, str], task_arn: str, launch_id: str, log: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "job_runner"],
        env={**env, "LONGJOBS_TASK_ARN": task_arn, "LONGJOBS_LAUNCH_ID": launch_id,
             "LONGJOBS_HANDLERS": "echo=tests.handlers:echo",
             "LONGJOBS_TEST_LOG": str(log), "PYTHONPATH": str(ROOT),
             "LONGJOBS_HEARTBEAT_SECONDS": "1", "LONGJOBS_FLUSH_SECONDS": "0.2",
             "LONGJOBS_ASSIGN_WAIT_SECONDS": "10"},
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def exercise(moto_server: MotoEndpoint, proxy: AwsProxy,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exercise]:
    """Run every component once, each under its label, and keep what the proxy recorded."""
    moto_server.reset()
    moto_server.pin_ecs_tasks()
    with pytest.MonkeyPatch.context() as mp:
        for k, v in BASE_ENV.items():
            mp.setenv(k, v)
        mp.setenv("AWS_ENDPOINT_URL", proxy.url)
        env = {**provision(proxy.url), "LONGJOBS_LAUNCH_RECOVERY_SECONDS": "0",
               "LONGJOBS_LAUNCH_BACKOFF_SECONDS": "0"}
        env.update(_priority_queues(proxy.url, env["LONGJOBS_DLQ_URL"]))
        for k, v in env.items():
            mp.setenv(k, v)
        # The worker revision as the template registers it: with the task and execution roles
        # (RunTask passes them) and a tag (deploy carries tags over).
        ecs = endpoint_client("ecs", proxy.url, REGION)
        current = ecs.describe_task_definition(taskDefinition=NAMES.family)["taskDefinition"]
        registered = ecs.register_task_definition(
            family=NAMES.family, taskRoleArn=TASK_ROLE, executionRoleArn=EXECUTION_ROLE,
            networkMode="awsvpc", requiresCompatibilities=["FARGATE"], cpu="256", memory="512",
            containerDefinitions=current["containerDefinitions"],
            tags=[{"key": "app", "value": "longjobs"}])["taskDefinition"]
        roles = {registered["taskDefinitionArn"].rsplit("/", 1)[-1]: [TASK_ROLE, EXECUTION_ROLE]}
        # The functions get the stack's revision, as the template hands it to them.
        mp.setenv("LONGJOBS_STACK_TASK_DEFINITION", registered["taskDefinitionArn"])
        # The table's stream, as the template enables it (its readers are the functions'
        # mappings, whose reads are not the functions' calls: read from moto directly).
        endpoint_client("dynamodb", moto_server.url, REGION).update_table(
            TableName=NAMES.table, StreamSpecification={
                "StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"})
        # The publisher's bus (the stack's EventBus), as an operator creates it.
        endpoint_client("events", moto_server.url, REGION).create_event_bus(Name=EVENT_BUS)
        mp.setenv("LONGJOBS_EVENT_BUS", EVENT_BUS)
        proxy.clear_recorded()

        # A tick whose recording fails gives the messages back at once (the drain's error
        # path, ChangeMessageVisibilityBatch): spot's first recording is refused; the next
        # tick records it.
        JobClient().submit_many([{"kind": "echo", "payload": {}, "job_id": "spot",
                                  "estimated_seconds": 3600}])
        proxy.inject_error("dynamodb.TransactWriteItems", after_forward=False)
        with proxy.recording("dispatcher"):
            refused = handlers.dispatch({}, _Context())
        assert refused["intake"]["released"] == 1, refused
        store = open_store(env["LONGJOBS_TABLE"])
        bulk = _record_bulk_bundle(store)

        # Producers (not a component of the stack): small jobs share a bundle, long ones don't;
        # one waits for small0 (the tick links it; small0's end releases it).
        JobClient().submit_many(
            [{"kind": "echo", "payload": {"n": i}, "job_id": f"small{i}",
              "estimated_seconds": 0.1} for i in range(2)]
            + [{"kind": "echo", "payload": {}, "job_id": "stuck", "estimated_seconds": 3600}]
            + [{"kind": "echo", "payload": {}, "job_id": "after0", "estimated_seconds": 0.1,
                "depends_on": ["small0"]}])
        sqs = endpoint_client("sqs", proxy.url, REGION)
        sqs.send_message(QueueUrl=env["LONGJOBS_QUEUE_URL"], MessageBody='{"kind": "oops"')
        # One waits for small0 and for a job no one sent (yet), as a producer that cannot
        # read the table sends it: small0's end finds it waiting on, after reading whether
        # that other job was REJECTED (a GetItem of its rejection).
        sqs.send_message(QueueUrl=env["LONGJOBS_QUEUE_URL"], MessageBody=json.dumps(
            {"schema_version": 1, "job_id": "after1", "kind": "echo", "payload": {},
             "estimated_seconds": 0.1, "depends_on": ["small0", "never-sent"]}))
        # One job on each other priority's queue (sent as a producer would, to its queue): the
        # tick drains every queue by weight.
        for priority, variable in (("high", "LONGJOBS_HIGH_QUEUE_URL"),
                                   ("low", "LONGJOBS_LOW_QUEUE_URL")):
            sqs.send_message(QueueUrl=env[variable], MessageBody=json.dumps(
                {"schema_version": 1, "job_id": f"{priority}-1", "kind": "echo", "payload": {},
                 "estimated_seconds": 3600, "priority": priority}))

        with proxy.recording("dispatcher"):
            handlers.dispatch({}, _Context())

        def task_of(job_id: str) -> tuple[str, str]:
            job = store.get_job(job_id)
            assert job is not None and job.bundle_id
            bundle = store.get_bundle(job.bundle_id)
            assert bundle is not None and bundle.task_arn and bundle.launch_id
            return bundle.task_arn, bundle.launch_id

        small_arn, small_launch = task_of("small0")
        with proxy.recording("runner"):
            _run_runner(dict(os.environ), small_arn, small_launch,
                        tmp_path_factory.mktemp("runner") / "log.jsonl")
        records = stream_records(
            NAMES.table, endpoint_client("dynamodb", moto_server.url, REGION),
            endpoint_client("dynamodbstreams", moto_server.url, REGION))
        with proxy.recording("dependents"):
            released = handlers.release_dependents({"Records": records}, None)
        assert released["released"] == ["after0"], released
        # The stream's other reader, the publisher: a batch as its mapping hands one over.
        with proxy.recording("job-events"):
            published = handlers.publish_job_events({"Records": records[:BATCH]}, None)
        assert published == {"batchItemFailures": []}, published

        with proxy.recording("task-event"):
            finished = handlers.task_event(task_events.sample_event(
                small_arn, stop_code="EssentialContainerExited", exit_code=0,
                cluster_arn=CLUSTER_ARN), None)
            rerun = handlers.task_event(task_events.sample_event(
                task_of("spot")[0], stop_code="SpotInterruption", exit_code=143,
                cluster_arn=CLUSTER_ARN), None)
            bulk_rerun = handlers.task_event(task_events.sample_event(
                task_of(bulk.job_ids[0])[0], stop_code="SpotInterruption", exit_code=143,
                cluster_arn=CLUSTER_ARN), None)
        # small0 ran (alone or bundled with small1: bundles are sized by the backlog).
        assert "small0" in finished.get("succeeded", []), finished
        assert rerun.get("relaunched") is True, rerun
        # More job updates than one transaction holds: settled in two, the first checking
        # the bundle (a ConditionCheck).
        assert len(bulk_rerun["rerun"]) == len(bulk.job_ids), bulk_rerun
        assert bulk_rerun["relaunched"] is True, bulk_rerun

        # A second tick reconciles: the unclaimed tasks still RUNNING are stopped as stuck.
        mp.setenv("LONGJOBS_START_TIMEOUT_SECONDS", "0")
        with proxy.recording("dispatcher"):
            second = handlers.dispatch({}, _Context())
        assert second["reconcile"]["stuck_stopped"] >= 1, second

        with proxy.recording("deploy"):
            deployed = CliRunner().invoke(app, ["deploy", "--image",
                                                "registry.example/longjobs-worker:2"])
        assert deployed.exit_code == 0, deployed.output
        roles[deployed.output.strip()] = [TASK_ROLE, EXECUTION_ROLE]

        # A stack update registers the stack's revision again (new settings, the stack's
        # Image): the next tick copies it with the deployed image, and records the copy.
        stack = ecs.register_task_definition(
            family=NAMES.family, taskRoleArn=TASK_ROLE, executionRoleArn=EXECUTION_ROLE,
            networkMode="awsvpc", requiresCompatibilities=["FARGATE"], cpu="512", memory="1024",
            containerDefinitions=current["containerDefinitions"],
            tags=[{"key": "app", "value": "longjobs"}])["taskDefinition"]["taskDefinitionArn"]
        mp.setenv("LONGJOBS_STACK_TASK_DEFINITION", stack)
        with proxy.recording("dispatcher"):
            third = handlers.dispatch({}, _Context())
        # It also finds the tasks the second tick stopped STOPPED and settles them: the bulk
        # bundle, too, in two transactions.
        (settled,) = [o for o in third["reconcile"]["outcomes"] if o["bundle_id"] == "bulk"]
        assert len(settled["rerun"]) == len(bulk.job_ids), settled
        rederived = store.deployment()
        assert rederived is not None and rederived.derived_from == stack.rsplit("/", 1)[-1]
        roles[rederived.task_definition] = [TASK_ROLE, EXECUTION_ROLE]
        yield Exercise(proxy.recorded(), roles)
        proxy.clear_recorded()


def _record_bulk_bundle(store: Store) -> Bundle:
    """A bundle of more jobs than one transaction holds the job updates of
    (``JOBS_PER_TRANSACTION``), recorded as the tick records one (the store's ``record``), due
    now: a stop of its task is settled in two transactions, the first checking the bundle
    (a ConditionCheck). Recorded here, not drained from the queue: how a drain cuts its backlog
    into bundles (by the free task slots) is not what this scenario is about."""
    ids = [f"bulk{n}" for n in range(JOBS_PER_TRANSACTION + 1)]
    bundle = Bundle(bundle_id="bulk", job_ids=ids, estimated_seconds=0.1 * len(ids))
    jobs = [Job(job_id=i, kind="echo", payload={}, bundle_id=bundle.bundle_id,
                estimated_seconds=0.1) for i in ids]
    assert store.record([bundle], jobs) == set()
    return bundle


def _priority_queues(endpoint: str, dlq_url: str) -> dict[str, str]:
    """The high and low queues as the template creates them (the job queue's shape, the same
    dead-letter queue); the environment that points the components at them."""
    from dispatcher.local.provision import MAX_RECEIVE_COUNT, QUEUE_ATTRIBUTES

    sqs = endpoint_client("sqs", endpoint, REGION)
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])[
        "Attributes"]["QueueArn"]
    redrive = json.dumps({"deadLetterTargetArn": dlq_arn,
                          "maxReceiveCount": str(MAX_RECEIVE_COUNT)})
    return {variable: sqs.create_queue(QueueName=name, Attributes={
        **QUEUE_ATTRIBUTES, "RedrivePolicy": redrive})["QueueUrl"]
        for variable, name in (("LONGJOBS_HIGH_QUEUE_URL", HIGH_QUEUE),
                               ("LONGJOBS_LOW_QUEUE_URL", LOW_QUEUE))}


# ---------------------------------------------------------------------------- the template side


@pytest.fixture(scope="module")
def expanded() -> dict[str, Any]:
    return sam_expand(yaml_parse(TEMPLATE.read_text()))


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
                                    "dynamodb:UpdateItem", "dynamodb:ConditionCheckItem"}
    assert {str(resolve(s["Resource"])) for s in statements} == {TABLE_ARN}


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
