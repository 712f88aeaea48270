"""A job that waits for one child of an array (``depends_on: ["A:3"]``) before that array has
recorded its children: the child is on its way, so the dependent waits for it however long its
array takes to record it (not the grace for an unknown job), and is released by its end; an
index past the array's size is no child at all and is refused or cancelled saying the size."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from dispatcher.domain import dependencies
from dispatcher.domain.errors import InvalidMessage
from dispatcher.domain.jobs import JobState
from dispatcher.ops.client import JobClient
from dispatcher.ops.queries import Queries
from dispatcher.stages.dependents import SWEEP_SECONDS, Dependents, DependentsStats
from dispatcher.store import Store
from dispatcher.store import codec as r
from tests.twins import Twins
from tests.twins.test_array_jobs import run_launched

DAY = 86_400.0
FAR = 4_000_000_000.0  # a not_before no test reaches: recorded, never launched


def send_only(twins: Twins) -> JobClient:
    """A producer that may only send: the dispatcher alone judges its dependencies."""
    client = twins.client()
    client.cfg = client.cfg.__class__(**{**vars(client.cfg), "table": ""})
    return client


def state(twins: Twins, job_id: str) -> JobState:
    job = twins.job(job_id)
    assert job is not None, job_id
    return job.state


def test_a_child_of_an_array_that_waits_is_waited_for_past_the_grace(twins: Twins) -> None:
    """``A`` waits for a long job, so its children are recorded only once that job ended,
    far past the grace for an unknown dependency: ``D`` (on ``A:3``) waits all along, says
    so, is linked to ``A:3`` once it is recorded, and is released by its end."""
    client = send_only(twins)
    client.submit("k", {}, job_id="long", estimated_seconds=3600)
    client.submit("k", {}, job_id="A", array_size=5, depends_on=["long"], estimated_seconds=1)
    client.submit("k", {}, job_id="D", depends_on=["A:3"], estimated_seconds=1)
    stages = twins.stages()
    waited = 0.0
    while waited <= dependencies.UNKNOWN_GRACE_SECONDS + 3 * SWEEP_SECONDS:
        stages.tick.tick()
        waited += 60
        twins.clock.advance(60)
    assert state(twins, "D") == JobState.PENDING
    assert twins.job("A:3") is None
    shown = Queries(twins.store, clock=twins.clock).show("D").summary.waiting_for
    assert shown is not None and shown.reason == "dependencies" and shown.detail == \
        "A:3 (succeeded)"

    ran: Counter[str] = Counter()
    run_launched(twins, ran=ran)  # the long job ends: A is released
    for _ in range(int(SWEEP_SECONDS // 60) + 2):  # its children recorded, and D linked to A:3
        stages.tick.tick()
        twins.clock.advance(60)
    assert state(twins, "A:3") == JobState.PENDING
    assert twins.table.snapshot().get(r.waiter_key("A:3", "D")) is not None

    run_launched(twins, ran=ran)  # A's children end: A:3's end releases D at once
    d = twins.job("D")
    assert d is not None and d.state == JobState.PENDING and d.depends_on is None
    stages.tick.tick()
    run_launched(twins, ran=ran)
    assert state(twins, "D") == JobState.SUCCEEDED and ran["D"] == 1


def test_a_child_past_the_size_of_its_array_cancels_its_dependent_naming_the_size(
        twins: Twins) -> None:
    client = send_only(twins)
    client.submit("k", {}, job_id="long", estimated_seconds=3600)
    client.submit("k", {}, job_id="A", array_size=5, depends_on=["long"], estimated_seconds=1)
    # From a producer that did not send A (nor may read the table): the dispatcher judges.
    send_only(twins).submit("k", {}, job_id="D", depends_on=["A:5"], estimated_seconds=1)
    stages = twins.stages()
    stages.tick.tick()
    twins.clock.advance(SWEEP_SECONDS + 1)  # the next look at every held dependent
    stages.tick.tick()
    d = twins.job("D")
    assert d is not None and d.state == JobState.CANCELLED
    assert d.reason == ("its dependency A:5 is no child of array A: it has 5 children, "
                        "A:0 to A:4")


def test_an_array_that_waits_for_a_child_of_its_own_is_cancelled(twins: Twins) -> None:
    """Its children are recorded only once its dependencies are met: it would wait forever."""
    # As a producer that does not check would send it (a client refuses it).
    twins.queue.send([("e0", json.dumps({
        "schema_version": 1, "job_id": "A", "kind": "k", "payload": {}, "array_size": 5,
        "depends_on": ["A:2"], "estimated_seconds": 1}))])
    stages = twins.stages()
    stages.tick.tick()  # records it
    stages.tick.tick()  # its offer judges it
    a = twins.job("A")
    assert a is not None and a.state == JobState.CANCELLED
    assert a.reason is not None and "A:2 is a child of its own" in a.reason


def test_a_child_of_a_job_that_is_no_array_is_unknown_as_any_other(twins: Twins) -> None:
    """``P:1`` where ``P`` is a plain job: a job of that very id may still be on its way."""
    client = send_only(twins)
    client.submit("k", {}, job_id="P", estimated_seconds=3600)
    client.submit("k", {}, job_id="D", depends_on=["P:1"], estimated_seconds=1)
    stages = twins.stages()
    stages.tick.tick()
    assert state(twins, "D") == JobState.PENDING
    twins.clock.advance(dependencies.UNKNOWN_GRACE_SECONDS + 1)
    stages.tick.tick()
    d = twins.job("D")
    assert d is not None and d.state == JobState.CANCELLED
    assert d.reason is not None and "P:1 is unknown" in d.reason


def test_the_client_accepts_a_dependency_on_a_job_on_its_way(twins: Twins) -> None:
    """What a producer just sent (from another client: each CLI call is one) and a child
    of an array not recorded yet are accepted; the dispatcher waits for them."""
    twins.client().submit("k", {}, job_id="arr1", array_size=20, estimated_seconds=1)
    twins.client().submit("k", {}, job_id="reduce", depends_on=["arr1"])
    twins.client().submit("k", {}, job_id="one", depends_on=["arr1:19"])
    twins.stages().tick.tick()
    twins.client().submit("k", {}, job_id="other", depends_on=["arr1:7"])
    assert twins.queue_counts() == (1, 0)  # "other": the first three were taken by the tick
    for job_id in ("reduce", "one"):
        assert state(twins, job_id) == JobState.PENDING


@pytest.mark.parametrize("sent_by_this_client", [True, False])
def test_the_client_refuses_a_child_past_the_size_of_a_known_array(
        twins: Twins, sent_by_this_client: bool) -> None:
    client = twins.client()
    client.submit("k", {}, job_id="arr1", array_size=20, estimated_seconds=1)
    if not sent_by_this_client:
        twins.stages().tick.tick()
        client = twins.client()
    with pytest.raises(InvalidMessage, match=r"'arr1:20' is no child of array 'arr1': it has "
                       r"20 children, arr1:0 to arr1:19") as raised:
        client.submit("k", {}, job_id="d", depends_on=["arr1:20"])
    assert raised.value.job_id == "d"


def test_a_link_outlives_the_retention_while_its_dependent_waits() -> None:
    """A link expires a retention period after it was made; a dependent that waits longer
    (here three periods of one day, the table expiring what DynamoDB's TTL would at the very
    second) is still released by its dependency's end through its link, not left to the
    next look at every held dependent."""
    tw = Twins()
    tw.store = Store(tw.table, clock=tw.clock, retention_days=1)
    client = tw.client()
    client.submit("k", {}, job_id="a", estimated_seconds=1, not_before=FAR)
    client.submit("k", {}, job_id="d", estimated_seconds=1,
                  depends_on=[{"job_id": "a", "condition": "finished"}])
    tw.stages().tick.tick()
    assert tw.table.snapshot().get(r.waiter_key("a", "d")) is not None
    look = Dependents(tw.store, tw.clock)
    while tw.clock() < 1_700_000_000.0 + 3 * DAY:
        tw.clock.advance(SWEEP_SECONDS + 1)
        tw.table.expire(tw.clock())
        look.sweep(DependentsStats())
    assert state(tw, "d") == JobState.PENDING
    client.cancel("a")
    assert tw.flow().released == ["d"]


def test_jobs_that_wait_for_each_other_are_cancelled_by_the_look(twins: Twins) -> None:
    """The client accepts ``x`` waiting for ``y`` before ``y`` is sent, and then ``y``
    waiting for ``x``: neither could ever start, so the look at every held dependent cancels
    both, naming the cycle; a job that waits for one of them is cancelled by that end."""
    client = twins.client()
    client.submit("k", {}, job_id="x", depends_on=["y"], estimated_seconds=1)
    client.submit("k", {}, job_id="y", depends_on=["x"], estimated_seconds=1)
    client.submit("k", {}, job_id="z", depends_on=["x"], estimated_seconds=1)
    stages = twins.stages()
    stages.tick.tick()
    assert {state(twins, j) for j in "xyz"} == {JobState.PENDING}
    twins.clock.advance(SWEEP_SECONDS + 1)
    stages.tick.tick()
    twins.flow()  # their ends: z's dependency went against it
    x, y, z = twins.job("x"), twins.job("y"), twins.job("z")
    assert x is not None and x.state == JobState.CANCELLED
    assert x.reason is not None and "wait for it in turn (x -> y -> x)" in x.reason
    assert y is not None and y.state == JobState.CANCELLED
    assert z is not None and z.state == JobState.CANCELLED
    assert z.reason == "its dependency x ended CANCELLED; it needed succeeded"
