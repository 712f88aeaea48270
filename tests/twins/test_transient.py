"""A table write that fails for a moment (throttling, a 5xx, a transaction conflict) costs a
retry within the tick, not the hold and a receive; what the tick still gives up on comes back
at once, and the tick says why."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import pytest
from botocore.stub import ANY, Stubber

from dispatcher.aws.dynamodb.dynamo_table import DynamoTable
from dispatcher.domain.bundles import BundleState
from dispatcher.domain.errors import ConflictError
from dispatcher.ports.table import (
    Absent,
    Add,
    Delete,
    Op,
    Put,
    Record,
    TableUnavailable,
    TransactionCancelled,
    Update,
    transient,
)
from dispatcher.store import Fence, Store
from dispatcher.store.base import TableRetry
from dispatcher.store.runner import RUNNER_PATIENCE
from dispatcher.testing.memory_table import MemoryTable
from tests.twins import Twins

TRIES = 5


def _conflict(ops: list[Op]) -> Exception:
    return TransactionCancelled(["TransactionConflict"] + [None] * (len(ops) - 1))


def _server_error(ops: list[Op]) -> Exception:
    return TableUnavailable("TransactWriteItems", "InternalServerError",
                            "Internal server error", status=500)


def _throttled(ops: list[Op]) -> Exception:
    return TableUnavailable("TransactWriteItems", "ProvisionedThroughputExceededException",
                            "The level of configured provisioned throughput for the table was "
                            "exceeded", status=400)


def _refused(ops: list[Op]) -> Exception:
    return TableUnavailable("TransactWriteItems", "AccessDeniedException", "not allowed",
                            status=400, retryable=False)


ERRORS = pytest.mark.parametrize("error", [_conflict, _server_error, _throttled],
                                 ids=["TransactionConflict", "HTTP 500", "throttled"])


class Flaky(MemoryTable):
    """Fails the next ``failures`` transactions with ``error``. ``lost``: after writing them,
    as when the response is lost on the way back; ``tokens`` False: as an endpoint that
    ignores ClientRequestToken (moto)."""

    def __init__(self, error: Callable[[list[Op]], Exception] = _conflict, failures: int = 0,
                 *, lost: bool = False, tokens: bool = True) -> None:
        super().__init__()
        self.error, self.failures, self.lost, self.tokens = error, failures, lost, tokens
        self.failed = 0

    def _fail(self, ops: list[Op]) -> None:
        if self.failures:
            self.failures -= 1
            self.failed += 1
            raise self.error(ops)

    def _transact(self, ops: list[Op]) -> None:
        if not self.lost:
            self._fail(ops)
        super()._transact(ops)

    def _transact_once(self, ops: list[Op], token: str) -> None:
        if self.tokens:
            super()._transact_once(ops, token)
        else:
            self._transact(ops)
        if self.lost:
            self._fail(ops)


def _world(table: Flaky) -> Twins:
    twins = Twins()
    twins.table = table
    twins.store = Store(table, clock=twins.clock)
    return twins


def _submit(twins: Twins, n: int = 3) -> list[str]:
    return twins.client().submit_many([{"kind": "k", "payload": {}, "job_id": f"j{i}",
                                        "estimated_seconds": 1} for i in range(n)])


@ERRORS
def test_a_transient_failure_is_retried_and_the_bundle_launches_in_the_same_tick(
        error: Callable[[list[Op]], Exception]) -> None:
    table = Flaky(error, failures=2)
    twins = _world(table)
    ids = _submit(twins)
    decision = twins.stages(LONGJOBS_MAX_RUNNING_TASKS="1").tick.tick()
    assert table.failed == 2
    assert decision.intake.record_failures == 0
    assert sorted(j.job_id for j in twins.jobs()) == sorted(ids)
    assert twins.queue_counts() == (0, 0)  # recorded, then deleted
    assert decision.launch.bundles_launched == 1
    assert [b.state for b in twins.bundles()] == [BundleState.LAUNCHED]
    assert len(twins.task_arns()) == 1


@ERRORS
def test_a_failure_that_persists_gives_the_messages_back_at_once_and_says_why(
        error: Callable[[list[Op]], Exception], caplog: pytest.LogCaptureFixture) -> None:
    table = Flaky(error, failures=1000)
    twins = _world(table)
    _submit(twins)
    with caplog.at_level(logging.ERROR):
        decision = twins.stages(LONGJOBS_MAX_RUNNING_TASKS="1").tick.tick()
    # The recording retried, then given up; the summary and the lease's release, one
    # transaction tried once, then written apart.
    assert table.failed == TRIES + 1
    assert twins.jobs() == [] and twins.task_arns() == []
    # Visible again now, not after LONGJOBS_HOLD_SECONDS (the clock has not moved).
    assert twins.queue_counts() == (3, 0)
    assert decision.intake.record_failures == 1 and decision.intake.released == 3
    why = str(error(_ops()))  # the code and the per-item reasons, not pynamodb's words
    assert any(why in e for e in decision.intake.record_errors)
    logged = [str(getattr(rec, "error", "")) for rec in caplog.records]
    assert any(why in e for e in logged)
    # The next tick, with the table well again, records and launches them.
    table.failures = 0
    again = twins.stages(LONGJOBS_MAX_RUNNING_TASKS="1").tick.tick()
    assert again.intake.admitted == 3 and again.launch.bundles_launched == 1
    assert twins.queue_counts() == (0, 0)


def test_a_failure_that_cannot_pass_is_not_tried_again() -> None:
    table = Flaky(_refused, failures=1000)
    twins = _world(table)
    _submit(twins)
    decision = twins.stages(LONGJOBS_MAX_RUNNING_TASKS="1").tick.tick()
    assert table.failed == 2  # the recording once, the summary with the lease's release once
    assert twins.queue_counts() == (3, 0)
    assert any("AccessDeniedException" in e for e in decision.intake.record_errors)


def test_a_lost_response_is_replayed_by_its_token_and_launched_in_the_same_tick() -> None:
    """The recording committed but its answer was a 500: the retry carries the same
    ClientRequestToken, so the table answers success without writing again."""
    table = Flaky(_server_error, failures=1, lost=True)
    twins = _world(table)
    ids = _submit(twins)
    decision = twins.stages(LONGJOBS_MAX_RUNNING_TASKS="1").tick.tick()
    assert table.failed == 1
    assert (decision.intake.admitted, decision.intake.duplicates) == (3, 0)
    assert decision.launch.bundles_launched == 1 and twins.queue_counts() == (0, 0)
    assert [sorted(b.job_ids) for b in twins.bundles()] == [sorted(ids)]


def test_without_a_token_a_lost_response_still_records_each_job_once() -> None:
    """An endpoint that ignores the token (moto): the retry finds the bundle and its jobs
    there (their ``Absent()`` conditions fail), takes them for duplicates and deletes the
    messages; the bundle, PENDING in the table, launches with the next tick's due bundles."""
    table = Flaky(_server_error, failures=1, lost=True, tokens=False)
    twins = _world(table)
    ids = _submit(twins)
    stages = twins.stages(LONGJOBS_MAX_RUNNING_TASKS="1")
    decision = stages.tick.tick()
    assert decision.intake.duplicates == 3 and twins.queue_counts() == (0, 0)
    assert [sorted(b.job_ids) for b in twins.bundles()] == [sorted(ids)]
    assert stages.tick.tick().launch.bundles_launched == 1
    assert [b.state for b in twins.bundles()] == [BundleState.LAUNCHED]


