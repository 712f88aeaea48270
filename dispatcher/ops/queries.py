"""The operators' read API over the job table: list, show and stats, as typed objects.

Everything here reads through the ``by_status`` index (hash ``<TYPE>#<STATE>``, range ISO time),
so the cost of a question follows the size of its answer, never the size of the table: a status
query is one partition read newest first, "all statuses" merges the per-status queries lazily,
and counts are COUNT queries. The CLI (``dispatcher.cli_ops``) and ``JobClient`` are thin layers
over this module; each result has ``to_json()`` with a stable shape for scripts.
"""

from __future__ import annotations

import heapq
import itertools
import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, fields
from typing import Any, TypeVar

from pynamodb.exceptions import DoesNotExist

from dispatcher.aws.dynamodb.models import Item, iso
from dispatcher.domain.bundles import ACTIVE_BUNDLE_STATES, BundleState
from dispatcher.domain.errors import JobNotFound, LongjobsError
from dispatcher.domain.jobs import JobState
from dispatcher.ports.queue import Queue

# What `jobs show` prints of a payload, result or checkpoint: enough to recognise it, small
# enough for a terminal (payloads may be 256 KiB).
DISPLAY_BYTES = 2048
HOUR = 3600.0
JOB_STATES: tuple[JobState, ...] = tuple(JobState)
T = TypeVar("T")


def _opt(cast: Callable[[Any], T], value: Any) -> T | None:
    return cast(value) if value is not None else None


def _flat(obj: Any) -> dict[str, Any]:
    """A dataclass as JSON: times (``*_at``, epoch seconds) as ISO-8601 UTC strings."""
    return {f.name: _opt(iso, getattr(obj, f.name)) if f.name.endswith("_at")
            else getattr(obj, f.name) for f in fields(obj)}


class _Flat:
    def to_json(self) -> dict[str, Any]:
        return _flat(self)


def clip(value: Any, limit: int = DISPLAY_BYTES) -> tuple[str | None, bool]:
    """A JSON rendering of ``value`` cut to ``limit`` bytes, and whether it was cut."""
    if value is None:
        return None, False
    text = value if isinstance(value, str) else json.dumps(value, default=str,
                                                           separators=(",", ":"))
    raw = text.encode()
    if len(raw) <= limit:
        return text, False
    return raw[:limit].decode(errors="ignore"), True


@dataclass(frozen=True)
class JobSummary(_Flat):
    """One row of ``jobs list``; a REJECTED record has no kind and is keyed by its job id
    (or, when no id could be read, its SQS message id)."""

    job_id: str
    state: str
    kind: str | None
    created_at: float | None
    updated_at: float | None
    attempts: int
    max_attempts: int | None
    infra_attempts: int
    bundle_id: str | None
    reason: str | None

    @staticmethod
    def from_item(item: Item) -> JobSummary:
        rejected = item.pk.startswith("REJECT#")
        return JobSummary(
            job_id=item.pk.split("#", 1)[1] if rejected or not item.job_id else item.job_id,
            state=item.state or "", kind=None if rejected else item.kind,
            created_at=item.created_at, updated_at=item.updated_at,
            attempts=int(item.attempts or 0),
            max_attempts=None if rejected else int(item.max_attempts or 0),
            infra_attempts=int(item.infra_attempts or 0), bundle_id=item.bundle_id,
            reason=item.reason)


@dataclass(frozen=True)
class Attempt(_Flat):
    """One run of a job on one task, from the job's history (runner start/end entries merged
    with the task-event handler's stop entries)."""

    attempt: int | None
    task_arn: str | None
    task_definition: str | None
    started_at: float | None
    stopped_at: float | None
    stop_code: str | None
    exit_code: int | None
    stop_class: str | None
    outcome: str | None
    reason: str | None

    @staticmethod
    def from_history(h: dict[str, Any]) -> Attempt:
        stopped = h.get("stopped_at") if h.get("stopped_at") is not None else h.get("ended_at")
        return Attempt(_opt(int, h.get("attempt")), h.get("task_arn"), h.get("task_definition"),
                       _opt(float, h.get("started_at")), _opt(float, stopped),
                       h.get("stop_code"), _opt(int, h.get("exit_code")), h.get("stop_class"),
                       h.get("outcome"), h.get("reason"))


