"""Every item has a size budget: one job's oversized data ends that job FAILED with the reason,
and never fails its runner on every launch, a stop event, a tick or a receive batch.

DynamoDB refuses an item over 400 KB
(https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html); the
table twin refuses it alike, so these run in-process on the twins.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from dispatcher import settings
from dispatcher.domain import labels, message, rate_limits, sizes, tenants
from dispatcher.domain.bundles import BundleState
from dispatcher.domain.errors import LongjobsError, TooLarge
from dispatcher.domain.jobs import Job, JobState, Priority, Resources
from dispatcher.domain.stops import StopCode, TaskStop
from dispatcher.ports.table import InvalidTransaction, Put, Record
from dispatcher.store import Fence, JobUpdate, Store
from dispatcher.store import codec as r
from dispatcher.testing.memory_table import MAX_ITEM_BYTES, MemoryTable, _item_bytes
from job_runner import JobContext
from job_runner.kinds import HandlerRegistry
from job_runner.outcome import error_of
from job_runner.worker import Worker
from tests.model_runner import worst_report
from tests.twins import Twins
from tests.twins.test_worker import ARN, launched

RUNNER = settings.load("runner", {"LONGJOBS_TABLE": "t", "LONGJOBS_FLUSH_SECONDS": "3600",
                                  "LONGJOBS_HEARTBEAT_SECONDS": "3600",
                                  "LONGJOBS_ASSIGN_WAIT_SECONDS": "1"})
KB = 1024


def _run(worker: Worker) -> int:
    """What ``job_runner.main`` exits with: the run's code, or 75 when the runner failed."""
    try:
        return worker.run()
    except Exception:
        return 75


def test_a_growing_checkpoint_beside_a_large_payload_fails_its_job_not_every_tick() -> None:
    """A 250 KB payload and a checkpoint that grows (a list of processed ids): the job ends
    FAILED with the reason; the stop event and the next ticks go on, and a new job launches."""
    tw = Twins()
    stages = tw.stages()
    tw.client().submit("k", {"blob": "p" * (250 * KB)}, job_id="big", estimated_seconds=5000,
                       max_attempts=1)
    stages.tick.tick()
    big = tw.job("big")
    assert big is not None and big.bundle_id
    bundle = tw.bundle(big.bundle_id)
    assert bundle is not None and bundle.task_arn

    def grow(payload: dict[str, Any], ctx: JobContext) -> dict[str, int]:
        # Processed ids: a first batch, then one id at a time.
        done = list((ctx.last_checkpoint or {}).get("done", [])) or \
            [f"{n:06d}-" + "i" * 100 for n in range(1300)]
        while len(done) < 3000:
            done.append(f"{len(done):06d}-" + "i" * 30)
            ctx.checkpoint({"done": done})
        return {"done": len(done)}

    code = _run(Worker(RUNNER, tw.store, HandlerRegistry({"k": grow}), bundle.task_arn))
    stages.reruns.on_stop(TaskStop(bundle.task_arn, StopCode.ESSENTIAL_CONTAINER_EXITED,
                                   "Essential container in task exited", code))
    big = tw.job("big")
    assert big is not None and big.state == JobState.FAILED, big.state
    assert "checkpoint" in (big.reason or "") and "too large" in (big.reason or "")
    # The ticks go on: a new job is admitted and launched.
    tw.client().submit("k", {}, job_id="next", estimated_seconds=5000)
    stages.tick.tick()
    stages.tick.tick()
    nxt = tw.job("next")
    assert nxt is not None and nxt.bundle_id
    after = tw.bundle(nxt.bundle_id)
    assert after is not None and after.state == BundleState.LAUNCHED


