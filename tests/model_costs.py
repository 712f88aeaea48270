"""The system model's check of task bills: a task's jobs add up to the task.

Every task whose stop settled its bill (``cost`` and ``job_seconds`` on its pointer) split it
by the job-seconds it counted; the jobs' histories, read back, must hold the same seconds on
that task, so the jobs' shares (seconds x the task's rate) add up to its bill. Checked on the
table as it is after every step: a runner that counted a run it did not write, or left one
out, a stop that counted a bundle's runs twice, or a rerun that rewrote a run's seconds after
the task was settled, breaks it (tests/twins/test_system_model_bills.py shows it able to fail).

Where the table cannot tell (a job whose history dropped old attempts for its size, or any job
that expired: its runs are gone with it), only "no more than the bill's" is checked.

Two more: the usage counters (``stats --by``) hold each settled bill once, and no more failed
jobs than runs ended so (``usage_counters``),
and a label lists every recorded job that carries it and no other (``label_lists``).
"""

from __future__ import annotations

from dispatcher.domain import costs
from dispatcher.store import Store
from tests.model_checks import LABELS, View

# Seconds the two counts may differ by: a float sum in another order.
SLACK = 1e-3


def unbalanced(view: View, *, jobs_expired: bool) -> list[str]:
    settled = {pk.removeprefix("TASK#"): float(rec.job_seconds or 0)
               for pk, rec in view.items.items()
               if pk.startswith("TASK#") and rec.cost is not None}
    if not settled:
        return []
    found = dict.fromkeys(settled, 0.0)
    partial = jobs_expired
    for pk, rec in view.items.items():
        if not pk.startswith("JOB#") or not isinstance(rec.history, list):
            continue
        for entry in rec.history:
            if not isinstance(entry, dict):
                continue
            partial |= "omitted" in entry
            arn = entry.get("task_arn")
            if arn in found:
                found[arn] += costs.entry_seconds(entry)
    out = []
    for arn, counted in settled.items():
        ran = found[arn]
        if ran > counted + SLACK or (not partial and abs(ran - counted) > SLACK):
            out.append(f"task {arn.rsplit('/', 1)[-1]} was billed as {counted:.3f} job-seconds "
                       f"but its jobs' histories hold {ran:.3f} s on it: their shares do not "
                       f"add up to its bill")
    return out


def miscounted(view: View, ttl_ran: bool) -> list[str]:
    """The kind counters' dollars against the settled bills' (until TTL deletes either: they
    expire apart): each bill added once, to one kind or another."""
    if ttl_ran:
        return []
    billed = sum(float(rec.cost or 0) for pk, rec in view.items.items()
                 if pk.startswith("TASK#") and rec.cost is not None)
    counted = sum(float(rec.cost or 0) for pk, rec in view.items.items()
                  if pk.startswith("USAGE#kind:"))
    if abs(billed - counted) > 1e-6 + 1e-9 * billed:
        return [f"the kind counters hold ${counted:.9f} where the settled tasks' bills come "
                f"to ${billed:.9f}: a bill counted twice, or not at all"]
    return _failures_miscounted(view)


def _failures_miscounted(view: View) -> list[str]:
    """The kind counters' failed jobs (the console's chart): never more than the jobs they
    count, and in all never more than the runs that ended a job FAILED (a history entry whose
    outcome says so, or a FAILED job's last run, which a stop's rerun stage ends without
    one); unbounded once a history dropped old entries for its size."""
    counters = [rec for pk, rec in view.items.items() if pk.startswith("USAGE#kind:")]
    over = [rec.pk for rec in counters if int(rec.failed or 0) > int(rec.jobs or 0)]
    if over:
        return [f"the counters {over[:3]} count more failed jobs than jobs"]
    runs = 0
    for pk, rec in view.items.items():
        if not pk.startswith("JOB#") or not isinstance(rec.history, list):
            continue
        entries = [e for e in rec.history if isinstance(e, dict)]
        if any("omitted" in e for e in entries):
            return []
        runs += sum(1 for e in entries if e.get("outcome") == "FAILED")
        if rec.state == "FAILED" and entries and entries[-1].get("outcome") != "FAILED":
            runs += 1
    counted = sum(int(rec.failed or 0) for rec in counters)
    if counted > runs:
        return [f"the kind counters count {counted} failed jobs where only {runs} runs ended a "
                "job FAILED: a run that succeeded, or was rerun, counted as failed"]
    return []


def unlisted(view: View, store: Store, now: float, retention_days: float) -> list[str]:
    """Each label of the model lists exactly the recorded jobs that carry it (but a job due
    more than twice the retention ago: its label entries may have expired before it ended,
    as dispatcher/store/label_index.py says)."""
    out = []
    kept = 2 * retention_days * 86_400 if retention_days else float("inf")
    recent = {rec.job_id for pk, rec in view.items.items() if pk.startswith("JOB#")
              and max(rec.created_at or 0, rec.not_before or 0) + kept > now}
    for labels in LABELS:
        for key, value in labels.items():
            carried = {rec.job_id for pk, rec in view.items.items()
                       if pk.startswith("JOB#") and isinstance(rec.labels, dict)
                       and rec.labels.get(key) == value} & recent
            listed = {rec.job_id for rec in store.newest_labelled(key, value, limit=100_000)
                      } & recent
            if carried != listed:
                out.append(f"label {key}={value} lists {sorted(listed - carried)[:5]} that do "
                           f"not carry it and misses {sorted(carried - listed)[:5]}")
    return out