@dataclass(frozen=True)
class JobDetail:
    """Everything ``jobs show`` prints. Payload, result and checkpoint are clipped for display;
    ``body`` is set only for REJECTED records (the first 4 KiB of the message, as kept)."""

    summary: JobSummary
    payload: str | None
    payload_truncated: bool
    result: str | None
    error: dict[str, Any] | None
    checkpoint: str | None
    checkpoint_at: float | None
    history: list[Attempt]  # every attempt, oldest first
    bundle: dict[str, Any] | None
    message_id: str | None
    body: str | None

    def to_json(self) -> dict[str, Any]:
        rest = {k: v for k, v in _flat(self).items() if k != "summary"}
        return {**self.summary.to_json(), **rest,
                "history": [a.to_json() for a in self.history]}


@dataclass(frozen=True)
class BacklogStats:
    visible: int
    in_flight: int
    delayed: int
    oldest_age_seconds: float | None = None  # None: unknown (SQS has it only in CloudWatch)
    dead_letters: int | None = None  # visible messages in the DLQ, when one is configured


@dataclass(frozen=True)
class Stats:
    at: float
    backlog: BacklogStats | None
    jobs: dict[str, int]
    running_by_revision: dict[str, dict[str, int]]
    launch_failures_last_hour: dict[str, int]
    reruns_last_hour: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        b = self.backlog
        return {
            "at": iso(self.at),
            "backlog": None if b is None else asdict(b),
            "jobs": dict(self.jobs),
            "running_by_revision": {k: dict(v) for k, v in self.running_by_revision.items()},
            "launch_failures_last_hour": {
                "bundles": sum(self.launch_failures_last_hour.values()),
                "by_reason": dict(self.launch_failures_last_hour)},
            "reruns_last_hour": {"jobs": sum(self.reruns_last_hour.values()),
                                 "by_stop_class": dict(self.reruns_last_hour)},
        }


def parse_status(status: str) -> JobState:
    try:
        return JobState(status.strip().upper())
    except ValueError:
        raise LongjobsError(f"unknown status {status!r}; one of "
                            + ", ".join(JOB_STATES)) from None


@dataclass
class Registry:
    """Reads over the table the model is bound to (a ``DynamoStore`` binds it) and, for stats,
    the job queue and dead-letter queue."""

    queue: Queue | None = None
    dead_letters: Queue | None = None
    clock: Any = field(default=time.time)

    # -- list -----------------------------------------------------------------------------------
    def list_jobs(self, *, status: str | None = None, kind: str | None = None,
                  since_seconds: float | None = None, limit: int = 50) -> list[JobSummary]:
        """Newest first (by creation time, the index's range key), at most ``limit``."""
        states = [parse_status(status)] if status else list(JOB_STATES)
        since = iso(self.clock() - since_seconds) if since_seconds is not None else None
        # Each per-status query is already newest first and pages lazily, so merging them
        # reads about `limit` items in total, whatever the table holds.
        streams = [self._newest(state, since, kind, limit) for state in states]
        merged = heapq.merge(*streams, key=lambda i: i.status_at or "", reverse=True)
        return [JobSummary.from_item(i) for i in itertools.islice(merged, limit)]

    @staticmethod
    def _newest(state: JobState, since: str | None, kind: str | None,
                limit: int) -> Iterator[Item]:
        return iter(Item.by_status.query(
            f"JOB#{state}", Item.status_at >= since if since else None,
            filter_condition=Item.kind == kind if kind else None,
            scan_index_forward=False, page_size=min(max(limit, 10), 100)))

    # -- show -----------------------------------------------------------------------------------
    def show(self, job_id: str) -> JobDetail:
        item = _get(f"JOB#{job_id}") or _get(f"REJECT#{job_id}")
        if item is None:
            raise JobNotFound("no such job", job_id=job_id)
        summary = JobSummary.from_item(item)
        if summary.state == JobState.REJECTED:
            return JobDetail(summary, None, False, None, None, None, None, [], None,
                             item.message_id, item.body)
        payload, cut = clip(item.payload or {})
        attempts = [Attempt.from_history(h) for h in item.history or [] if isinstance(h, dict)]
        checkpoint, _ = clip(item.checkpoint)
        return JobDetail(summary, payload, cut, clip(item.result)[0], item.error, checkpoint,
                         _checkpoint_at(item, attempts), attempts, _bundle(item.bundle_id),
                         item.message_id, None)

    # -- stats ----------------------------------------------------------------------------------
    def stats(self) -> Stats:
        t = self.clock()
        cutoff = t - HOUR  # "recent" for launch failures and reruns
        return Stats(at=t, backlog=self._backlog(),
                     jobs={str(s): Item.by_status.count(f"JOB#{s}") for s in JOB_STATES},
                     running_by_revision=_running_by_revision(),
                     launch_failures_last_hour=_launch_failures(cutoff),
                     reruns_last_hour=_reruns(cutoff))

    def _backlog(self) -> BacklogStats | None:
        if self.queue is None:
            return None
        b = self.queue.backlog()
        dead = self.dead_letters.backlog().visible if self.dead_letters else None
        return BacklogStats(b.visible, b.in_flight, b.delayed, None, dead)