@pytest.mark.parametrize("ends", ["result", "error"])
def test_a_result_or_error_that_would_overfill_the_item_fails_the_job_once(ends: str) -> None:
    """A checkpoint of 140 KB beside a 250 KB payload was accepted; a 60 KB result (or an error
    with a long non-ASCII message) then overfilled the item, and the runner failed itself on
    every launch (exit 75). Now the checkpoint is refused with a clear error the handler can
    catch, and the job's end is written once: SUCCEEDED with its result, or FAILED with a
    bounded error."""
    store = Store(MemoryTable())
    launched(store, [Job("j", "k", {"blob": "p" * (250 * KB)}, max_attempts=1)])
    refused: list[str] = []

    def handler(payload: dict[str, Any], ctx: JobContext) -> str:
        try:
            ctx.checkpoint({"state": "c" * (140 * KB)})
        except Exception as exc:  # the limit's error: the handler goes on without it
            refused.append(type(exc).__name__)
        if ends == "error":
            raise RuntimeError("é" * 500_000)
        return "r" * (60 * KB)

    assert _run(Worker(RUNNER, store, HandlerRegistry({"k": handler}), ARN)) == 0
    assert refused, "a checkpoint beyond the limit must be refused"
    job = store.get_job("j")
    assert job is not None
    if ends == "result":
        assert job.state == JobState.SUCCEEDED and job.result == "r" * (60 * KB)
    else:
        assert job.state == JobState.FAILED and job.error is not None
        assert sizes.json_bytes(job.error) <= 8 * KB
        assert "truncated" in job.error["message"]
    bundle = store.get_bundle("b1")
    assert bundle is not None and bundle.state == BundleState.DONE


def test_a_huge_rejected_message_does_not_fail_its_receive_batch() -> None:
    """A 1 MiB message whose unknown field is 500 KB long is rejected with a reason that quotes
    the field: the REJECTED record keeps a clipped reason, and every message of the batch is
    recorded and deleted (the malformed one beside it is REJECTED, not dead-lettered)."""
    tw = Twins()
    huge = json.dumps({"schema_version": 1, "job_id": "huge", "kind": "k", "payload": {},
                       "f" * (500 * KB): "v" * (500 * KB)})
    assert len(huge) <= 1024 * KB  # what the queue accepts
    tw.queue.send([("a", huge), ("b", "not json")])
    tw.stages().tick.tick()
    assert tw.queue_counts() == (0, 0)
    rejected = {rec.job_id or rec.message_id: rec for rec in tw.rejections()}
    assert len(rejected) == 2
    reason = rejected["huge"].reason or ""
    assert len(reason.encode()) <= 2 * KB and "truncated" in reason


def test_repeated_cancel_requests_for_one_job_are_kept_once() -> None:
    store = Store(MemoryTable())
    launched(store, [Job("a", "k", {}), Job("b", "k", {})])
    for _ in range(5):
        store.cancel("a")
    store.cancel("b")
    store.cancel("a")
    rec = store.table.get(r.bundle_key("b1"))
    assert rec is not None and rec.cancel_jobs == ["a", "b"]


def test_history_is_bounded_with_the_first_and_last_attempts_kept() -> None:
    """A job retried again and again: its history keeps the first attempt, says how many were
    left out, and keeps the latest ones."""
    tw = Twins()
    stages = tw.stages()
    bundle_id, arn = tw.launched("j1", estimated_seconds=5000)
    bundle = tw.bundle(bundle_id)
    assert bundle is not None
    fence = Fence(bundle_id, bundle.attempt, arn)
    tw.store.claim(fence)
    earlier = [{"attempt": n, "task_arn": f"{arn}-{n}", "reason": f"run {n} " + "x" * 600}
               for n in range(40)]
    tw.store.apply(fence, [JobUpdate("j1", JobState.PENDING, JobState.RUNNING,
                                     attempts_delta=1,
                                     history=[*earlier, {"attempt": 41, "task_arn": arn}])])
    stages.reruns.on_stop(TaskStop(arn, StopCode.SPOT_INTERRUPTION, "spot", 0))
    job = tw.job("j1")
    assert job is not None and job.state == JobState.PENDING
    assert len(job.history) <= 12
    assert job.history[0]["reason"].startswith("run 0 ")
    assert job.history[-1]["reason"] == "spot"
    assert any("omitted" in h for h in job.history)
    assert sizes.json_bytes(job.history) <= 16 * KB


