"""Which bundle a task runs: the one it was launched for (:func:`assigned`), then, each time a
bundle of a large drain's batch ends DONE, the batch's next follow-on, taken onto the task in
the same transaction that ends the last (:class:`FollowOnTaker`, over
dispatcher/store/follow_ons.py); the task exits when none is left.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from aws_lambda_powertools import Logger

from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.costs import Usage
from dispatcher.domain.errors import ConflictError, HandedJobs
from dispatcher.store import Fence, RunnerStore
from job_runner.writes import Writes

# How long a runner whose bundle ended looks for its batch's next follow-on while none is
# recorded yet (the drain records them as it admits; at the batch's end none comes), and how
# often.
FOLLOW_ON_WAIT_SECONDS = 10.0
FOLLOW_ON_POLL_SECONDS = 2.0
# How often a runner with none to take looks again while a stream's ticks feed the running
# tasks (Take.fed_until): a take's look is three calls, and the next tick's come at once.
STREAM_POLL_SECONDS = 5.0


def assigned(store: RunnerStore, arn: str, wait_seconds: float,
             stopping: threading.Event) -> Bundle | None:
    """The bundle this task was launched for, once its launch is written whole: LAUNCHED with
    this task's ARN. One still LAUNCHING is looked at again until the wait ends: on DynamoDB the
    launch's one transaction makes the pointer and the bundle visible together, but moto
    applies a transaction's items one by one, and a runner that read between them saw its
    pointer with the bundle not yet LAUNCHED, still carrying the ARN of the task before (a
    relaunch), and gave up: its jobs paid a rerun for it. So a LAUNCHING one is waited for,
    whatever ARN it shows: under moto, this launch under way; on DynamoDB (both written at
    once, read strongly consistent) a later relaunch of a bundle this task lost, which costs
    only the wait before the runner exits, its claim fenced on this task's ARN. Another
    attempt's, launched or running, is returned at once (the runner exits)."""
    deadline = time.monotonic() + wait_seconds
    delay = 0.2
    seen: Bundle | None = None
    while time.monotonic() < deadline and not stopping.is_set():
        bundle = store.bundle_for_task(arn)
        if bundle is not None and bundle.state != BundleState.LAUNCHING:
            return bundle
        seen = bundle or seen
        time.sleep(delay)
        delay = min(delay * 2, 5.0)
    return seen


class FollowOnTaker:
    """Takes the next follow-on of a batch onto this task as a bundle of it ends DONE.
    ``handed``: how many jobs have been handed to the running bundle so far (the heartbeat
    learns more while a take waits)."""

    def __init__(self, store: RunnerStore, arn: str, stopping: threading.Event, *,
                 handed: Callable[[], int], log: Logger, stream_wait: float = 0.0) -> None:
        self.store = store
        self.stream_wait = stream_wait
        self.arn = arn
        self.stopping = stopping
        self._handed = handed
        self._log = log
        # The job-seconds of the bundles this task ended with a take (dispatcher.domain.costs):
        # what the next bundle's counts start from, as the task's pointer holds them.
        self.ran = Usage()

    def take(self, done: Bundle, fence: Fence, writes: Writes, seen: int) -> Bundle | None:
        """End ``done`` (itself RUNNING; its last results are written just before the take)
        DONE and take its batch's next follow-on onto this task, in one transaction (see
        dispatcher.store.follow_ons), or None: the caller then ends ``done`` alone (its last
        results with it) and the task exits. One not recorded yet
        is looked for again for up to FOLLOW_ON_WAIT_SECONDS, ``done`` still RUNNING: the
        task holds its slot; so is one the next tick of a stream may cut (``fed_at``), every
        STREAM_POLL_SECONDS for up to ``stream_wait`` after the first look and after that
        tick. ``seen``: the jobs handed to ``done`` that its runner ran, all it knows of when
        the take begins; the take, and the end after it, refuse to end ``done`` over more.
        HandedJobs and ConflictError are raised as a last write's; HandedJobs too when the
        heartbeat learnt of a job handed while the take waited (the runner runs it first)."""
        if writes.refused:
            # A job the table refused may name this task as running it still: the task's
            # stop, which settles only its last bundle, must be this one's.
            return None
        deadline = time.monotonic() + FOLLOW_ON_WAIT_SECONDS
        streaming = time.monotonic() + self.stream_wait
        while not self.stopping.is_set():
            outcomes = writes.outcomes()
            try:
                take = self.store.end_and_take(fence, done, outcomes,
                                               handed=seen, before=writes.flush_for_take)
            except (HandedJobs, ConflictError):
                raise
            except Exception as exc:  # it may have committed all the same (its answer lost)
                taken = taken_anyway(self.store, self.arn, done, exc, self._log)
                if taken is not None:
                    self.ran = outcomes.usage
                return taken
            if take.bundle is not None:
                self.ran = outcomes.usage
                self._log.info("took follow-on %s of batch %s", take.bundle.bundle_id,
                               take.bundle.batch)
                return take.bundle
            if take.later and time.monotonic() < deadline:
                self.stopping.wait(FOLLOW_ON_POLL_SECONDS)
            elif take.fed_at is not None and time.monotonic() < streaming \
                    and self.store.clock() < take.fed_at + self.stream_wait \
                    and writes.flush_for_take():  # its results written, not held meanwhile
                self.stopping.wait(STREAM_POLL_SECONDS)  # the next tick's, of a stream
            else:
                return None
            if self._handed() > seen:  # an urgent job handed while it waited: run it
                raise HandedJobs(f"bundle {done.bundle_id} was handed a job while its "
                                 "runner waited for a follow-on", [])
        return None


def taken_anyway(store: RunnerStore, arn: str, done: Bundle, exc: Exception,
                 log: Logger | logging.Logger) -> Bundle | None:
    """After a take that raised: the follow-on it took if it committed all the same (the
    task's pointer names a bundle LAUNCHED on task ``arn`` other than ``done``, which is
    then DONE), for the task to run as taken; else None, ``done`` still RUNNING, ended
    alone by the caller. Ending it alone after a take that committed would find it DONE
    (ConflictError: the runner exits) and leave the follow-on to the task's stop, which
    reruns it as a task that never claimed it and charges its jobs an attempt."""
    try:
        taken = store.bundle_for_task(arn)
    except Exception as read:  # as the take: ended alone, the fence decides
        log.warning("taking a follow-on failed, and reading this task's bundle after it",
                    extra={"error": f"{type(exc).__name__}: {exc}",
                           "read_error": f"{type(read).__name__}: {read}"})
        return None
    if taken is not None and taken.bundle_id != done.bundle_id \
            and taken.task_arn == arn and taken.state == BundleState.LAUNCHED:
        log.warning("taking a follow-on failed after it was written; running it",
                    extra={"error": f"{type(exc).__name__}: {exc}",
                           "follow_on": taken.bundle_id})
        return taken
    log.warning("taking a follow-on failed; ending the bundle",
                extra={"error": f"{type(exc).__name__}: {exc}"})
    return None