def _get(pk: str) -> Item | None:
    try:
        return Item.get(pk, consistent_read=True)
    except DoesNotExist:
        return None


def _bundle(bundle_id: str | None) -> dict[str, Any] | None:
    item = _get(f"BUNDLE#{bundle_id}") if bundle_id else None
    if item is None:
        return None
    return {"bundle_id": bundle_id, "state": item.state, "attempt": int(item.attempt or 0),
            "task_arn": item.task_arn, "task_definition": item.task_definition,
            "heartbeat_at": _opt(iso, item.heartbeat_at), "launch_failures":
            int(item.launch_failures or 0), "last_failure": item.last_failure}


def _checkpoint_at(item: Item, attempts: list[Attempt]) -> float | None:
    """The table keeps no checkpoint time. While a job runs, its item is written only by its
    start and its checkpoints, so a write after the current attempt started is a checkpoint."""
    if item.checkpoint is None or item.state != JobState.RUNNING or not attempts:
        return None
    started = attempts[-1].started_at
    if started is not None and item.updated_at is not None and item.updated_at > started:
        return float(item.updated_at)
    return None


def _running_by_revision() -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for state in ACTIVE_BUNDLE_STATES:
        for item in Item.by_status.query(f"BUNDLE#{state}"):
            rev = out.setdefault(item.task_definition or "unknown", {})
            rev[str(state)] = rev.get(str(state), 0) + 1
    return dict(sorted(out.items()))


def _launch_failures(cutoff: float) -> dict[str, int]:
    """Bundles waiting for a relaunch after RunTask refused them within the window, by reason
    (first word, as in the tick's decision record)."""
    reasons: Counter[str] = Counter()
    for item in Item.by_status.query(f"BUNDLE#{BundleState.PENDING}", filter_condition=(
            Item.updated_at >= cutoff) & (Item.launch_failures > 0) & Item.last_failure.exists()):
        reasons[(item.last_failure or "unknown").split(" ", 1)[0]] += 1
    return dict(reasons)


def _reruns(cutoff: float) -> dict[str, int]:
    """Jobs rerun in the window, by stop class. A rerun relaunches the job's bundle (attempt > 1)
    and moves its index time, so only bundles touched in the window are read, then their jobs."""
    job_ids: list[str] = []
    for state in BundleState:
        rows = Item.by_status.query(f"BUNDLE#{state}", Item.status_at >= iso(cutoff),
                                    filter_condition=Item.attempt > 1)
        job_ids.extend(j for item in rows for j in item.job_ids or [])
    classes: Counter[str] = Counter()
    keys = list(dict.fromkeys(f"JOB#{j}" for j in job_ids))
    for start in range(0, len(keys), 100):
        for job in Item.batch_get(keys[start:start + 100]):
            recent = [h.get("stop_class") for h in job.history or []
                      if isinstance(h, dict) and h.get("stop_class")
                      and float(h.get("stopped_at") or 0) >= cutoff]
            if recent:
                classes[str(recent[-1])] += 1
            elif int(job.infra_attempts or 0) > 0 and float(job.updated_at or 0) >= cutoff:
                classes["infrastructure"] += 1  # stopped before it started: no history entry
    return dict(classes)