def test_a_job_item_the_table_already_holds_near_the_limit_fails_alone_at_its_stop() -> None:
    """An item written near 400 KB (by an older version, without the budgets): the stop's
    settle cannot add its history. The job ends FAILED with the reason; the stop event and the
    tick do not raise."""
    tw = Twins()
    stages = tw.stages()
    _, arn = tw.launched("near", estimated_seconds=5000, max_attempts=1)
    rec = tw.table.get(r.job_key("near"))
    assert rec is not None
    rec.state, rec.status_key, rec.attempts = "RUNNING", r.job_status("RUNNING", "near"), 1
    rec.history = [{"attempt": 1, "task_arn": arn, "started_at": tw.clock()}]
    rec.checkpoint = {"c": ""}
    rec.checkpoint = {"c": "c" * (400 * KB - 100 - _item_bytes(rec))}
    tw.table.write(Put(rec))
    out = stages.reruns.on_stop(TaskStop(arn, StopCode.SPOT_INTERRUPTION, "spot", 0))
    job = tw.job("near")
    assert job is not None and job.state == JobState.FAILED, out
    assert "400 KB" in (job.reason or "")
    stages.tick.tick()


def test_a_cancel_request_beyond_the_bundles_budget_is_refused_with_the_reason() -> None:
    store = Store(MemoryTable())
    launched(store, [Job("a", "k", {})])
    ids = [f"j{n}" for n in range(sizes.MAX_CANCEL_REQUESTS)]
    rec = store.table.get(r.bundle_key("b1"))
    assert rec is not None
    rec.cancel_jobs = ids
    store.table.write(Put(rec))
    with pytest.raises(LongjobsError, match="cancel requests"):
        store.cancel("a")
    after = store.table.get(r.bundle_key("b1"))
    assert after is not None and after.cancel_jobs == ids


