"""Job state-change events: what one write to a job's item tells the world.

Every write that changes a job's state advances the job's ``sequence`` by one in that same
write (its creation writes 1; a runner's start and end written together advance it by 2), so
an event needs no call of its own: a change feed of the table (DynamoDB Streams with old and
new images, or the twin's) shows each write's item before and after, and :func:`changes`
turns that pair into the events it means, or none. A heartbeat, a checkpoint, a budget's
bookkeeping leave the sequence alone and publish nothing.

The sequence orders a job's events and de-duplicates them (delivery is at least once: a
stream record can be handed to the publisher more than once): a consumer keeps the highest
sequence it has seen per job, drops what is not higher, and knows it missed one when the next
is more than one higher. A job whose item was written before the sequence existed starts at 1
with its next state change.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from dispatcher.domain.costs import entry_seconds

SOURCE = "longjobs"
DETAIL_TYPE = "longjobs Job State Change"
BILLED_DETAIL_TYPE = "longjobs Task Billed"
JOB_PREFIX = "JOB#"
TASK_PREFIX = "TASK#"
# The only state a job passes through between two written states: a runner that starts and
# ends a job before it writes either writes both at once (job_runner.writes, ``via``).
BETWEEN = "RUNNING"


@dataclass(frozen=True)
class TableChange:
    """One write to one item of the job table as a change feed tells it: the item's
    attributes before and after (None: absent), and its ``position`` in the feed (a DynamoDB
    stream record's SequenceNumber: where the feed is read again if its events fail)."""

    position: str
    old: Mapping[str, Any] | None
    new: Mapping[str, Any] | None


class Told:
    """What an event of ours is made of: its ``detail`` (the dataclass's fields), under its
    ``detail_type``, and one line of JSON of both (``longjobs local --events``)."""

    detail_type: ClassVar[str]

    def detail(self) -> dict[str, Any]:
        out: dict[str, Any] = asdict(self)  # type: ignore[call-overload]  # (dataclasses' base)
        return out

    def line(self) -> str:
        return json.dumps({"detail-type": self.detail_type, "detail": self.detail()},
                          sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class JobStateChange(Told):
    """One transition of one job: the event's ``detail``. ``previous_state`` is None for the
    job's creation; ``attempt`` the application attempts spent so far; ``revision`` the task
    definition (``family:revision``) of its latest run, None before it ever ran; ``at`` the
    write's time (UTC epoch seconds); ``labels`` and ``tenant`` its producer's; ``run_seconds``
    how long its runs so far lasted, ``task_seconds`` the same by task ARN: its dollars are
    each task's rate times its seconds there (dispatcher.domain.costs), the rate told by
    that task's :class:`TaskBilled` event once it stops (and in ``jobs show``)."""

    detail_type: ClassVar[str] = DETAIL_TYPE

    job_id: str
    kind: str
    state: str
    previous_state: str | None
    attempt: int
    reason: str | None
    revision: str | None
    sequence: int
    at: float
    labels: dict[str, str] | None = None
    run_seconds: float = 0.0
    tenant: str | None = None  # whom its work is for (dispatcher.domain.tenants)
    task_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def event_id(self) -> str:
        """Unique per transition, the same on every delivery of it: the consumer's dedup key."""
        return f"{self.job_id}#{self.sequence}"


@dataclass(frozen=True)
class TaskBilled(Told):
    """A stopped task's bill, settled once (dispatcher.stages.bills): ``cost`` in dollars for
    its ``job_seconds`` of runs, so each job that ran there costs ``rate`` times its seconds
    on it (a job event's ``task_seconds``); ``bill`` what it was billed for (size, capacity,
    architecture, from its image pull to its stop). ``at``: when it stopped."""

    detail_type: ClassVar[str] = BILLED_DETAIL_TYPE

    task_arn: str
    cost: float
    job_seconds: float
    rate: float
    bill: dict[str, Any]
    at: float

    @property
    def event_id(self) -> str:
        """One per task (its bill is settled once)."""
        return f"{self.task_arn}#billed"


# What the publisher sends.
Event = JobStateChange | TaskBilled


def _int(value: Any) -> int:
    return int(value) if value is not None else 0


def _json(image: Mapping[str, Any], name: str) -> Any:
    value = image.get(name)
    if isinstance(value, str):  # a stream image carries it as the stored JSON text
        value = json.loads(value)
    return value


def _revision(image: Mapping[str, Any]) -> str | None:
    history = _json(image, "history")
    runs = [h for h in history or () if isinstance(h, dict) and h.get("task_definition")]
    if not runs:
        return None
    name = str(runs[-1]["task_definition"])
    return name.rsplit("/", 1)[-1]  # an ARN's last part is family:revision


def changes(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> list[JobStateChange]:
    """The events of one write to one item, given its attributes before and after (None:
    absent). Nothing for an item that is not a job, a deleted job (TTL), or a write that
    leaves the job's sequence where it was. A sequence advanced by 2 is a start and an end
    written at once: the start (to RUNNING, one attempt more) is told before the end."""
    if new is None or not str(new.get("pk", "")).startswith(JOB_PREFIX):
        return []
    after = _int(new.get("sequence"))
    before = _int(old.get("sequence")) if old is not None else 0
    if after <= before:
        return []
    job_id = str(new.get("job_id") or str(new["pk"])[len(JOB_PREFIX):])
    kind = str(new.get("kind") or "")
    previous = str(old["state"]) if old is not None and old.get("state") else None
    at = float(new.get("updated_at") or new.get("created_at") or 0.0)
    revision = _revision(new)
    tags = _json(new, "labels")
    tags = {str(k): str(v) for k, v in tags.items()} if isinstance(tags, dict) and tags else None
    tenant = str(new["tenant"]) if new.get("tenant") else None
    history = _json(new, "history")
    by_task: dict[str, float] = {}
    for h in history or ():
        if isinstance(h, dict) and h.get("task_arn") and (seconds := entry_seconds(h)) > 0:
            arn = str(h["task_arn"])
            by_task[arn] = by_task.get(arn, 0.0) + seconds
    ran = sum(entry_seconds(h) for h in history or () if isinstance(h, dict))
    out: list[JobStateChange] = []
    if after - before == 2 and old is not None:
        out.append(JobStateChange(job_id, kind, BETWEEN, previous, _int(old.get("attempts")) + 1,
                                  None, revision, after - 1, at, tags, 0.0, tenant))
        previous = BETWEEN
    out.append(JobStateChange(job_id, kind, str(new.get("state")), previous,
                              _int(new.get("attempts")), new.get("reason"), revision, after, at,
                              tags, ran, tenant, by_task))
    return out


def billed(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> TaskBilled | None:
    """The bill a write to a task's pointer settled (its ``cost`` set, where it had none),
    or None: any other write, or another write to a pointer settled before."""
    if new is None or not str(new.get("pk", "")).startswith(TASK_PREFIX) \
            or new.get("cost") is None or (old is not None and old.get("cost") is not None):
        return None
    cost, seconds = float(new["cost"]), float(new.get("job_seconds") or 0)
    bill = _json(new, "bill")
    bill = {str(k): v for k, v in bill.items()} if isinstance(bill, dict) else {}
    stopped = bill.get("stopped_at")
    at = float(stopped) if isinstance(stopped, int | float) else float(new.get("updated_at") or 0)
    return TaskBilled(str(new["pk"])[len(TASK_PREFIX):], cost, seconds,
                      cost / seconds if seconds > 0 else 0.0, bill, at)


def events(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> list[Event]:
    """Every event one write tells: a job's transitions, or a task's bill."""
    bill = billed(old, new)
    return [bill] if bill is not None else list(changes(old, new))


def gaps(events: list[JobStateChange]) -> dict[str, list[int]]:
    """Per job, the sequence numbers missing below the highest one seen (duplicates are
    fine: delivery is at least once). What a consumer checks; empty when none is missing."""
    seen: dict[str, set[int]] = {}
    for e in events:
        seen.setdefault(e.job_id, set()).add(e.sequence)
    return {job: missing for job, got in seen.items()
            if (missing := [n for n in range(1, max(got) + 1) if n not in got])}
