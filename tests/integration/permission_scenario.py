"""The scenario ``tests/integration/test_permissions.py`` checks the roles against: every
component run once on moto through the proxy, each under its label (its role), and what the
proxy recorded of each (see that module)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dispatcher import handlers
from dispatcher.aws.clients import endpoint_client
from dispatcher.cli.app import app
from dispatcher.domain import task_events
from dispatcher.domain.bundles import Bundle, follow_on_id
from dispatcher.domain.costs import TaskBill
from dispatcher.domain.jobs import Job
from dispatcher.local.event_feed import BATCH
from dispatcher.local.provision import provision
from dispatcher.ops.client import JobClient
from dispatcher.ports.table import Set, Update
from dispatcher.store import Store, codec
from dispatcher.store.state_writes import JOBS_PER_TRANSACTION
from dispatcher.testing.moto import MotoEndpoint
from dispatcher.testing.proxy import AwsProxy, RecordedCall
from dispatcher.wiring.adapters import open_store
from tests.conftest import BASE_ENV
from tests.helpers import stream_records
from tests.integration.aws_on_behalf import on_behalf
from tests.integration.iam_checks import (
    CLUSTER_ARN,
    EVENT_BUS,
    EXECUTION_ROLE,
    HIGH_QUEUE,
    LOW_QUEUE,
    NAMES,
    REGION,
    TASK_ROLE,
    Auth,
    authorizations,
)

ROOT = Path(__file__).resolve().parents[2]
FAR_FUTURE = 4_000_000_000  # a not_before (epoch seconds) the scenario never reaches


class LambdaContext:
    """What the handlers read of their Lambda context: the time they have left."""

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


def _follow_on(store: Store, job_id: str) -> None:
    """Make ``job_id``'s bundle the first of a batch with one follow-on, as a drain of a large
    backlog records them: its runner then takes the follow-on (dispatcher/store/follow_ons.py)
    and its calls are the runner's too."""
    job = store.get_job(job_id)
    assert job is not None and job.bundle_id
    store.table.write(Update(codec.bundle_key(job.bundle_id), [Set("batch", "perm-batch")]))
    follow = Bundle(bundle_id=follow_on_id("perm-batch", 0), job_ids=["follow0"],
                    batch="perm-batch", estimated_seconds=0.1)
    store.record([follow], [Job(job_id="follow0", kind="echo", payload={},
                                bundle_id=follow.bundle_id, estimated_seconds=0.1)])
    store.end_batch("perm-batch", 1)
    # The last tick left other due work waiting (TickSummary.others_due): the take first
    # looks for it (a Query of the status index), finds none due now, and takes the follow-on.
    tick = store.table.get(codec.TICK_KEY)
    assert tick is not None and isinstance(tick.summary, dict)
    store.table.write(Update(codec.TICK_KEY, [Set("summary", {**tick.summary,
                                                              "others_due": {"normal": 1}})]))


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


def exercised(moto_server: MotoEndpoint, proxy: AwsProxy,
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
            refused = handlers.dispatch({}, LambdaContext())
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
                "depends_on": ["small0"]}]
            # An array whose children are not due yet: cancelled below, the tick after it
            # ends the array and deletes its marker (in a transaction: a DeleteItem).
            + [{"kind": "echo", "payload": {}, "job_id": "arr", "array_size": 2,
                "estimated_seconds": 3600, "not_before": FAR_FUTURE}])
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
            handlers.dispatch({}, LambdaContext())

        def task_of(job_id: str) -> tuple[str, str]:
            job = store.get_job(job_id)
            assert job is not None and job.bundle_id
            bundle = store.get_bundle(job.bundle_id)
            assert bundle is not None and bundle.task_arn and bundle.launch_id
            return bundle.task_arn, bundle.launch_id

        small_arn, small_launch = task_of("small0")
        _follow_on(store, "small0")
        with proxy.recording("runner"):
            _run_runner(dict(os.environ), small_arn, small_launch,
                        tmp_path_factory.mktemp("runner") / "log.jsonl")
        taken = store.get_job("follow0")  # its runner took the follow-on after its bundle
        assert taken is not None and taken.state == "SUCCEEDED", taken
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

        # Each stop carries its bill, as ECS's events do: the stop settles it (the pointer,
        # the usage counters), through the task-event function's own grants.
        now = time.time()
        bill = TaskBill(256, 512, now - 90, now, "FARGATE_SPOT")
        with proxy.recording("task-event"):
            finished = handlers.task_event(task_events.sample_event(
                small_arn, stop_code="EssentialContainerExited", exit_code=0,
                cluster_arn=CLUSTER_ARN, bill=bill), None)
            rerun = handlers.task_event(task_events.sample_event(
                task_of("spot")[0], stop_code="SpotInterruption", exit_code=143,
                cluster_arn=CLUSTER_ARN, bill=bill), None)
            bulk_rerun = handlers.task_event(task_events.sample_event(
                task_of(bulk.job_ids[0])[0], stop_code="SpotInterruption", exit_code=143,
                cluster_arn=CLUSTER_ARN), None)
        # small0 ran (alone or bundled with small1: bundles are sized by the backlog), then
        # its task took the follow-on: the stop reports both.
        assert finished.get("finished") == {"succeeded": 1, "failed": 0}, finished
        assert finished["settlement"] is not None, finished
        assert rerun["settlement"] is not None, rerun
        assert finished.get("succeeded_before", 0) >= 1, finished
        assert rerun.get("relaunched") is True, rerun
        # More job updates than one transaction holds: settled in two, the first checking
        # the bundle (a ConditionCheck).
        assert len(bulk_rerun["rerun"]) == len(bulk.job_ids), bulk_rerun
        assert bulk_rerun["relaunched"] is True, bulk_rerun

        # A second tick reconciles: the unclaimed tasks still RUNNING are stopped as stuck.
        # It also ends the array an operator cancelled.
        JobClient().cancel("arr")
        mp.setenv("LONGJOBS_START_TIMEOUT_SECONDS", "0")
        with proxy.recording("dispatcher"):
            second = handlers.dispatch({}, LambdaContext())
        assert second["reconcile"]["stuck_stopped"] >= 1, second
        assert store.table.get(codec.array_key("arr")) is None, "the array's marker was kept"

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
            third = handlers.dispatch({}, LambdaContext())
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
