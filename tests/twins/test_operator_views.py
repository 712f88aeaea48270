"""What operators see agrees between views: ``jobs list`` and ``jobs show`` name one job's
state alike (a PENDING job whose ``not_before`` is ahead is SCHEDULED in both)."""

from __future__ import annotations

from dispatcher.ops.job_views import SCHEDULED
from dispatcher.ops.queries import Queries
from tests.twins import Twins


def test_show_says_scheduled_where_list_does_and_pending_once_due(twins: Twins) -> None:
    due = twins.clock() + 3600
    twins.client().submit("k", {}, job_id="later", not_before=due)
    twins.stages().tick.tick()
    operators = Queries(twins.store, clock=twins.clock)
    (listed,) = operators.list_jobs()
    shown = operators.show("later")
    assert listed.state == SCHEDULED
    assert shown.summary.state == listed.state and shown.to_json()["state"] == SCHEDULED
    twins.clock.set(due + 1)
    assert operators.show("later").summary.state == operators.list_jobs()[0].state == "PENDING"


def test_a_message_whose_job_id_cannot_be_read_is_found_by_its_message_id() -> None:
    """A rejected message is kept under its job id, or, with none readable, under the
    MessageId SQS gave it: `jobs show` finds it by either (README: Guarantees in brief)."""
    from dispatcher.ops.queries import Queries
    from tests.twins import Twins

    tw = Twins()
    tw.queue.send([("e1", "{not json"), ("e2", '{"schema_version": 1, "job_id": "named", '
                                            '"kind": "k"}')])
    tw.stages().tick.tick()
    queries = Queries(tw.store, clock=tw.clock)
    unnamed = queries.show("m1").to_json()  # the twin queue's MessageId of the first
    assert unnamed["state"] == "REJECTED" and "not JSON" in unnamed["reason"]
    named = queries.show("named").to_json()
    assert named["state"] == "REJECTED" and "payload" in named["reason"]
