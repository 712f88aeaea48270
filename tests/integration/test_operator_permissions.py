"""The ProducerPolicy and OperatorPolicy of the template, checked against the calls they serve.

The producer's commands (``longjobs submit``, ``JobClient.submit_many`` on every priority) and
the operator's (``jobs list/show/cancel/retry``, ``stats``, ``top``, ``dlq list/redrive``,
``schedules create/update/list/show/pause/resume/run-now/delete``, the CloudWatch Logs read
of ``jobs logs`` and the console's read of the stack's alarms in alarm) run
through the CLI against moto behind the recording proxy, the way ``test_permissions.py`` runs the
stack's components; each request becomes the IAM authorizations AWS performs for it (that
module's evaluator). Each policy must allow every call, every action on every resource it grants
must be used by some call, and without any one of its statements some call is denied. The job
queues' policies must not deny the operator's redrive (a principal of this account) while
still keeping out other accounts' principals that are not listed producers.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from samtranslator.yaml_helper import yaml_parse
from typer.testing import CliRunner

from dispatcher import handlers
from dispatcher.aws.clients import endpoint_client
from dispatcher.cli.app import app
from dispatcher.console.lambda_entry import build
from dispatcher.console.team import SCOPE_OPERATE, SCOPE_READ
from dispatcher.local.provision import provision
from dispatcher.ops.client import JobClient
from dispatcher.testing.moto import MotoEndpoint
from dispatcher.testing.proxy import AwsProxy, RecordedCall
from tests.conftest import BASE_ENV
from tests.http_api_events import CSRF, body_text, http_api_event
from tests.integration.iam_checks import (
    ACCOUNT,
    ALARM_PREFIX,
    REGION,
    WORKER_LOG_GROUP,
    Auth,
    allowed,
    as_list,
    matches,
    resolve,
)
from tests.integration.permission_scenario import Exercise, LambdaContext
from tests.integration.test_infra import TEMPLATE
from tests.integration.test_template_permissions import Rendering

POLICIES = {"producer": "ProducerPolicy", "operator": "OperatorPolicy",
            "console": "ConsolePolicy"}
# Every command of each kind, as a user types it (`jobs show`/`cancel`/`retry` name jobs the
# scenario submits).
OPERATOR_COMMANDS = [
    ["jobs", "list"], ["jobs", "show", "long"], ["stats", "--json"], ["top", "--once", "--json"],
    ["jobs", "cancel", "later"],  # not started: cancelled at once, its bundle-mate waits on
    ["jobs", "retry", "later"],  # CANCELLED -> PENDING in a new bundle
    ["jobs", "cancel", "long"],  # launched: a cancel request on its bundle
    # Many at once: COUNT queries, the index walked page by page, each job cancelled as above.
    ["jobs", "cancel", "--status", "PENDING", "--yes", "--reason", "permission check"],
    ["dlq", "list"], ["dlq", "redrive"],
    # Schedules in the stack's group, sent with its scheduler role: of each priority's queue.
    ["schedules", "create", "nightly", "echo", "--cron", "0 2 * * ? *", "--timezone",
     "Europe/Berlin", "--priority", "high"],
    ["schedules", "create", "often", "echo", "--rate", "15 minutes", "--overlap", "skip"],
    ["schedules", "update", "often", "--priority", "low"],
    ["schedules", "list"], ["schedules", "show", "nightly"],
    ["schedules", "pause", "nightly"], ["schedules", "resume", "nightly"],
    ["schedules", "run-now", "often"], ["schedules", "delete", "nightly"],
]
PRIORITIES = ("high", "normal", "low")
# The team console's walk (its function's role has ConsolePolicy): every page, and every
# action a person with the operate scope can take, on jobs the scenario submits for it.
CONSOLE_PAGES = [("/x", ""), ("/x/jobs", ""), ("/x/jobs", "state=PENDING"),
                 ("/x/jobs/c-long", ""), ("/x/bulk", "verb=cancel&status=PENDING&preview=1"),
                 ("/x/deployments", ""), ("/x/dead-letters", ""), ("/x/audit", "")]
CONSOLE_ACTIONS = [("/x/jobs/c-later/cancel", {}), ("/x/jobs/c-later/retry", {}),
                   ("/x/jobs/c-long/cancel", {}),
                   ("/x/bulk", {"verb": "cancel", "status": "PENDING", "matched": "100"}),
                   ("/x/dead-letters/redrive", {"limit": "100"})]
TEAM_LOGIN = {"LONGJOBS_CONSOLE_CLIENT_ID": "client-1",
              "LONGJOBS_CONSOLE_AUTHORIZE_URL": "https://team.example/oauth2/authorize",
              "LONGJOBS_CONSOLE_TOKEN_URL": "https://team.example/oauth2/token"}


def _ok(result: Any, args: list[str]) -> None:
    assert result.exit_code == 0, f"longjobs {' '.join(args)}: {result.output}"


@pytest.fixture(scope="module")
def exercise(moto_server: MotoEndpoint, proxy: AwsProxy) -> Iterator[Exercise]:
    """Submit as a producer, let a tick record the jobs, put dead letters in the DLQ, then run
    every operator command; keep what the proxy recorded of the two."""
    moto_server.reset()
    moto_server.pin_ecs_tasks()
    cli = CliRunner()
    with pytest.MonkeyPatch.context() as mp:
        for k, v in BASE_ENV.items():
            mp.setenv(k, v)
        mp.setenv("AWS_ENDPOINT_URL", proxy.url)
        env = provision(proxy.url)
        for k, v in env.items():
            mp.setenv(k, v)
        proxy.clear_recorded()

        tomorrow = float(int(time.time()) + 86400)
        with proxy.recording("producer"):
            args = ["submit", "echo", "--job-id", "long", "--estimated-seconds", "3600"]
            _ok(cli.invoke(app, args), args)
            JobClient().submit_many(
                [{"kind": "echo", "payload": {}, "job_id": f"{p}-1", "priority": p,
                  "estimated_seconds": 3600} for p in ("high", "low")]
                # Two small jobs held until tomorrow share a bundle: cancelling one of them
                # checks the bundle without closing it.
                + [{"kind": "echo", "payload": {}, "job_id": job_id, "estimated_seconds": 1,
                    "not_before": tomorrow} for job_id in ("later", "later-too")])
        handlers.dispatch({}, LambdaContext())

        # Dead letters of each priority, as SQS moves them after maxReceiveCount receives.
        sqs = endpoint_client("sqs", proxy.url, REGION)
        for p in PRIORITIES:
            sqs.send_message(QueueUrl=env["LONGJOBS_DLQ_URL"], MessageBody=json.dumps(
                {"schema_version": 1, "job_id": f"dead-{p}", "kind": "echo", "payload": {},
                 "priority": p}))

        with proxy.recording("operator"):
            for args in OPERATOR_COMMANDS:
                _ok(cli.invoke(app, args), args)
        # The team console, on jobs and dead letters of its own.
        with proxy.recording("producer"):
            JobClient().submit_many(
                [{"kind": "echo", "payload": {}, "job_id": "c-long", "estimated_seconds": 3600}]
                + [{"kind": "echo", "payload": {}, "job_id": job_id, "estimated_seconds": 1,
                    "not_before": tomorrow} for job_id in ("c-later", "c-later-too")])
        handlers.dispatch({}, LambdaContext())
        for p in PRIORITIES:
            sqs.send_message(QueueUrl=env["LONGJOBS_DLQ_URL"], MessageBody=json.dumps(
                {"schema_version": 1, "job_id": f"c-dead-{p}", "kind": "echo", "payload": {},
                 "priority": p}))
        with proxy.recording("console"):
            function = build({**env, **TEAM_LOGIN})
            operate = (SCOPE_READ, SCOPE_OPERATE)
            for path, query in CONSOLE_PAGES:
                answer = function(http_api_event("GET", path, query=query), None)
                assert answer["statusCode"] == 200, (path, body_text(answer)[:300])
            for path, form in CONSOLE_ACTIONS:
                answer = function(http_api_event("POST", path, scopes=operate,
                                                 form={"csrf": CSRF, **form}), None)
                assert answer["statusCode"] in (200, 303), (path, body_text(answer)[:300])
        # `jobs logs` on AWS filters the worker's log group; local provisioning registers no
        # awslogs configuration, so that request is added as the adapter sends it (its shape:
        # tests/contract/test_cloudwatch_job_logs.py).
        logs = RecordedCall("operator", "logs.FilterLogEvents",
                            {"logGroupName": WORKER_LOG_GROUP})
        # The console's overview reads the stack's alarms in alarm by their names' prefix
        # (the stack's AlarmNamePrefix output); local provisioning makes no alarm, so that
        # request is added as the adapter sends it (tests/contract/test_alarm_board_contract.py).
        alarms = RecordedCall("operator", "cloudwatch.DescribeAlarms",
                              {"AlarmNamePrefix": ALARM_PREFIX})
        yield Exercise([*proxy.recorded(), logs, alarms,
                        RecordedCall("console", logs.operation, logs.target),
                        RecordedCall("console", alarms.operation, alarms.target)])
        proxy.clear_recorded()


def statements(expanded: dict[str, Any], component: str) -> list[dict[str, Any]]:
    document = expanded["Resources"][POLICIES[component]]["Properties"]["PolicyDocument"]
    return list(document["Statement"])


def denied(statements: list[dict[str, Any]], auths: list[Auth]) -> list[str]:
    return sorted({str(a) for a in auths if not allowed(statements, a)})


def _sids(component: str) -> list[str]:
    """The Sids of a policy as the template writes it (at collection time)."""
    template = yaml_parse(TEMPLATE.read_text())
    found = [s["Sid"] for s in template["Resources"][POLICIES[component]]["Properties"]
             ["PolicyDocument"]["Statement"]]
    assert len(set(found)) == len(found)
    return found


@pytest.mark.parametrize("component", sorted(POLICIES))
def test_every_call_is_allowed(expanded: dict[str, Any], exercise: Exercise,
                               component: str) -> None:
    auths = exercise.auths(component)
    assert auths, f"the scenario made no AWS call as {component}"
    assert denied(statements(expanded, component), auths) == []


@pytest.mark.parametrize("component", sorted(POLICIES))
def test_every_grant_is_used(expanded: dict[str, Any], exercise: Exercise,
                             component: str) -> None:
    """Each action of each statement, on each of its resources, is needed by some call: the
    policy grants what the commands do and no more."""
    auths = exercise.auths(component)
    unused = []
    for statement in statements(expanded, component):
        for action in as_list(statement["Action"]):
            for resource in as_list(statement["Resource"]):
                narrowed = {**statement, "Resource": resource}
                if not any(matches(narrowed, a, action) for a in auths):
                    unused.append(f"{statement['Sid']}: {action} on {resolve(resource)}")
    assert unused == []


@pytest.mark.parametrize(("component", "sid"), [
    (component, sid) for component in sorted(POLICIES) for sid in _sids(component)])
def test_removing_a_statement_is_caught(expanded: dict[str, Any], exercise: Exercise,
                                        component: str, sid: str) -> None:
    rest = [s for s in statements(expanded, component) if s["Sid"] != sid]
    assert denied(rest, exercise.auths(component)), f"{sid} of {POLICIES[component]} is not needed"


def test_the_operator_commands_call_what_the_policy_names(exercise: Exercise) -> None:
    """The calls themselves (the policy comments name these): the table, the queues, the
    worker's task definition and its log group (a job's log lines), the schedules of the
    stack's group and the scheduler role passed to them only, and the dead letters went back
    to the queue of each one's priority."""
    performed = {(a.action, a.resource.rsplit(":", 1)[-1].rsplit("/", 1)[-1])
                 for a in exercise.auths("operator")}
    services = {action.split(":")[0] for action, _ in performed}
    assert services == {"dynamodb", "sqs", "ecs", "logs", "scheduler", "iam", "cloudwatch"}
    assert {action for action, _ in performed if action.startswith(("ecs:", "logs:"))} == {
        "ecs:DescribeTaskDefinition", "logs:FilterLogEvents"}
    sent = {queue for action, queue in performed if action == "sqs:SendMessage"}
    assert sent == {"longjobs-jobs", "longjobs-jobs-high", "longjobs-jobs-low"}
    assert {a.action for a in exercise.auths("producer")} == {"sqs:SendMessage"}


