"""A cheaper clock for moto's SQS, the same time at a hundredth of the cost.

moto (5.2) computes a queue's whole attribute set, ``ApproximateNumberOfMessages`` and the
other counts included, on every send (to read one flag) and on every message a receive
returns (to read the retention period); each count walks every message of the queue and asks
each whether it is visible and whether it is delayed, and each question reads the clock
through ``moto.core.utils.unix_time``, which builds two naive ``datetime`` objects and
subtracts them (~14 µs). With 500 messages waiting, 93% of the time of sending, receiving and
deleting them went to that clock (36 s, profiled; 8.6 s with this patch).

``time.time()`` is the same quantity (seconds since the epoch) read directly, so the queue
behaves the same: visibility timeouts, delays, retention and counts are unchanged. The patch
replaces only the two names ``moto.sqs.models`` imported, only for the no-argument call
(with a ``datetime`` it defers to moto), so no other service's clock is touched.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable

__all__ = ["patch_sqs_clock"]


def patch_sqs_clock() -> bool:
    """Give moto's SQS models the direct clock (idempotent); return whether it is installed.

    A moto whose SQS models no longer import ``unix_time`` by that name keeps its own clock.
    """
    from moto.sqs import models

    moto_unix_time: Callable[[datetime.datetime | None], float] | None = getattr(
        models, "unix_time", None)
    if moto_unix_time is None or not hasattr(models, "unix_time_millis"):
        return False
    if getattr(moto_unix_time, "direct_clock", False):
        return True

    def unix_time(dt: datetime.datetime | None = None) -> float:
        return time.time() if dt is None else moto_unix_time(dt)

    def unix_time_millis(dt: datetime.datetime | None = None) -> float:
        return unix_time(dt) * 1000.0

    unix_time.direct_clock = True  # type: ignore[attr-defined]
    setattr(models, "unix_time", unix_time)  # noqa: B010 - a module attribute mypy can't see
    setattr(models, "unix_time_millis", unix_time_millis)  # noqa: B010
    return True