@dataclass(frozen=True)
class DeadLetter(_Flat):
    message_id: str
    sent_at: float | None
    receive_count: int
    job_id: str | None
    kind: str | None
    body: str
    body_truncated: bool


class DeadLetters:
    """The job queue's dead-letter queue: messages SQS moved there after ``maxReceiveCount``
    receives (a dispatcher that kept crashing on them, or kept failing to record them)."""

    def __init__(self, sqs: Any, dlq_url: str, queue_url: str) -> None:
        if not dlq_url:
            raise LongjobsError("LONGJOBS_DLQ_URL is not set; the dlq commands need the "
                                "dead-letter queue's URL")
        self._sqs, self.url, self.queue_url = sqs, dlq_url, queue_url

    def _receive(self, n: int, visibility: int) -> list[dict[str, Any]]:
        return list(self._sqs.receive_message(
            QueueUrl=self.url, MaxNumberOfMessages=max(1, min(n, 10)), WaitTimeSeconds=0,
            VisibilityTimeout=visibility, MessageAttributeNames=["All"],
            MessageSystemAttributeNames=["SentTimestamp", "ApproximateReceiveCount"],
        ).get("Messages", []))

    def peek(self, limit: int = 10) -> list[DeadLetter]:
        """Look without taking: receive with VisibilityTimeout=0, so the messages stay visible.

        Receiving still increments each message's ApproximateReceiveCount (SQS has no
        read-only peek); the DLQ has no redrive policy of its own, so this moves nothing.
        """
        seen: dict[str, DeadLetter] = {}
        for _ in range(max(1, limit) * 2):  # visibility 0: later receives may repeat messages
            fresh = [m for m in self._receive(limit - len(seen), 0) if m["MessageId"] not in seen]
            seen.update((m["MessageId"], _dead_letter(m)) for m in fresh)
            if not fresh or len(seen) >= limit:
                break
        return list(seen.values())[:limit]

    def redrive(self, limit: int = 100) -> tuple[int, dict[str, str]]:
        """Move up to ``limit`` messages back to the job queue: send, then delete, 10 at a time.

        A crash between the two leaves a copy in both queues; the dispatcher's de-duplication on
        ``job_id`` makes that one job. Returns (moved, {message_id: reason} of those not moved);
        messages that could not be sent reappear in the DLQ after 30 s.
        """
        moved, failed = 0, dict[str, str]()
        while moved + len(failed) < limit:
            batch = [m for m in self._receive(limit - moved - len(failed), 30)
                     if m["MessageId"] not in failed]
            if not batch:
                break
            resp = self._sqs.send_message_batch(QueueUrl=self.queue_url, Entries=[
                {"Id": str(n), "MessageBody": m.get("Body", ""),
                 **({"MessageAttributes": m["MessageAttributes"]} if m.get("MessageAttributes")
                    else {})} for n, m in enumerate(batch)])
            for f in resp.get("Failed", []):
                failed[batch[int(f["Id"])]["MessageId"]] = f"{f.get('Code')}: {f.get('Message')}"
            sent = [batch[int(ok["Id"])] for ok in resp.get("Successful", [])]
            if not sent:
                continue
            resp = self._sqs.delete_message_batch(QueueUrl=self.url, Entries=[
                {"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]} for n, m in enumerate(sent)])
            moved += len(sent)
            for f in resp.get("Failed", []):  # sent, still here: a later redrive duplicates it
                failed[sent[int(f["Id"])]["MessageId"]] = f"not deleted: {f.get('Code')}"
        return moved, failed


def _dead_letter(m: dict[str, Any]) -> DeadLetter:
    try:
        data = json.loads(m.get("Body", ""))
    except ValueError:
        data = None
    fields_ = data if isinstance(data, dict) else {}
    job_id, kind = (v if isinstance(v, str) else None
                    for v in (fields_.get("job_id"), fields_.get("kind")))
    text, cut = clip(m.get("Body", ""))
    sent = m.get("Attributes", {}).get("SentTimestamp")
    return DeadLetter(m["MessageId"], int(sent) / 1000 if sent else None,
                      int(m.get("Attributes", {}).get("ApproximateReceiveCount", 0)), job_id,
                      kind, text or "", cut)
