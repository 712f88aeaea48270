"""A cancelled job's record expires by TTL while a message of its id is still about.

SQS deletes a message 14 days after it was sent (the stack's MessageRetentionPeriod, SQS's
most), and TTL deletes a finished job's record LONGJOBS_RETENTION_DAYS (30) after it ended. So
a copy of the message left in the queue after its job was recorded (a recording whose response
was lost gives its messages back) is gone before the record, and never becomes the job again:
the queue twin deletes messages past that period as SQS does. A message sent after the cancel
and received after the record expired is another matter: the id is forgotten by then
(docs/producing.md), and it is a new job, which ``cancel_kept`` does not count as the cancelled
one starting.
"""

from __future__ import annotations

from collections.abc import Callable

from dispatcher.testing.memory_queue import RETENTION_SECONDS, MemoryQueue
from tests.twins import test_system_model as model
from tests.twins.test_system_model_gaps import _Draws as Draws
from tests.twins.test_system_model_gaps import machines, seen_by, spec

__all__ = ["machines"]  # the fixture, used by name

DAY = 86_400.0


def lost_response_cancel_then_a_month(m: model.SystemModel) -> None:
    """An urgent job sent during a slow drain; the next tick records it, but the table's
    responses are lost, so its message is given back; it is cancelled; a month passes with no
    tick, TTL deletes its record; a tick drains what is queued."""
    m.slow_drain_tick(1)
    m.flaky_tick(5, True)
    m.operator(Draws("u001"), "cancel", False)  # type: ignore[arg-type]
    m.advance(31 * DAY)
    m.ttl()
    m.contend(None, "succeed")


def resent_after_the_record_expired(m: model.SystemModel) -> None:
    """A job waiting for its ``not_before`` is cancelled; a month later TTL deletes its
    record, and the producer sends its id again: a new job, which runs."""
    m.submit(spec(not_before=3600.0), 1, False)
    m.tick(1)
    m.operator(Draws("j001"), "cancel", False)  # type: ignore[arg-type]
    m.advance(31 * DAY)
    m.ttl()
    m.submit(spec(), 1, True)
    m.tick(1)
    m.runners_pass("succeed")


def test_a_message_given_back_before_the_cancel_does_not_outlive_the_record(
        machines: Callable[[], model.SystemModel]) -> None:
    assert seen_by(machines(), "cancel_kept", lost_response_cancel_then_a_month) == []


def test_the_cancel_check_sees_a_copy_kept_past_the_record(
        machines: Callable[[], model.SystemModel]) -> None:
    """The broken rule: a queue that keeps messages longer than the table keeps records."""
    m = machines()
    m.twins.queue.retention_seconds = m.high.retention_seconds = 60 * DAY
    seen = seen_by(m, "cancel_kept", lost_response_cancel_then_a_month)
    assert seen == ["u001 started after a cancel of it (or of its array) returned, with no "
                    "retry since"]


def test_an_id_sent_again_after_its_record_expired_is_a_new_job(
        machines: Callable[[], model.SystemModel]) -> None:
    m = machines()
    assert seen_by(m, "cancel_kept", resent_after_the_record_expired) == []
    assert m.runs == {"j001": 1}


def test_a_message_no_tick_took_in_time_is_aged_out_not_lost(
        machines: Callable[[], model.SystemModel]) -> None:
    """A dispatcher stopped for 15 days: SQS deleted the job's message unseen."""
    def stopped(m: model.SystemModel) -> None:
        m.submit(spec(), 1, False)
        m.advance(15 * DAY)
        m.tick(1)

    m = machines()
    assert seen_by(m, "lost_job", stopped) == []
    assert m.view().aged_out_job("j001")


def test_the_queue_twin_deletes_messages_past_the_retention_period() -> None:
    now = [1_000.0]
    q = MemoryQueue(clock=lambda: now[0])
    q.send([("0", "old")])
    now[0] += RETENTION_SECONDS - 1
    q.send([("1", "new")])
    assert [m.body for m in q.receive(10, visibility_timeout=0)] == ["old", "new"]
    now[0] += 1
    assert (q.backlog().visible, q.aged_out) == (1, ["old"])
    assert [m.body for m in q.receive(10)] == ["new"]  # received or not, its age ends it
    now[0] += RETENTION_SECONDS
    assert (q.expire(), q.receive(), q.aged_out) == (1, [], ["old", "new"])
