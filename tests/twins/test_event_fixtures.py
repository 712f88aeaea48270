"""The ECS event parser and the runner's task-ARN lookup, driven by AWS's published examples.

The fixtures in ``tests/fixtures/`` are AWS's own samples (sources in ``tests/fixtures/README.md``).
AWS publishes no STOPPED sample for every stop code, so :func:`stopped` derives one per code from
the published Fargate Task State Change sample (documented there too); the list of codes is
botocore's, so a code AWS adds fails :func:`test_stop_codes_are_botocores` until it is handled.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import botocore.session
import pytest

from dispatcher import settings
from dispatcher.domain import costs, task_events
from dispatcher.domain.stops import (
    INFRA_STOP_CODES,
    RUNNER_FAILED_EXIT,
    USER_STOP_PREFIX,
    StopClass,
    StopCode,
    TaskStop,
    classify,
)
from dispatcher.domain.task_events import Ignored
from job_runner.process import task_arn

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
# The worker container of the published Fargate sample (its only container).
WORKER = "FargateApp"
FARGATE_TASK_ARN = ("arn:aws:ecs:us-west-2:111122223333:task/FargateCluster/"
                    "c13b4cb40f1f4fe4a2971f76ae5a47ad")
STOPPED_AT = "2020-01-23T17:59:12.345Z"
STOPPED_AT_EPOCH = datetime(2020, 1, 23, 17, 59, 12, 345000, tzinfo=UTC).timestamp()

# botocore's ECS model, TaskStopCode, as of botocore 1.44.8. Kept literal on purpose: when AWS
# adds a code, test_stop_codes_are_botocores fails and the new code gets a classification.
STOP_CODES = ["TaskFailedToStart", "EssentialContainerExited", "UserInitiated",
              "ServiceSchedulerInitiated", "SpotInterruption", "TerminationNotice",
              "InfrastructureHealth"]

# stoppedReason per code for the derived STOPPED events: AWS's wording where its docs give one
# (Spot: Fargate capacity providers page; UserInitiated: StopTask API reference example;
# EssentialContainerExited: the stoppedReason DescribeTasks and events report), else descriptive.
REASONS = {
    "TaskFailedToStart": "CannotPullContainerError: pull image manifest has been retried 5 times",
    "EssentialContainerExited": "Essential container in task exited",
    "UserInitiated": "Task stopped by user",
    "ServiceSchedulerInitiated": "Scaling activity initiated by (deployment ecs-svc/123)",
    "SpotInterruption": "Your Spot Task was interrupted.",
    "TerminationNotice": "Your Spot Task was interrupted.",
    "InfrastructureHealth": "Task stopped due to an infrastructure health issue",
}

# docs/design.md "When a task stops": the class of a stop of a task that claimed its bundle while
# a job was recorded RUNNING, its worker exiting 1 (a non-zero exit: application unless the stop
# code says infrastructure). InfrastructureHealth is infrastructure in stops.py (AWS retired the
# host).
EXPECTED_CLASS = {
    "TaskFailedToStart": StopClass.INFRASTRUCTURE,
    "EssentialContainerExited": StopClass.APPLICATION,
    "UserInitiated": StopClass.INFRASTRUCTURE,  # not requested by longjobs: an operator/drain
    "ServiceSchedulerInitiated": StopClass.INFRASTRUCTURE,
    "SpotInterruption": StopClass.INFRASTRUCTURE,
    "TerminationNotice": StopClass.INFRASTRUCTURE,
    "InfrastructureHealth": StopClass.INFRASTRUCTURE,
}


def load(name: str) -> dict[str, Any]:
    """A fixture as EventBridge / the endpoint delivers it (any "_source" key stripped)."""
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    data.pop("_source", None)
    return data


def stopped(stop_code: str, *, exit_code: int | None = 1,
            reason: str | None = None) -> dict[str, Any]:
    """A STOPPED event derived from AWS's Fargate sample (ecs_task_state_change_fargate_running):
    lastStatus/desiredStatus STOPPED, stopCode, stoppedReason, stopping/stopped times, and the
    container STOPPED with ``exitCode``; TaskFailedToStart has no containers, as ECS sends it
    after a long PROVISIONING."""
    event = copy.deepcopy(load("ecs_task_state_change_fargate_running.json"))
    detail = event["detail"]
    detail.update(lastStatus="STOPPED", desiredStatus="STOPPED", stopCode=stop_code,
                  stoppedReason=reason or REASONS[stop_code],
                  stoppingAt="2020-01-23T17:58:58.103Z",
                  executionStoppedAt="2020-01-23T17:59:10Z", stoppedAt=STOPPED_AT,
                  updatedAt=STOPPED_AT, version=6)
    detail["attachments"][0]["status"] = "DELETED"
    if stop_code == StopCode.TASK_FAILED_TO_START:
        detail["containers"] = []
    else:
        container = detail["containers"][0]
        container["lastStatus"] = "STOPPED"
        if exit_code is not None:
            container["exitCode"] = exit_code
    return event


# --- the stop codes --------------------------------------------------------------------------


def test_stop_codes_are_botocores() -> None:
    shape = botocore.session.get_session().get_service_model("ecs").shape_for("TaskStopCode")
    assert list(getattr(shape, "enum", [])) == STOP_CODES
    assert [c.value for c in StopCode] == STOP_CODES
    assert set(StopCode) >= INFRA_STOP_CODES
    assert set(EXPECTED_CLASS) == set(REASONS) == set(STOP_CODES)


@pytest.mark.parametrize("code", STOP_CODES)
def test_stopped_event_for_every_stop_code(code: str) -> None:
    stop = task_events.parse(stopped(code, exit_code=137), WORKER)
    assert isinstance(stop, TaskStop)
    assert stop.task_arn == FARGATE_TASK_ARN
    assert stop.stop_code == code
    assert stop.stopped_reason == REASONS[code]
    assert stop.exit_code == (None if code == StopCode.TASK_FAILED_TO_START else 137)
    assert stop.stopped_at == STOPPED_AT_EPOCH


def test_task_failed_to_start_has_no_containers() -> None:
    event = stopped("TaskFailedToStart")
    assert event["detail"]["containers"] == []
    stop = task_events.parse(event, WORKER)
    assert isinstance(stop, TaskStop)
    assert stop == TaskStop(FARGATE_TASK_ARN, "TaskFailedToStart",
                            REASONS["TaskFailedToStart"], None, STOPPED_AT_EPOCH, stop.bill)


def test_a_stop_carries_its_bill_as_the_sample_event_gives_it() -> None:
    """AWS's sample: 256 CPU units, 512 MiB, no capacity provider (launch type FARGATE: on
    demand), the image pull begun at 17:57:52.103, stopped at 17:59:12.345: 80.242 s, billed
    as 81 (per second, rounded up; over the one-minute minimum)."""
    stop = task_events.parse(stopped("EssentialContainerExited", exit_code=0), WORKER)
    assert isinstance(stop, TaskStop) and stop.bill is not None
    bill = stop.bill
    assert (bill.cpu_units, bill.memory_mib, bill.capacity_provider) == (256, 512, None)
    assert bill.stopped_at == STOPPED_AT_EPOCH
    assert bill.stopped_at - bill.started_at == pytest.approx(80.242)
    assert bill.seconds == 81 and not bill.spot and bill.architecture == costs.X86_64


def test_worker_exit_code_wins_over_a_sidecar() -> None:
    event = stopped("EssentialContainerExited", exit_code=137)
    sidecar = {**event["detail"]["containers"][0], "name": "log_router", "exitCode": 0}
    event["detail"]["containers"].insert(0, sidecar)
    stop = task_events.parse(event, WORKER)
    assert isinstance(stop, TaskStop) and stop.exit_code == 137


# --- events that are not stops ---------------------------------------------------------------


def test_published_running_event_is_ignored() -> None:
    result = task_events.parse(load("ecs_task_state_change_fargate_running.json"), WORKER)
    assert isinstance(result, Ignored) and not result.malformed
    assert result.reason == "lastStatus RUNNING"


@pytest.mark.parametrize("code", ["TerminationNotice", "SpotInterruption"])
def test_spot_warning_arrives_running_and_is_ignored(code: str) -> None:
    # The published sample says TerminationNotice; later revisions of the same page say
    # SpotInterruption. Either way lastStatus is RUNNING: the stop that follows is what counts.
    event = load("ecs_task_state_change_spot_termination_notice.json")
    event["detail"]["stopCode"] = code
    assert event["detail"]["lastStatus"] == "RUNNING"
    result = task_events.parse(event, WORKER)
    assert isinstance(result, Ignored) and not result.malformed
    assert result.reason == "lastStatus RUNNING"


def test_other_detail_type_is_ignored_not_malformed() -> None:
    # Its detail has no taskArn/lastStatus; it used to be reported as malformed (an error).
    result = task_events.parse(load("ecs_container_instance_state_change.json"), WORKER)
    assert isinstance(result, Ignored) and not result.malformed
    assert result.reason == "detail-type 'ECS Container Instance State Change'"


def _no_task_arn() -> dict[str, Any]:
    event = stopped("EssentialContainerExited")
    del event["detail"]["taskArn"]
    return event


def _bad_exit_code() -> dict[str, Any]:
    event = stopped("EssentialContainerExited")
    event["detail"]["containers"][0]["exitCode"] = "one"
    return event


def _no_detail() -> dict[str, Any]:
    event = stopped("EssentialContainerExited")
    del event["detail"]
    return event


@pytest.mark.parametrize("event", [
    _no_task_arn(), _bad_exit_code(), _no_detail(),
    {**load("ecs_task_state_change_fargate_running.json"), "detail": "STOPPED"},
    [], "not an event",
], ids=["no-taskArn", "exitCode-not-int", "no-detail", "detail-not-object", "list", "string"])
def test_malformed_event_is_ignored_as_malformed(event: Any) -> None:
    result = task_events.parse(event, WORKER)
    assert isinstance(result, Ignored) and result.malformed
    assert result.detail


# --- classification against docs/design.md ---------------------------------------------------


@pytest.mark.parametrize("code", STOP_CODES)
def test_classification_of_every_stop_code(code: str) -> None:
    stop = task_events.parse(stopped(code, exit_code=1), WORKER)
    assert isinstance(stop, TaskStop)
    if code == StopCode.TASK_FAILED_TO_START:
        stop = TaskStop(stop.task_arn, stop.stop_code, stop.stopped_reason, 1, stop.stopped_at)
    assert classify(stop, claimed=True, job_was_running=True) == EXPECTED_CLASS[code]
    # never claimed its bundle: no job code ran, whatever the code
    assert classify(stop, claimed=False, job_was_running=False) == StopClass.INFRASTRUCTURE


@pytest.mark.parametrize("code", sorted(c.value for c in INFRA_STOP_CODES))
def test_infrastructure_codes_stay_infrastructure_with_an_oom_exit(code: str) -> None:
    # Spot/host stops end in SIGKILL (137) after stopTimeout: still not the job's fault.
    stop = TaskStop(FARGATE_TASK_ARN, code, REASONS[code], 137, STOPPED_AT_EPOCH)
    assert classify(stop, claimed=True, job_was_running=True) == StopClass.INFRASTRUCTURE


def test_user_initiated_by_longjobs_is_user() -> None:
    reason = f"{USER_STOP_PREFIX} cancelled job j-1"
    stop = task_events.parse(stopped("UserInitiated", exit_code=143, reason=reason), WORKER)
    assert isinstance(stop, TaskStop) and stop.requested_by_longjobs
    assert classify(stop, claimed=True, job_was_running=True) == StopClass.USER


def test_essential_container_unknown_exit_is_infrastructure() -> None:
    stop = task_events.parse(stopped("EssentialContainerExited", exit_code=None), WORKER)
    assert isinstance(stop, TaskStop) and stop.exit_code is None
    assert classify(stop, claimed=True, job_was_running=True) == StopClass.INFRASTRUCTURE


@pytest.mark.parametrize("exit_code", [0, 1, 137])
def test_essential_container_exit_without_a_running_job_is_infrastructure(
        exit_code: int) -> None:
    # docs/design.md: "a clean exit after SIGTERM" is infrastructure; the runner records its job
    # first.
    stop = task_events.parse(stopped("EssentialContainerExited", exit_code=exit_code), WORKER)
    assert isinstance(stop, TaskStop)
    assert classify(stop, claimed=True, job_was_running=False) == StopClass.INFRASTRUCTURE


def test_exit_0_while_a_job_is_running_is_application() -> None:
    # A handler's os._exit(0) leaves its job RUNNING: the job's own code ended the process, so it
    # spends the job's attempt (stops.classify); as infrastructure it would be relaunched forever.
    stop = task_events.parse(stopped("EssentialContainerExited", exit_code=0), WORKER)
    assert isinstance(stop, TaskStop) and stop.exit_code == 0
    assert classify(stop, claimed=True, job_was_running=True) == StopClass.APPLICATION


# --- task metadata endpoint v4 -----------------------------------------------------------------


@pytest.fixture
def metadata_endpoint() -> Iterator[tuple[str, list[str]]]:
    """The published Fargate ``/task`` response, served on 127.0.0.1 under a v4-like base."""
    body = json.dumps(load("task_metadata_v4_fargate_task.json")).encode()
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            ok = self.path == "/v4/febee046097849aba589d4435207c04a-2495160603/task"
            self.send_response(200 if ok else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body) if ok else 0))
            self.end_headers()
            if ok:
                self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return None

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = (f"http://127.0.0.1:{server.server_address[1]}"
            "/v4/febee046097849aba589d4435207c04a-2495160603")
    try:
        yield base, seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


PUBLISHED_TASK_ARN = ("arn:aws:ecs:us-west-2:111122223333:task/default/"
                      "febee046097849aba589d4435207c04a")


def test_task_arn_from_published_metadata_response(
        metadata_endpoint: tuple[str, list[str]]) -> None:
    base, seen = metadata_endpoint
    cfg = settings.load("task", {"ECS_CONTAINER_METADATA_URI_V4": base})
    assert task_arn(cfg) == PUBLISHED_TASK_ARN
    assert seen == ["/v4/febee046097849aba589d4435207c04a-2495160603/task"]


def test_task_arn_from_the_environment(metadata_endpoint: tuple[str, list[str]],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    base, _ = metadata_endpoint
    monkeypatch.delenv("LONGJOBS_TASK_ARN", raising=False)
    monkeypatch.setenv("ECS_CONTAINER_METADATA_URI_V4", base)
    assert task_arn() == PUBLISHED_TASK_ARN


def test_the_runners_own_failure_is_infrastructure_even_with_a_job_running() -> None:
    # The runner exits with RUNNER_FAILED_EXIT when a write of its own failed after retries:
    # the job it was running is not to blame, and gets its attempt back.
    stop = task_events.parse(stopped("EssentialContainerExited", exit_code=RUNNER_FAILED_EXIT),
                            WORKER)
    assert isinstance(stop, TaskStop)
    assert classify(stop, claimed=True, job_was_running=True) == StopClass.INFRASTRUCTURE