def _worst_case_job() -> Record:
    """The largest job item longjobs can write: every part at its budget, every other field at
    its longest."""
    def blob(key: str, budget: int) -> dict[str, str]:
        return {key: "x" * (budget - len(json.dumps({key: ""}, separators=(",", ":"))))}

    arn = ("arn:aws:ecs:ap-southeast-4:000000000000:task/" + "c" * 255 + "/" + "0" * 32)
    taskdef = "arn:aws:ecs:ap-southeast-4:000000000000:task-definition/" + "f" * 255 + ":99999"
    try:
        raise RuntimeError("\U0001f4a5" * 300_000)  # 4 bytes each in UTF-8
    except RuntimeError as exc:
        error = error_of(exc)
    history = [{"attempt": n, "task_arn": arn, "task_definition": taskdef,
                "started_at": 1.7e9 + n / 3, "ended_at": 1.7e9 + n / 7, "outcome": "FAILED",
                "reason": "\u00e9" * 10_000, "stopped_at": 1.7e9 + n / 11,
                "stop_code": "EssentialContainerExited", "exit_code": 137,
                "stop_class": "application"} for n in range(500)]
    job = Job(job_id="J" * 128, kind="K" * 128, payload=blob("p", sizes.MAX_PAYLOAD_BYTES),
              state=JobState.FAILED, estimated_seconds=1e7 / 3,
              # the longest tenant, named in its bundle's id too (a follow-on's, of a big batch)
              tenant="t" * tenants.MAX_TENANT,
              bundle_id=tenants.bundle_id("t" * tenants.MAX_TENANT, "b" * 32) + "-99999",
              max_attempts=100, timeout_seconds=1e7 / 7, attempts=100, infra_attempts=99999,
              created_at=1.7e9 / 3, enqueued_at=1.7e9 / 7, message_id="m" * 100,
              reason=sizes.clip_text("\u00e9" * 1_000_000, sizes.MAX_REASON_BYTES),
              result=blob("r", sizes.MAX_RESULT_BYTES), error=sizes.bound_error(error),
              history=sizes.bound_history(history),
              checkpoint=blob("c", sizes.MAX_CHECKPOINT_BYTES), priority=Priority.HIGH,
              not_before=1.7e9 / 9, resources=Resources(cpu=16384, memory=122880,
                                                         ephemeral_storage=200),
              bulk_ids=["\u00e9" * (sizes.MAX_BULK_ID_BYTES // 2)] * sizes.MAX_BULK_MARKS,
              # the most labels, each a key of the most characters and a value of 4-byte ones
              labels={f"{n:02d}".ljust(labels.MAX_KEY, "k"): "\U0001f4a5" * labels.MAX_VALUE
                      for n in range(labels.MAX_LABELS)},
              # the most rate limits' keys, each of the most characters and tokens
              uses={f"{n}".ljust(rate_limits.MAX_KEY, "u"): rate_limits.MAX_AMOUNT
                    for n in range(rate_limits.MAX_USES)})
    rec = r.job_record(job)
    rec.settled_by, rec.expires_at, rec.updated_at = arn, 1.7e9 / 11, 1.7e9 / 13
    rec.progress = worst_report(job.job_id)  # kept with its last checkpoint
    return rec


def test_the_largest_job_item_fits_dynamodbs_item_limit() -> None:
    assert sizes.JOB_ITEM_BUDGET < sizes.ITEM_BYTES == MAX_ITEM_BYTES
    rec = _worst_case_job()
    assert sizes.json_bytes(rec.error) <= sizes.MAX_ERROR_BYTES
    assert sizes.json_bytes(rec.history) <= sizes.MAX_HISTORY_BYTES
    assert len((rec.reason or "").encode()) <= sizes.MAX_REASON_BYTES
    marks = _item_bytes(rec) - _item_bytes(replace(rec, bulk_ids=None))
    assert marks <= sizes.MAX_BULK_MARKS_BYTES
    assert sizes.json_bytes(rec.progress) + len("progress") <= sizes.MAX_PROGRESS_BYTES
    assert message.JobMessage.model_validate({
        "schema_version": 1, "job_id": "j", "kind": "k", "payload": {},
        "labels": rec.labels, "uses": rec.uses}).uses == rec.uses  # the schema takes them
    assert sizes.json_bytes(rec.labels) + len("labels") <= sizes.MAX_LABELS_BYTES
    others = _item_bytes(rec) - sum(sizes.json_bytes(getattr(rec, a)) for a in (
        "payload", "checkpoint", "result", "error", "history", "progress", "labels")) \
        - len(rec.reason or "") - marks
    assert others <= sizes.OTHER_JOB_BYTES
    assert _item_bytes(rec) <= sizes.JOB_ITEM_BUDGET < MAX_ITEM_BYTES
    MemoryTable().write(Put(rec))  # the twin, which refuses what DynamoDB refuses, takes it


def test_the_table_twin_still_refuses_an_item_over_400_kb() -> None:
    rec = _worst_case_job()
    rec.checkpoint = {"c": rec.checkpoint["c"] + "c" * (MAX_ITEM_BYTES - _item_bytes(rec))}
    assert _item_bytes(rec) == MAX_ITEM_BYTES
    MemoryTable().write(Put(rec))  # exactly at the limit: taken
    rec.checkpoint = {"c": rec.checkpoint["c"] + "c"}
    with pytest.raises(InvalidTransaction, match="maximum allowed size"):
        MemoryTable().write(Put(rec))


def test_clipped_texts_keep_to_their_budget_and_say_so() -> None:

    for text in ["a" * 10_000, "\u00e9" * 10_000, "\U0001f4a5" * 10_000, "\ud800" * 10_000,
                 '"\\\n' * 10_000]:
        clipped = sizes.clip_text(text, 2048)
        assert len(clipped.encode()) <= 2048 and "[truncated: " in clipped
        for end in (False, True):
            inner = sizes.clip_json_text(text, 2048, keep_end=end)
            assert sizes.json_bytes(inner) - 2 <= 2048 and "[truncated: " in inner
    assert sizes.clip_text("short", 10) == "short"
    assert sizes.clip_json_text("short", 10) == "short"
    # A second bound keeps the first entry and the count of all that were left out.
    history = [{"attempt": n} for n in range(30)]
    once = sizes.bound_history(history)
    twice = sizes.bound_history([*once, {"attempt": 30}])
    assert len(twice) == sizes.HISTORY_ENTRIES and twice[0] == {"attempt": 0}
    assert twice[1]["omitted"] == 30 + 1 - (sizes.HISTORY_ENTRIES - 1)
    assert twice[-1] == {"attempt": 30}


def test_a_checkpoint_over_its_budget_is_refused_by_the_context_and_the_store() -> None:
    saved: list[Any] = []
    ctx = JobContext("j", 1, None, saved.append, None)
    ctx.checkpoint({"c": "x" * 100})
    with pytest.raises(TooLarge, match="checkpoint too large"):
        ctx.checkpoint({"c": "x" * sizes.MAX_CHECKPOINT_BYTES})
    assert saved == [{"c": "x" * 100}] and ctx.last_checkpoint == {"c": "x" * 100}
    store = Store(MemoryTable())
    with pytest.raises(TooLarge):
        store.save_checkpoint(Fence("b1", 1, ARN), "j", {"c": "x" * sizes.MAX_CHECKPOINT_BYTES})
