"""A local longjobs: embedded AWS endpoint, provisioned resources, the tick on a schedule, tasks
as local processes, and each task exit fed to the production task-event handler as a real
"ECS Task State Change" event."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from dispatcher import settings
from dispatcher.domain import task_events
from dispatcher.domain.task_events import Ignored
from dispatcher.handlers import on_task_event
from dispatcher.local.event_feed import StreamFeed
from dispatcher.local.local_launcher import LocalLauncher, TaskExit
from dispatcher.local.output import QuietTicks
from dispatcher.local.provision import provision
from dispatcher.local.schedule_loop import ScheduleLoop
from dispatcher.ports.event_sink import EventSink
from dispatcher.settings import Config
from dispatcher.stages.rerun import StopOutcome
from dispatcher.stages.tick import TickReport
from dispatcher.wiring import adapters, pipeline

log = logging.getLogger("longjobs.local")
KEEP = 1000
# How often local mode fires the schedules that came due (Scheduler fires within the minute).
SCHEDULE_STEP_SECONDS = 1.0
DUMMY_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local",
                     "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1"}


@dataclass
class LocalEnv:
    settings: dict[str, str] = field(default_factory=dict)  # LONGJOBS_* overrides
    tick_seconds: float = 5.0
    endpoint: str | None = None
    # SQS alone on another endpoint (AWS_ENDPOINT_URL_SQS for every client and task): a given
    # URL, or with `ministack` a MiniStack process started and stopped with this environment
    # (`make ministack`), for queues too deep for moto. Default: SQS on `endpoint` too.
    sqs_endpoint: str | None = None
    # The table's stream is read from here (default: ``endpoint``). Its reads are Lambda's
    # event source mappings' on AWS, no call of ours: a proxy in front of moto that counts the
    # dispatcher's calls is bypassed with moto's own URL here.
    stream_endpoint: str | None = None
    ministack: bool = False
    # Extra environment for the task processes only (e.g. their own endpoint, so that a
    # benchmark's proxy can count the runners' calls apart from the dispatcher's).
    task_env: dict[str, str] = field(default_factory=dict)
    output: int | None = None
    # Set: every task appends its output to this file (instead of ``output``), which is
    # exported as LONGJOBS_LOCAL_LOG for `longjobs jobs logs`.
    log_path: str | None = None
    # False: a tick's decision record is logged only if the tick changed something.
    verbose: bool = True
    env: dict[str, str] = field(default_factory=dict)
    # The latest task stops and tick decisions (bounded: `longjobs local` runs for days).
    events: deque[StopOutcome | Ignored] = field(default_factory=lambda: deque(maxlen=KEEP))
    decisions: deque[TickReport] = field(default_factory=lambda: deque(maxlen=KEEP))
    # Set: the job state-change events, read from the table's stream, are published here
    # (`longjobs local --events` prints them; dispatcher.local.event_feed).
    job_events: EventSink | None = None

    def start(self) -> LocalEnv:
        for k, v in DUMMY_CREDENTIALS.items():
            os.environ.setdefault(k, v)
        self._moto: Any = None
        self._ministack: Any = None
        self.endpoint = self.endpoint or os.environ.get("AWS_ENDPOINT_URL")
        self.sqs_endpoint = self.sqs_endpoint or os.environ.get("AWS_ENDPOINT_URL_SQS")
        if self.ministack and not self.sqs_endpoint:
            from dispatcher.local.ministack import start_ministack

            self._ministack = start_ministack("sqs")
            self.sqs_endpoint = self._ministack.url
        if not self.endpoint:
            from dispatcher.testing.moto import start_moto

            logging.getLogger("werkzeug").setLevel(logging.CRITICAL)
            self._moto = start_moto()
            self._moto.pin_ecs_tasks()
            self.endpoint = self._moto.url
        os.environ["AWS_ENDPOINT_URL"] = self.endpoint
        sqs = {"AWS_ENDPOINT_URL_SQS": self.sqs_endpoint} if self.sqs_endpoint else {}
        self._sqs_before = os.environ.get("AWS_ENDPOINT_URL_SQS")
        self.env = {**{k: os.environ[k] for k in DUMMY_CREDENTIALS}, "AWS_ENDPOINT_URL":
                    self.endpoint, **sqs,
                    **provision(self.endpoint, sqs_endpoint=self.sqs_endpoint),
                    "LONGJOBS_LAUNCHER": "local", **self.settings}
        if self.log_path:
            self.env["LONGJOBS_LOCAL_LOG"] = self.log_path
            self.output = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._quiet = None if self.verbose else QuietTicks()
        if self._quiet is not None:
            logging.getLogger("dispatcher.stages.tick").addFilter(self._quiet)
        os.environ.update(self.env)
        self.cfg: Config = settings.load("dispatcher", dict(os.environ))
        self._lock = threading.Lock()
        self.launcher = LocalLauncher(self.cfg, env={**os.environ, **self.task_env},
                                      on_exit=self._on_exit,
                                      ecs=adapters.client("ecs", self.cfg),
                                      output=self.output)
        self.stages = pipeline.for_aws(self.cfg, self.launcher)
        # The stream's readers: the dependents' release, and the events if asked for.
        self._feed: StreamFeed | None = StreamFeed(
            self.cfg, self.job_events, self.stages.dependents,
            endpoint=self.stream_endpoint).start()
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick_loop, daemon=True, name="ticker")
        self._ticker.start()
        # EventBridge Scheduler's part: the emulator keeps schedules but fires none.
        self.schedules = ScheduleLoop(adapters.schedule_book(self.cfg), adapters.queues(self.cfg),
                                      time.time)
        self._firing = threading.Thread(target=self._fire_loop, daemon=True, name="schedules")
        self._firing.start()
        return self

    def exports(self) -> list[str]:
        keys = ["AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_SQS", *DUMMY_CREDENTIALS,
                "LONGJOBS_QUEUE_URL", "LONGJOBS_HIGH_QUEUE_URL", "LONGJOBS_LOW_QUEUE_URL",
                "LONGJOBS_DLQ_URL", "LONGJOBS_SCHEDULE_GROUP", "LONGJOBS_SCHEDULER_ROLE_ARN",
                "LONGJOBS_SCHEDULE_DLQ_ARN",
                "LONGJOBS_TABLE", "LONGJOBS_CLUSTER", "LONGJOBS_TASK_FAMILY",
                "LONGJOBS_LOCAL_LOG"]
        return [f"export {k}={self.env[k]}" for k in keys if k in self.env]

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No tick runs inside the block (e.g. so that one tick sees a whole burst)."""
        with self._lock:
            yield

    def tick(self) -> TickReport:
        with self._lock:
            d = self.stages.tick.tick()
        self.decisions.append(d)
        return d

    def _tick_loop(self) -> None:
        while not self._stop.wait(self.tick_seconds):
            if self._moto is not None:
                from dispatcher.testing.moto import release_model_copies, release_stream_iterators

                release_model_copies()
                release_stream_iterators()
            try:
                self.tick()
            except Exception as exc:  # a failed tick is retried on the next one, as in AWS
                log.warning("tick failed: %r", exc)

    def _fire_loop(self) -> None:
        while not self._stop.wait(SCHEDULE_STEP_SECONDS):
            try:
                self.schedules.step()
            except Exception as exc:  # the endpoint failed for a moment: the next step
                log.warning("firing schedules failed: %r", exc)

    def _on_exit(self, exit: TaskExit) -> None:
        if self._stop.is_set():
            return
        event = task_events.sample_event(exit.task_arn, stop_code=exit.stop_code,
                                    reason=exit.stopped_reason, exit_code=exit.exit_code,
                                    container=self.cfg.container,
                                    task_definition=exit.task_definition, bill=exit.bill)
        try:
            with self._lock:
                outcome = on_task_event(event, self.cfg.container, self.stages.reruns)
        except Exception as exc:  # like a failed Lambda: the tick's reconciliation catches up
            log.warning("task event for %s failed: %r", exit.task_arn, exc)
            return
        self.events.append(outcome)

    def stop(self) -> None:
        self._stop.set()
        self._ticker.join(timeout=60)
        self._firing.join(timeout=60)
        self.launcher.shutdown()
        if self._feed is not None:
            self._feed.stop()
        if self._moto is not None:
            self._moto.stop()
        if self._ministack is not None:
            self._ministack.stop()
        if self._quiet is not None:
            logging.getLogger("dispatcher.stages.tick").removeFilter(self._quiet)
        if self.log_path and self.output is not None:
            os.close(self.output)
            self.output = None
        # Leave no SQS endpoint of ours behind for a later environment in this process.
        if self._sqs_before is None:
            os.environ.pop("AWS_ENDPOINT_URL_SQS", None)
        else:
            os.environ["AWS_ENDPOINT_URL_SQS"] = self._sqs_before

    def __enter__(self) -> LocalEnv:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
