"""Recurring schedules: each fire of a schedule is one job, named by the schedule and the fire.

A schedule is kept by EventBridge Scheduler (on AWS; local mode runs a loop of its own over the
same calls): its target is the job queue of its priority, and its input is a job message whose
job id is ``schedule/<name>/<aws.scheduler.scheduled-time>``. Scheduler writes the fire's own
time into that placeholder ("Adding context attributes",
https://docs.aws.amazon.com/scheduler/latest/UserGuide/managing-schedule-context-attributes.html),
so every delivery of one fire, a retried or duplicated one included, carries the same job id,
and the dispatcher's idempotent admission makes it one job.

What the dispatcher keeps of a schedule's fires (:class:`FireRecord`, one item per schedule):
the job of its last fire that ran, and its latest fires with what became of each. A schedule
whose ``overlap`` is ``skip`` runs no fire while the job of the last one that ran is still
pending or running, nor while one is that an operator's retry of a fire's job ran beside: the
dispatcher judges that at admission (no code of ours is in the firing path) and records the
skipped fire as a CANCELLED job whose reason says why, so a second delivery of it is a
duplicate and never runs either.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

# Scheduler's rule for a schedule's name (API_CreateSchedule: Name, 1-64, [0-9a-zA-Z-_.]+).
# https://docs.aws.amazon.com/scheduler/latest/APIReference/API_CreateSchedule.html
NAME = re.compile(r"[0-9A-Za-z_.-]{1,64}")
ID_PREFIX = "schedule/"
# The context attribute Scheduler replaces with the fire's time, e.g. 2022-03-22T18:59:43Z.
SCHEDULED_TIME = "<aws.scheduler.scheduled-time>"
_FIRE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")
# The latest fires a schedule's record keeps (``schedules show`` lists them).
FIRES_KEPT = 20
# The runs an operator's retries displaced that a record keeps (FireRecord.beside): a fire
# judges them in its one BatchGetItem, which takes 100 keys.
BESIDE_KEPT = 20
RAN, SKIPPED = "RAN", "SKIPPED"


class Overlap(StrEnum):
    """What a fire does while the job of the last fire that ran is still pending or running."""

    ALLOW = "allow"  # runs beside it
    SKIP = "skip"  # runs nothing, and is recorded as skipped with the reason


class ScheduleRef(BaseModel):
    """The schedule whose fire a job is, as the fire's message names it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="The schedule's name: 1-64 chars of [0-9A-Za-z_.-].",
                      json_schema_extra={"pattern": f"^{NAME.pattern}$"})
    overlap: Overlap = Field(
        default=Overlap.ALLOW,
        description="allow (default): a fire runs beside the last one's job; skip: a fire "
        "while the job of the last fire that ran is pending or running is recorded as "
        "CANCELLED with the reason, and runs nothing.")