class Scripted(MemoryTable):
    """Each transaction plays the next step: ``"lost"`` commits, then answers a 500;
    ``"conflict"`` is cancelled, writing nothing; past the script, plain success."""

    def __init__(self, script: list[str]) -> None:
        super().__init__()
        self.script = list(script)
        self.tokens_seen: list[str] = []

    def _transact_once(self, ops: list[Op], token: str) -> None:
        self.tokens_seen.append(token)
        step = self.script.pop(0) if self.script else "ok"
        if step == "conflict":
            raise _conflict(ops)
        super()._transact_once(ops, token)
        if step == "lost":
            raise _server_error(ops)


@pytest.mark.parametrize("script", [["lost", "conflict"], ["lost", "conflict", "conflict"],
                                    ["conflict", "lost", "conflict"]])
def test_after_a_try_that_may_have_committed_every_retry_keeps_its_token(
        script: list[str]) -> None:
    """A retry after an ambiguous failure and then a cancellation still replays the first
    try's commit: an unconditioned ``Add`` is applied once, not twice."""
    table = Scripted(script)
    store = Store(table, clock=lambda: 1000.0)
    store._transact_retrying([Update("COUNTER#c", [Add("attempts", 1)])])
    record = table.get("COUNTER#c")
    assert record is not None and record.attempts == 1
    first_ambiguous = script.index("lost")
    # Tries before the ambiguous one were cancelled outright: they may take a new token.
    assert len(set(table.tokens_seen[first_ambiguous:])) == 1


