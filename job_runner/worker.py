"""The job runner: find my bundle, claim it, run its jobs, heartbeat, record results.

Every write carries the claim's fence; a runner that loses it stops writing and exits 0.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
import urllib.request
from types import FrameType
from typing import Any

from aws_lambda_powertools import Logger

from dispatcher import settings
from dispatcher.aws.dynamodb import open_store
from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.errors import ConflictError, LongjobsError
from dispatcher.domain.jobs import TERMINAL_JOB_STATES, Job, JobState
from dispatcher.ports.store import Fence, RunnerStore
from dispatcher.settings import Config
from job_runner.context import JobContext
from job_runner.kinds import Registry
from job_runner.outcome import Outcome, error_of, raised, succeeded
from job_runner.writes import Writes

# JSON lines with task_arn / bundle_id / job_id on every line (payloads are never logged).
# Its level is LONGJOBS_LOG_LEVEL, set in main() once the settings are loaded.
log = Logger(service="longjobs-runner", logger_handler=logging.StreamHandler(sys.stderr))
# Fargate sends SIGKILL 120 s after SIGTERM at most (stopTimeout); finish well inside it.
STOP_GRACE_SECONDS = 90.0
TIMEOUT_GRACE_SECONDS = 5.0


def task_arn(cfg: Config | None = None) -> str:
    """ECS task metadata endpoint v4 (``$ECS_CONTAINER_METADATA_URI_V4/task``, ``TaskARN``);
    local mode sets LONGJOBS_TASK_ARN instead. Both are read through :mod:`dispatcher.settings`.
    https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-metadata-endpoint-v4.html
    """
    cfg = settings.load("task") if cfg is None else cfg
    if cfg.task_arn:
        return cfg.task_arn
    base = cfg.ecs_metadata_uri
    if not base:
        raise LongjobsError("cannot find this task's ARN: neither ECS_CONTAINER_METADATA_URI_V4 "
                            "nor LONGJOBS_TASK_ARN is set")
    with urllib.request.urlopen(f"{base}/task", timeout=5) as resp:  # noqa: S310
        return str(json.loads(resp.read())["TaskARN"])


class Worker:
    def __init__(self, cfg: Config, store: RunnerStore, registry: Registry, arn: str) -> None:
        self.cfg = cfg
        self.store = store
        self.registry = registry
        self.arn = arn
        self.stopping = threading.Event()
        self.lost = threading.Event()
        self.cancel_requested: set[str] = set()
        self.ctx: JobContext | None = None

    def find_bundle(self) -> Bundle | None:
        deadline = time.monotonic() + self.cfg.assign_wait_seconds
        delay = 0.2
        while time.monotonic() < deadline and not self.stopping.is_set():
            bundle = self.store.bundle_for_task(self.arn)
            if bundle is not None:
                return bundle
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
        return None

    def on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        log.warning("SIGTERM: finishing the current job cooperatively, taking no new ones")
        self.stopping.set()
        if self.ctx is not None:
            self.ctx.cancel("task stopping (SIGTERM)")

    def run(self) -> int:
        log.append_keys(task_arn=self.arn)
        bundle = self.find_bundle()
        if bundle is None:
            log.warning("no bundle assigned to %s; exiting without running anything", self.arn)
            return 0
        if bundle.task_arn != self.arn or bundle.state != BundleState.LAUNCHED:
            log.warning("bundle %s belongs to another attempt; exiting", bundle.bundle_id)
            return 0
        log.append_keys(bundle_id=bundle.bundle_id, attempt=bundle.attempt)
        fence = Fence(bundle.bundle_id, bundle.attempt, self.arn)
        try:
            self.store.claim(fence)
        except ConflictError as exc:
            log.warning("%s; exiting without running anything", exc.reason)
            return 0
        writes = Writes(self.store, fence, bundle.task_definition or "", self.cfg.flush_seconds)
        beat = threading.Thread(target=self._heartbeat, args=(fence,), daemon=True)
        beat.start()
        try:
            jobs = self.store.get_jobs(bundle.job_ids)
            for job in jobs:
                if self.stopping.is_set() or self.lost.is_set():
                    break
                if job.state != JobState.PENDING or job.bundle_id != bundle.bundle_id:
                    continue  # finished, or retried into another bundle
                if job.job_id in self.cancel_requested:
                    writes.finish(job, Outcome(JobState.CANCELLED, reason="cancelled on request"),
                                  started=False)
                    continue
                self._run_job(job, writes)
            if self.lost.is_set():
                return 0
            left = [j for j in jobs if j.state not in TERMINAL_JOB_STATES
                    and j.bundle_id == bundle.bundle_id]
            retry = writes.retrying or bool(left)
            if self.stopping.is_set():
                writes.flush()  # the stop event reruns what is left
            else:
                writes.flush(BundleState.PENDING if retry else BundleState.DONE)
        except ConflictError as exc:
            log.warning("lost the claim: %s; exiting without further writes", exc.reason)
        finally:
            self.stopping.set()
        return 0

    def _run_job(self, job: Job, writes: Writes) -> None:
        attempt = job.attempts + 1
        log.append_keys(job_id=job.job_id, kind=job.kind)
        ctx = JobContext(job.job_id, attempt, job.checkpoint,
                         lambda s: self._checkpoint(writes, job, s), log)
        self.ctx = ctx
        writes.start(job, long=not (job.estimated_seconds is not None
                                    and job.estimated_seconds <= 60))
        try:
            handler = self.registry.get(job.kind)
        except LongjobsError as exc:
            outcome = Outcome(JobState.FAILED, reason=exc.reason,
                              error={"type": "HandlerImportError", "message": exc.reason})
        else:
            if handler is None:
                known = ", ".join(self.registry.kinds()) or "none"
                outcome = Outcome(JobState.FAILED, reason=f"unknown kind {job.kind!r}: no "
                                  f"handler registered (known: {known})",
                                  error={"type": "UnknownKind", "message": job.kind})
            else:
                outcome = self._execute(job, handler, ctx, attempt)
        self.ctx = None
        job.state = outcome.target
        writes.finish(job, outcome, started=True)
        log.info("job finished", extra={"state": str(outcome.target), "reason": outcome.reason})
        log.remove_keys(["job_id", "kind"])

    def _execute(self, job: Job, handler: Any, ctx: JobContext, attempt: int) -> Outcome:
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["value"] = handler(dict(job.payload), ctx)
            except BaseException as exc:  # the job's failure, recorded, never the runner's
                box["error"] = exc

        thread = threading.Thread(target=target, daemon=True, name=f"job-{job.job_id}")
        thread.start()
        deadline = time.monotonic() + job.timeout_seconds if job.timeout_seconds else None
        grace_until: float | None = None
        while thread.is_alive():
            thread.join(0.1)
            if job.job_id in self.cancel_requested:
                ctx.cancel("cancelled")
            if self.lost.is_set():
                ctx.cancel("claim lost")
            if deadline and time.monotonic() > deadline:
                ctx.cancel("timeout")
            if ctx.cancelled() and grace_until is None:
                grace = STOP_GRACE_SECONDS if self.stopping.is_set() else TIMEOUT_GRACE_SECONDS
                grace_until = time.monotonic() + grace
            if grace_until and time.monotonic() > grace_until and thread.is_alive():
                # The handler ignores cancellation: record it, then end the process (a thread
                # cannot be killed); the stop event reruns the rest of the bundle.
                return raised(job, TimeoutError(ctx.cancel_reason or "did not stop"),
                              attempts=attempt, retry_any=False,
                              cancel_reason=ctx.cancel_reason or "interrupted")
        if "error" in box:
            exc = box["error"]
            return raised(job, exc, attempts=attempt, retry_any=self.cfg.retry_any_exception,
                          cancel_reason=ctx.cancel_reason if ctx.cancelled() else None)
        return succeeded(job, box.get("value"))

    def _checkpoint(self, writes: Writes, job: Job, state: dict[str, Any]) -> None:
        writes.flush()
        self.store.save_checkpoint(writes.fence, job.job_id, state)

    def _heartbeat(self, fence: Fence) -> None:
        while not self.stopping.wait(self.cfg.heartbeat_seconds):
            try:
                self.cancel_requested |= self.store.heartbeat(fence)
            except ConflictError:
                log.warning("heartbeat found the claim lost; stopping")
                self.lost.set()
                return
            except Exception as exc:  # a missed beat is retried at the next interval
                log.warning("heartbeat failed: %r", exc)


def main() -> int:
    try:
        cfg = settings.load("runner")
        log.setLevel(cfg.log_level)
        arn = task_arn(cfg)
        store = open_store(cfg.table, cfg.region, cfg.endpoint_url)
        registry = Registry.load(cfg.handlers)
    except LongjobsError as exc:
        print(f"job_runner: {exc}", file=sys.stderr)
        return 2
    worker = Worker(cfg, store, registry, arn)
    signal.signal(signal.SIGTERM, worker.on_sigterm)
    try:
        code = worker.run()
    except Exception as exc:
        print(f"job_runner: {error_of(exc)['traceback']}", file=sys.stderr)
        return 1
    sys.stdout.flush()
    os._exit(code)  # do not wait for a handler thread that ignored its cancellation