def id_problem(name: str, job_id: str) -> str | None:
    """Why ``job_id`` cannot be a fire of schedule ``name``, or None: the record of the
    schedule's fires, and a skip schedule's overlap rule, go by the fire's id."""
    fire = fire_of(job_id)
    if fire is not None and fire[0] == name:
        return None
    return (f"job_id: a fire of schedule {name!r} has the job_id {fire_id(name, 'TIME')} (TIME "
            "as 2026-01-31T02:00:00Z); leave schedule out of a job no schedule made")


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a schedule, or None."""
    if NAME.fullmatch(name):
        return None
    return (f"schedule name {name[:80]!r} must be 1-64 characters of letters, digits, '-', '_' "
            "and '.' (EventBridge Scheduler's rule), e.g. nightly-report")


def fire_id(name: str, at: str) -> str:
    """The job id of the fire of schedule ``name`` at ``at`` (its scheduled time, as
    Scheduler writes it, or :data:`SCHEDULED_TIME` in the template)."""
    return f"{ID_PREFIX}{name}/{at}"


def fire_time(epoch: float) -> str:
    """A fire's time as Scheduler writes its scheduled time: UTC, whole seconds."""
    return datetime.fromtimestamp(int(epoch), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def fire_epoch(at: str) -> float:
    """A fire's time (as :func:`fire_time` writes it) as epoch seconds."""
    return datetime.strptime(at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def fire_of(job_id: str) -> tuple[str, str] | None:
    """``(schedule name, fire time)`` of a fire's job (or of a child of a fire's array job),
    None for a job no schedule made."""
    if not job_id.startswith(ID_PREFIX):
        return None
    name, sep, rest = job_id[len(ID_PREFIX):].partition("/")
    if not sep or NAME.fullmatch(name) is None or _FIRE_TIME.match(rest) is None:
        return None
    return name, rest[:20]


def render(body: str, at: str) -> str:
    """A schedule's input as Scheduler delivers it for the fire at ``at``."""
    return body.replace(SCHEDULED_TIME, at)


@dataclass(frozen=True)
class JobSchedule:
    """One schedule: when it fires (an EventBridge Scheduler expression in ``timezone``) and
    the job each fire makes: ``job`` holds the job message's fields but its id (kind, payload,
    priority, and any other submit option)."""

    name: str
    expression: str
    job: dict[str, Any]
    timezone: str = "UTC"
    overlap: Overlap = Overlap.ALLOW
    enabled: bool = True
    # Scheduler's StartDate: no fire before it. A rate counts its periods from it; a resume
    # sets it to the resume's time, so the fires missed while paused are not made up.
    start: float | None = None
    description: str = ""

    @property
    def kind(self) -> str:
        return str(self.job.get("kind", ""))

    @property
    def priority(self) -> str:
        return str(self.job.get("priority") or "normal")

    def body(self) -> str:
        """The job message every fire sends, :data:`SCHEDULED_TIME` in its id (Scheduler's
        ``Target.Input``)."""
        fields = {"schema_version": 1, "job_id": fire_id(self.name, SCHEDULED_TIME),
                  **{k: v for k, v in self.job.items() if k not in ("job_id", "schedule")},
                  "schedule": {"name": self.name, "overlap": str(self.overlap)}}
        return json.dumps(fields, separators=(",", ":"), ensure_ascii=False)

    def message(self, at: str) -> dict[str, Any]:
        """The job message of the fire at ``at``, as the queue receives it."""
        parsed: dict[str, Any] = json.loads(render(self.body(), at))
        return parsed


def from_body(name: str, expression: str, body: str, **fields: Any) -> JobSchedule:
    """The schedule whose input is ``body`` (read back from Scheduler); ``fields`` are the
    other :class:`JobSchedule` fields."""
    data = json.loads(body)
    ref = data.pop("schedule", None) or {}
    for key in ("schema_version", "job_id"):
        data.pop(key, None)
    return JobSchedule(name=name, expression=expression, job=data,
                    overlap=Overlap(ref.get("overlap", Overlap.ALLOW)), **fields)


@dataclass(frozen=True)
class Fire:
    """What became of one fire: its job ran (was admitted), or it was skipped, and why."""

    at: str
    job_id: str
    outcome: str  # RAN or SKIPPED
    reason: str | None = None

    def as_json(self) -> dict[str, str]:
        out = {"at": self.at, "job_id": self.job_id, "outcome": self.outcome}
        if self.reason:
            out["reason"] = self.reason
        return out

    @staticmethod
    def from_json(data: dict[str, Any]) -> Fire:
        return Fire(str(data.get("at", "")), str(data.get("job_id", "")),
                    str(data.get("outcome", RAN)), data.get("reason"))


@dataclass(frozen=True)
class FireRecord:
    """What the dispatcher keeps of one schedule's fires: the job of the fire admitted to run
    last (the one a ``skip`` schedule's next fire waits to see ended), the runs an operator's
    retry made it run beside (which that fire waits for too) and its latest fires, newest
    first by fire time."""

    name: str
    last_run: str | None = None
    fires: tuple[Fire, ...] = field(default_factory=tuple)
    version: int = 0  # as read (0: none yet); each write is conditional on it
    # The last runs an operator's retry displaced, newest first: a retried fire runs beside
    # them, and a skip schedule's next fire must see them ended as well, not only the retried
    # one. A fire the dispatcher runs clears them: a skip schedule's runs only once none of
    # them is live, and an allow schedule's waits for none.
    beside: tuple[str, ...] = ()

    @property
    def runs(self) -> tuple[str, ...]:
        """The jobs a ``skip`` schedule's next fire waits to see ended: the last run first."""
        return (self.last_run, *self.beside) if self.last_run else self.beside

    @property
    def last_fire(self) -> Fire | None:
        return self.fires[0] if self.fires else None

    def noted(self, fire: Fire) -> FireRecord:
        """With ``fire`` among its fires (once: a fire noted again replaces itself), newest
        first by fire time, the latest :data:`FIRES_KEPT` kept."""
        fires = sorted([f for f in self.fires if f.job_id != fire.job_id] + [fire],
                       key=lambda f: f.at, reverse=True)[:FIRES_KEPT]
        # The last run is the fire admitted last, not the latest by its time: a fire delivered
        # late that runs is the run the next fire of a skip schedule must see ended.
        if fire.outcome != RAN:
            return replace(self, fires=tuple(fires))
        return replace(self, last_run=fire.job_id, fires=tuple(fires), beside=())

    def retried(self, fire: Fire) -> FireRecord:
        """With ``fire``, whose job an operator retried, noted as the last run: it runs beside
        the runs before it (the operator asked), so those stay runs the next fire waits for,
        the latest :data:`BESIDE_KEPT`."""
        earlier = [j for j in self.runs if j != fire.job_id]
        return replace(self.noted(fire), beside=tuple(dict.fromkeys(earlier))[:BESIDE_KEPT])


def skip_reason(name: str, previous: str, state: str, beside: bool = False) -> str:
    """Why a fire of a ``skip`` schedule was skipped: ``previous`` is live, its last run or
    (``beside``) a run an operator's retry put the last run beside."""
    run = "a run an operator's retry was put beside" if beside else "its last run"
    return f"skipped: schedule {name!r} skips a fire while {run} is live, and {previous} is {state}"