# -- the DynamoDB adapter says what DynamoDB said -------------------------------------------------
@pytest.fixture
def dynamo(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[DynamoTable, Stubber]]:
    """The adapter on a stubbed botocore client: each stubbed answer is the one response its
    call gets (botocore's retries are not involved)."""
    for name, value in {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    table = DynamoTable("longjobs-jobs", "us-east-1")
    with Stubber(table._conn.client) as stub:
        yield table, stub


def _ops() -> list[Op]:
    return [Put(Record("JOB#a", state="PENDING"), Absent()),
            Put(Record("JOB#b", state="PENDING"), Absent())]


@pytest.mark.parametrize(("code", "status", "retryable"), [
    ("InternalServerError", 500, True),
    ("ServiceUnavailable", 503, True),
    ("ProvisionedThroughputExceededException", 400, True),
    ("ThrottlingException", 400, True),
    ("RequestLimitExceeded", 400, True),
    ("TransactionInProgressException", 400, True),
    ("AccessDeniedException", 400, False),
])
def test_the_adapter_turns_a_failed_transaction_into_a_port_error_with_its_cause(
        dynamo: tuple[DynamoTable, Stubber], code: str, status: int, retryable: bool) -> None:
    table, stub = dynamo
    stub.add_client_error("transact_write_items", service_error_code=code,
                          service_message="it went wrong", http_status_code=status)
    with pytest.raises(TableUnavailable) as raised:
        table.transact(_ops())
    err = raised.value
    assert (err.operation, err.code, err.status, err.retryable) == (
        "TransactWriteItems", code, status, retryable)
    assert transient(err) is retryable
    assert code in str(err) and "it went wrong" in str(err)


def test_the_adapter_keeps_each_items_cancellation_reason(
        dynamo: tuple[DynamoTable, Stubber]) -> None:
    table, stub = dynamo
    stub.add_client_error(
        "transact_write_items", service_error_code="TransactionCanceledException",
        service_message="Transaction cancelled", http_status_code=400,
        modeled_fields={"CancellationReasons": [{"Code": "None"},
                                                {"Code": "TransactionConflict"}]})
    with pytest.raises(TransactionCancelled) as raised:
        table.transact(_ops())
    assert raised.value.reasons == [None, "TransactionConflict"]
    assert transient(raised.value) and "#1 TransactionConflict" in str(raised.value)


def test_the_adapter_sends_the_token_as_client_request_token(
        dynamo: tuple[DynamoTable, Stubber]) -> None:
    table, stub = dynamo
    stub.add_response("transact_write_items", {},
                      expected_params={"ClientRequestToken": "t-1", "TransactItems": ANY,
                                       "ReturnConsumedCapacity": ANY})
    table.transact(_ops(), token="t-1")
    stub.assert_no_pending_responses()


def test_a_single_write_refused_by_throttling_is_a_port_error_too(
        dynamo: tuple[DynamoTable, Stubber]) -> None:
    table, _ = dynamo
    with Stubber(table.model._get_connection().connection.client) as stub:  # the model's own
        stub.add_client_error("put_item",
                              service_error_code="ProvisionedThroughputExceededException",
                              service_message="slow down", http_status_code=400)
        with pytest.raises(TableUnavailable) as raised:
            table.write(Put(Record("JOB#a", state="PENDING")))
    assert (raised.value.operation, raised.value.code, raised.value.retryable) == (
        "PutItem", "ProvisionedThroughputExceededException", True)


class RefusesBundle(MemoryTable):
    """Refuses every transaction that touches one bundle's item (a denied permission, a table
    that cannot take that write for as long as the test lasts)."""

    def __init__(self) -> None:
        super().__init__()
        self.bundle_key: str | None = None

    def _transact(self, ops: list[Op]) -> None:
        if self.bundle_key and any(getattr(op, "pk", None) == self.bundle_key for op in ops):
            raise _refused(ops)
        super()._transact(ops)


def test_a_stopped_task_whose_settle_the_table_refuses_does_not_fail_the_tick() -> None:
    """Reconciliation finds a task stopped with its event lost, and the table refuses its
    settle: the tick logs it and goes on (the next tick looks again), so other jobs are still
    admitted and launched."""
    table = RefusesBundle()
    twins = _world(table)  # type: ignore[arg-type]
    stages = twins.stages(LONGJOBS_MAX_RUNNING_TASKS="5")
    twins.client().submit("k", {}, job_id="first", estimated_seconds=1)
    stages.tick.tick()
    (bundle,) = twins.bundles()
    assert bundle.task_arn is not None
    twins.launcher.stop_task(bundle.task_arn, "EssentialContainerExited", "exited", 137)
    table.bundle_key = f"BUNDLE#{bundle.bundle_id}"
    twins.clock.advance(3600)  # past the heartbeat reconciliation waits for
    twins.client().submit("k", {}, job_id="second", estimated_seconds=1)
    decision = stages.tick.tick()
    assert decision.reconcile.stopped_found == 1 and decision.reconcile.outcomes == []
    second = twins.job("second")
    assert second is not None and second.bundle_id
    launched = twins.bundle(second.bundle_id)
    assert launched is not None and launched.state == BundleState.LAUNCHED
    table.bundle_key = None  # the table takes it again: the next tick settles the stop
    decision = stages.tick.tick()
    assert [o.bundle_id for o in decision.reconcile.outcomes] == [bundle.bundle_id]


class Refuses(MemoryTable):
    """Refuses the next ``writes`` single writes and ``reads`` BatchGetItem reads as
    throttled past botocore's attempts."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0
        self.reads = 0
        self.lost = 0

    def write(self, op: Put | Update | Delete) -> Record | None:
        if self.writes:
            self.writes -= 1
            raise _throttled([])
        done = super().write(op)
        if self.lost:  # written, but its answer lost on the way back (a 5xx, a cut connection)
            self.lost -= 1
            raise _server_error([])
        return done

    def get(self, pk: str) -> Record | None:
        if self.reads and pk.startswith("TASK#"):  # a task's pointer: its runner's first read
            self.reads -= 1
            raise _throttled([])
        return super().get(pk)

    def get_many(self, pks: list[str]) -> list[Record]:
        if self.reads:
            self.reads -= 1
            raise _throttled([])
        return super().get_many(pks)


@pytest.mark.parametrize("refused", [3, 1000])
def test_a_runners_claim_and_reads_the_table_refuses_for_a_while_are_tried_again(
        refused: int) -> None:
    """A runner's claim (its task's pointer read, then its write), and its reads of its
    bundle's jobs, throttled past botocore's own attempts are tried again for up to half a
    minute (the runner has nothing else to do; giving up costs its task and a rerun);
    refused throughout, they fail after RUNNER_PATIENCE's tries."""
    table = Refuses()
    slept: list[float] = []
    twins = Twins()
    twins.table = table
    twins.store = Store(table, clock=twins.clock, table_retry=TableRetry(sleep=slept.append))
    bundle_id, arn = twins.launched("j1")
    launched = twins.bundle(bundle_id)
    assert launched is not None
    table.writes = refused
    fence = Fence(bundle_id, launched.attempt, arn)
    if refused >= RUNNER_PATIENCE.attempts:
        with pytest.raises(TableUnavailable):
            twins.store.claim(fence)
        assert len(slept) == RUNNER_PATIENCE.attempts - 1 and sum(slept) <= 1 + 2 + 4 + 8 + 15
        return
    table.reads = refused  # its pointer, read first
    claim = twins.store.claim_assigned(arn)  # the pointer's read, then the claim's write
    assert claim is not None and claim.bundle.state == BundleState.RUNNING
    assert len(slept) == 2 * refused
    table.reads = refused
    (page,) = list(twins.store.bundle_jobs(claim.bundle))
    assert [j.job_id for j in page] == ["j1"] and len(slept) == 3 * refused