# ------------------------------------------------------------------------------- queue policy


def send_denied(expanded: dict[str, Any], queue_policy: str, principal: str) -> bool:
    """Whether a queue policy's explicit Deny applies to sqs:SendMessage by ``principal`` (over
    TLS): its condition operators are all negative ones, every key must hold."""
    rendered = Rendering(expanded, {"ProducerRoleArns": [PRODUCER]}).value(
        expanded["Resources"][queue_policy]["Properties"]["PolicyDocument"])
    context = {"aws:PrincipalArn": principal, "aws:PrincipalAccount": principal.split(":")[4],
               "aws:SecureTransport": "true"}
    negative = {"ArnNotEquals": lambda actual, wanted: actual not in as_list(wanted),
                "StringNotEquals": lambda actual, wanted: actual not in as_list(wanted),
                "Bool": lambda actual, wanted: actual == str(wanted).lower()}
    for statement in rendered["Statement"]:
        if statement["Effect"] != "Deny" or not any(
                a in ("sqs:SendMessage", "sqs:*") for a in as_list(statement["Action"])):
            continue
        if all(negative[op](context[key], wanted)
               for op, tests in statement.get("Condition", {}).items()
               for key, wanted in tests.items()):
            return True
    return False


PRODUCER = "arn:aws:iam::210987654321:role/producer-elsewhere"


@pytest.mark.parametrize("queue_policy", ["JobQueuePolicy", "HighJobQueuePolicy",
                                          "LowJobQueuePolicy"])
def test_queue_policies_let_this_accounts_operators_redrive(expanded: dict[str, Any],
                                                            queue_policy: str) -> None:
    operator = f"arn:aws:iam::{ACCOUNT}:role/aws-reserved/sso.amazonaws.com/AWSReservedSSO_Ops_1"
    assert not send_denied(expanded, queue_policy, operator)
    assert not send_denied(expanded, queue_policy, PRODUCER)  # a listed producer elsewhere
    assert send_denied(expanded, queue_policy, "arn:aws:iam::210987654321:role/intruder")


def test_the_console_calls_what_its_policy_names(exercise: Exercise) -> None:
    """The team console reads and acts as the operator's commands do, and writes its audit
    records to the table; it never touches the schedules (ConsolePolicy grants none)."""
    performed = {a.action for a in exercise.auths("console")}
    assert {action.split(":")[0] for action in performed} == {
        "dynamodb", "sqs", "ecs", "logs", "cloudwatch"}
    assert {"dynamodb:PutItem", "sqs:SendMessage", "sqs:DeleteMessage"} <= performed
