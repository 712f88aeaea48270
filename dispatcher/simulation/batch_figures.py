"""What a run of the batch model is judged and measured by, read from its table and ledger:
its jobs' ids, when each was admitted, and a stream's time from each job's sending to its
first start."""

from __future__ import annotations

from collections.abc import Iterator

from dispatcher.simulation.batch_shape import T0, Shape
from dispatcher.simulation.deep_queue import DeepQueue
from dispatcher.simulation.run_ledger import RunLedger
from dispatcher.store import codec as r
from dispatcher.testing.memory_table import MemoryTable


def job_ids(shape: Shape) -> list[str]:
    """The batch's job ids, as ``BatchModel.jobs`` names them (a stream's: as its messages
    do, ``batch_shape.synthetic_body``)."""
    mark = "b" if shape.rate else "j"
    return [f"{mark}{i:07d}" for i in range(shape.jobs)]


def admission_times(table: MemoryTable, urgent_id: str | None) -> Iterator[float]:
    """When each of the batch's jobs was admitted, from T0 (the urgent one left out)."""
    for pk, rec in table.snapshot().items():
        if pk.startswith("JOB#") and rec.created_at is not None \
                and rec.pk != r.job_key(urgent_id or ""):
            yield float(rec.created_at) - T0


def start_latencies(shape: Shape, queue: DeepQueue, ledger: RunLedger) -> list[float]:
    """A stream's: each job's first start after its sending, in seconds (a job that never
    started is left out: the verdict counts it lost)."""
    out = []
    for i, job_id in enumerate(job_ids(shape)):
        runs = ledger.runs.get(job_id)
        if runs:
            out.append(min(run.start for run in runs) - queue.sent_at(i))
    return out