@pytest.mark.parametrize("assigned", [True, False], ids=["claim_assigned", "claim"])
def test_a_claim_whose_answer_was_lost_is_the_runners_when_its_retry_finds_it(
        assigned: bool) -> None:
    """The claim committed but its answer was lost (a 5xx): the retry's condition (LAUNCHED)
    is refused by the claim's own write. The bundle, read back RUNNING on this task and
    attempt, is this runner's claim: not a lost claim, which would end the task and rerun its
    bundle."""
    table = Refuses()
    twins = Twins()
    twins.table = table
    twins.store = Store(table, clock=twins.clock, table_retry=TableRetry(sleep=lambda s: None))
    bundle_id, arn = twins.launched("j1")
    launched = twins.bundle(bundle_id)
    assert launched is not None
    table.lost = 1
    claim = twins.store.claim_assigned(arn) if assigned \
        else twins.store.claim(Fence(bundle_id, launched.attempt, arn))
    assert claim is not None and claim.bundle.bundle_id == bundle_id
    assert claim.bundle.state == BundleState.RUNNING and claim.bundle.job_ids == ["j1"]
    # Another attempt's task finds it RUNNING but not its own: refused as before.
    other = Fence(bundle_id, launched.attempt, "arn:aws:ecs:us-east-1:1:task/c/other")
    with pytest.raises(ConflictError):
        twins.store.claim(other)
