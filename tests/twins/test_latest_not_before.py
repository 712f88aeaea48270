"""A ``not_before`` never reaches the due times the dispatcher keeps for held bundles.

A retry waiting for an earlier run's task and a job waiting for its dependencies are held in
bundles due at markers past any real time (``dispatcher.domain.lifecycle.HELD_TIMES``). A job a
producer schedules that late would be read as held: every tick would rewrite its bundle, and
``jobs show`` would call it a rerun. So the latest ``not_before`` a producer may set is one
second before the earliest marker, and a later one is refused with that time named: by the
client, by the dispatcher's parse and in the exported JSON Schema.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from dispatcher.domain import message, published_schema
from dispatcher.domain.errors import InvalidMessage
from dispatcher.domain.jobs import JobState
from dispatcher.domain.lifecycle import HELD_TIMES
from dispatcher.domain.waiting import SCHEDULED
from dispatcher.ops.queries import Queries
from dispatcher.ports.table import Delete, Op, Put, Record, Update
from dispatcher.store import Store
from dispatcher.store import codec as r
from dispatcher.testing.memory_table import MemoryTable
from tests.twins import Twins

LATEST = message.MAX_NOT_BEFORE
# The latest time the schema allowed before: the held-retry marker itself.
OLD_LATEST = 253_402_300_799.0
LATEST_ISO = datetime.fromtimestamp(LATEST, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class WriteCount(MemoryTable):
    """Counts the writes (single ones and each transaction's ops) per item."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: dict[str, int] = {}

    def _count(self, ops: list[Op]) -> None:
        for op in ops:
            self.writes[op.pk] = self.writes.get(op.pk, 0) + 1

    def write(self, op: Put | Update | Delete) -> Record | None:
        self._count([op])
        return super().write(op)

    def _transact(self, ops: list[Op]) -> None:
        super()._transact(ops)
        self._count(ops)


def _twins() -> tuple[Twins, WriteCount]:
    tw = Twins()
    table = WriteCount()
    tw.table = table
    tw.store = Store(table, clock=tw.clock)
    return tw, table


def _body(not_before: float | str) -> str:
    return json.dumps({"schema_version": 1, "job_id": "late", "kind": "k", "payload": {},
                       "not_before": not_before})


def _shown(tw: Twins) -> tuple[str, str, str]:
    """``jobs show --json``'s state, and what it says the job waits for and until when (to
    the second)."""
    shown = Queries(tw.store, clock=tw.clock).show("late").to_json()
    waiting = shown["waiting_for"] or {}
    until = str(waiting.get("until", ""))
    return shown["state"], waiting.get("reason", ""), until[:19] + until[-1:]


def test_the_latest_not_before_is_below_every_held_marker() -> None:
    assert min(HELD_TIMES) > LATEST
    assert min(HELD_TIMES) - 1.0 == LATEST  # a whole second: what an ISO time can name
    assert LATEST_ISO == "9999-12-31T23:59:57Z"


@pytest.mark.parametrize("late", [OLD_LATEST, OLD_LATEST - 1.0, LATEST + 0.5,
                                  "9999-12-31T23:59:59Z", "9999-12-31T23:59:58Z"])
def test_a_not_before_past_the_latest_is_refused_naming_the_latest(late: float | str) -> None:
    with pytest.raises(InvalidMessage, match=f"not_before.*{LATEST_ISO}") as parsed:
        message.parse(_body(late))
    assert parsed.value.job_id == "late"
    tw, _ = _twins()
    with pytest.raises(InvalidMessage, match=f"not_before.*{LATEST_ISO}"):
        tw.client().submit("k", {}, job_id="late", not_before=late)
    assert tw.queue_counts() == (0, 0)  # refused before it was sent


def test_the_schema_says_the_latest_not_before() -> None:
    field = published_schema.json_schema()["properties"]["not_before"]
    number = next(s for s in field["anyOf"] if s.get("type") == "number")
    assert number["maximum"] == LATEST
    assert LATEST_ISO in field["description"]


@pytest.mark.parametrize("latest", [LATEST, LATEST_ISO])
def test_a_job_at_the_latest_not_before_is_scheduled_and_left_alone_by_the_ticks(
        latest: float | str) -> None:
    tw, table = _twins()
    tw.client().submit("k", {}, job_id="late", estimated_seconds=1, not_before=latest)
    stages = tw.stages()
    stages.tick.tick()
    job = tw.job("late")
    assert job is not None and job.not_before == LATEST and job.bundle_id
    bundle = tw.bundle(job.bundle_id)
    assert bundle is not None and bundle.next_attempt_at == LATEST
    assert _shown(tw) == ("SCHEDULED", SCHEDULED, LATEST_ISO)

    keys = (r.job_key("late"), r.bundle_key(job.bundle_id))
    before = {k: table.writes.get(k, 0) for k in keys}
    for _ in range(3):
        tw.clock.advance(60)
        stages.tick.tick()
    assert {k: table.writes.get(k, 0) for k in keys} == before  # never rewritten
    assert tw.job("late") == job
    assert _shown(tw) == ("SCHEDULED", SCHEDULED, LATEST_ISO)


def test_a_retry_and_an_array_children_at_the_latest_not_before_stay_scheduled() -> None:
    """The other ways a job's not_before becomes a bundle's due time: a retry's bundle of its
    own, and an array's children (each admitted with its parent's message)."""
    tw, table = _twins()
    client = tw.client()
    client.submit("k", {}, job_id="late", estimated_seconds=1, not_before=LATEST)
    client.submit("k", {}, job_id="arr", estimated_seconds=1, not_before=LATEST, array_size=3)
    stages = tw.stages()
    stages.tick.tick()
    client.cancel("late")
    client.retry("late")
    for _ in range(3):
        tw.clock.advance(60)
        stages.tick.tick()
    ids = ["late", "arr:0", "arr:1", "arr:2"]
    jobs = {j.job_id: j for j in tw.jobs()}
    assert {j: jobs[j].state for j in ids} == dict.fromkeys(ids, JobState.PENDING)
    bundles = {b.bundle_id: b for b in tw.bundles()}
    due = {j: bundles[jobs[j].bundle_id or ""].next_attempt_at for j in ids}
    assert due == dict.fromkeys(ids, LATEST)
    assert _shown(tw) == ("SCHEDULED", SCHEDULED, LATEST_ISO)
    keys = [r.job_key(j) for j in ids] + [r.bundle_key(jobs[j].bundle_id or "") for j in ids]
    before = {k: table.writes.get(k, 0) for k in keys}
    tw.clock.advance(60)
    stages.tick.tick()
    assert {k: table.writes.get(k, 0) for k in keys} == before
