"""Throttled and slow calls in the model of AWS, with the retries our adapters really make.

A call's attempts are drawn one by one (:meth:`CallDraws.attempts`): each costs its modelled
latency times a lognormal factor (``tail_p99``: the p99 of the factor over its median, which is
1), a throttled one is tried again after the adapter's backoff, and a call throttled on every
attempt the adapter makes fails with the error the adapter raises then (the model's wrappers
raise it: :mod:`dispatcher.simulation.aws_model`). Every attempt is counted as a call.

Which calls are throttled, and how each adapter retries them:

- **DynamoDB** (GetItem, PutItem, UpdateItem, DeleteItem, Query, BatchGetItem): botocore's
  standard retry mode with 4 attempts in all (:func:`dispatcher.aws.clients.endpoint_client`),
  waiting ``random() * 2 ** (n - 1)`` seconds (at most 20) before retry ``n``
  (https://boto3.amazonaws.com/v1/documentation/api/latest/guide/retries.html, "Standard retry
  mode"); then ``ProvisionedThroughputExceededException``, the port's ``TableUnavailable``.
- **DynamoDB TransactWriteItems**: a throttled transaction is cancelled with the reason
  ``ThrottlingError`` (``TransactionCanceledException``, which botocore does not retry:
  https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html);
  the store tries it again itself (``dispatcher.store.base.TableRetry``).
- **ECS** (RunTask, DescribeTasks, StopTask, DescribeTaskDefinition): the adapter's own 6 tries
  (``dispatcher.aws.ecs.ecs_call``, tenacity's ``wait_random_exponential(0.2, max=5)``:
  uniform up to ``min(5, 0.2 * 2 ** (n - 1))`` seconds before retry ``n``); then a RunTask is
  ``RateExceeded`` and the others ECS's ``ThrottlingException``.
- **SQS**: not throttled. "Standard queues support a nearly unlimited number of API calls per
  second, per API action" (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/
  SQSDeveloperGuide/quotas-queues.html); the latency tails apply to it as to the others.

Throttling comes in bursts (a hot partition, a refilling token bucket): a retry of a
throttled attempt is throttled again with ``throttled_again``, not with the first attempt's
share, so a few calls exhaust their retries and the callers' error paths run.

The draws come from one seeded generator per component; threads of a tick draw in the order
this machine runs them, so two runs under faults may differ in which calls are throttled.
"""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass

# The 99th percentile of the standard normal distribution.
Z99 = 2.3263


def _botocore_standard(rng: random.Random, n: int) -> float:
    return rng.random() * min(2.0 ** (n - 1), 20.0)


def _ecs_tenacity(rng: random.Random, n: int) -> float:
    return rng.uniform(0.0, min(5.0, 0.2 * 2.0 ** (n - 1)))


@dataclass(frozen=True)
class Retries:
    """An adapter's retries of a throttled call: attempts in all, and the wait before retry n."""

    attempts: int
    wait: Callable[[random.Random, int], float]


DYNAMODB = Retries(4, _botocore_standard)
TRANSACTION = Retries(1, _botocore_standard)  # cancelled at once; the store retries
ECS = Retries(6, _ecs_tenacity)
RETRIES: dict[str, Retries] = {
    **{api: DYNAMODB for api in ("GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query",
                                 "BatchGetItem")},
    "TransactWriteItems": TRANSACTION,
    **{api: ECS for api in ("RunTask", "DescribeTasks", "StopTask", "DescribeTaskDefinition")},
}


@dataclass(frozen=True)
class CallFaults:
    throttled: float = 0.0  # share of the throttleable calls whose first attempt is throttled
    throttled_again: float = 0.25  # a throttled attempt's retry is throttled again
    tail_p99: float = 1.0  # p99 / median of each attempt's latency (1: every call as modelled)

    @property
    def any(self) -> bool:
        return self.throttled > 0 or self.tail_p99 > 1


@dataclass(frozen=True)
class Attempts:
    """One call as its adapter made it: the seconds it took (attempts and waits), how many
    attempts, and whether the last one was throttled too (the call failed)."""

    seconds: float
    attempts: int
    throttled_through: bool


class CallDraws:
    """The draws of one component's calls (thread-safe)."""

    def __init__(self, faults: CallFaults, seed: int) -> None:
        self.faults = faults
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._sigma = math.log(faults.tail_p99) / Z99 if faults.tail_p99 > 1 else 0.0
        self.throttled = 0  # attempts throttled
        self.failed = 0  # calls throttled on every attempt

    def backoff(self, api: str, n: int) -> float | None:
        """Attempt ``n`` of ``api`` was throttled (a partition past its limit, which the
        model finds, not draws): the adapter's wait before it tries again, or None if it
        gives up."""
        retries = RETRIES.get(api)
        with self._lock:
            self.throttled += 1
            if retries is None or n >= retries.attempts:
                self.failed += 1
                return None
            return retries.wait(self._rng, n)

    def attempts(self, api: str, latency: float) -> Attempts:
        f, retries = self.faults, RETRIES.get(api)
        with self._lock:
            seconds, n = 0.0, 0
            while True:
                n += 1
                seconds += latency * (math.exp(self._rng.gauss(0.0, self._sigma))
                                      if self._sigma else 1.0)
                share = f.throttled if n == 1 else f.throttled_again
                if retries is None or not f.throttled or self._rng.random() >= share:
                    return Attempts(seconds, n, False)
                self.throttled += 1
                if n >= retries.attempts:
                    self.failed += 1
                    return Attempts(seconds, n, True)
                seconds += retries.wait(self._rng, n)
