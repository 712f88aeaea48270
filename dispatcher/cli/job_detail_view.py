"""What `longjobs jobs show` prints for a person: a job's fields, what it waits for, its
array, its error and traceback, each attempt as a block of its own (and each operator retry as a
boundary), and where its log lines are."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from dispatcher.ops.wording import cost_text, stop_said, task_id, waiting_text, when

if TYPE_CHECKING:
    from dispatcher.ops.job_views import JobDetail


def _array_text(array: dict[str, Any]) -> str:
    if "parent" in array:
        return f"child {array['index']} of {array['parent']}"
    counts = ", ".join(f"{n} {state}" for state, n in array["by_state"].items() if n)
    failed = array["failed_indexes"]
    return (f"{array['size']} children ({array['children']}): {counts or 'none yet'}"
            + (f"; failed indexes {', '.join(map(str, failed[:20]))}"
               + (" …" if len(failed) > 20 else "") if failed else "")
            + (f"; retrying its children: {array['retrying']}" if "retrying" in array else ""))


def render_detail(d: JobDetail, console: Console) -> None:
    """``d`` as `jobs show` prints it (``--json`` prints ``d.to_json()`` instead)."""
    data = d.to_json()
    head = Table(box=None, show_header=False)
    head.add_column(style="bold")
    head.add_column(overflow="fold")
    fields = ["job_id", "state", "kind", "created_at", "updated_at", "reason"]
    if d.summary.state == "REJECTED":
        fields += ["message_id", "body"]
    else:
        fields += ["attempts", "max_attempts", "infra_attempts", "bundle_id", "payload",
                   "result", "checkpoint", "checkpoint_at"]
    for name in fields:
        value = data[name]
        if name in ("payload", "result", "checkpoint"):
            value = d.display(value) if name == "payload" or value is not None else None
        if value is not None:
            head.add_row(name, Text(value if isinstance(value, str) else json.dumps(value)))
    if d.summary.waiting_for is not None:
        head.add_row("waiting for", Text(waiting_text(data["waiting_for"])))
    if d.summary.progress is not None:
        said = d.summary.progress
        running = d.summary.state == "RUNNING"
        head.add_row("progress", Text(said.words(time.time(), eta=running) + (
            "" if running else " (as of its last checkpoint)")))
    if d.summary.tenant:
        head.add_row("tenant", Text(d.summary.tenant))
    if d.labels:
        head.add_row("labels", Text(", ".join(f"{k}={v}" for k, v in sorted(d.labels.items()))))
    if d.uses:
        head.add_row("uses", Text(", ".join(f"{k}={n} tokens" for k, n in sorted(d.uses.items()))))
    if d.cost is not None:
        head.add_row("cost", Text(cost_text(d.cost)))
    if d.dependents:
        more = d.dependents_count - len(d.dependents)
        head.add_row("waited for by", Text(", ".join(d.dependents)
                                           + (f" and {more} more" if more > 0 else "")))
    if d.array is not None:
        head.add_row("array", Text(_array_text(d.array)))
    if d.bulk_ids:  # what `--bulk-id` resumes, and the history's entries name
        head.add_row("bulk actions", Text(", ".join(d.bulk_ids)))
    if d.error:
        head.add_row("error", Text(f"{d.error.get('type', '?')}: {d.error.get('message', '')}"))
    if d.bundle:
        b = d.bundle
        head.add_row("bundle", Text(f"{b['state']} (launch attempt {b['attempt']}) task "
                                    f"{task_id(b['task_arn'])} "
                                    f"{b['task_definition'] or 'no revision yet'}"))
    console.print(head)
    traceback = (d.error or {}).get("traceback")
    if isinstance(traceback, str) and traceback.strip():
        console.print(Text("traceback:", style="bold"))
        console.print(Text(traceback.rstrip("\n")))
    if len(d.state_changes) > 1:
        steps = " -> ".join(f"{c.state} {when(c.to_json()['changed_at'])}" for c in d.state_changes)
        console.print(Text(f"path: {steps}{published(d)}"))  # wrapped at the width
    # One block per attempt, not a wide table: task ids and reasons stay whole in a terminal.
    for a in d.history:
        j = a.to_json()
        if a.retry:
            again = "; attempts count from 1 again" if a.retry.startswith("retried") else ""
            console.print(Text(f"── {a.retry} at {when(j['started_at'])}{again} ──",
                               style="bold"))
            if a.reason:  # a bulk action's reason and selection
                console.print(Text(f"  reason: {a.reason}"))
            continue
        console.print(Text(f"attempt {a.attempt or '?'}: task {task_id(a.task_arn)} on "
                           f"{a.task_definition or '?'}", style="bold"))
        console.print(Text(f"  started {when(j['started_at'])}  stopped "
                           f"{when(j['stopped_at'])}  outcome {a.outcome or '-'}"))
        console.print(Text(f"  {stop_said(a.stop_code, a.exit_code, a.stop_class, a.outcome)}"))
        if a.reason:
            console.print(Text(f"  reason: {a.reason}"))
    if d.logs:
        latest = d.logs[-1]
        if "stream" in latest:
            # Whole on one line at any width: the group and stream are copied, not read.
            console.print(Text(f"log: {latest['group']} {latest['stream']}"), soft_wrap=True)
            if latest.get("console_url"):  # whole on one line, so that it can be copied
                console.print(Text(f"  {latest['console_url']}"), soft_wrap=True)
        else:
            console.print(Text(f"log: unknown ({latest['unknown']})"))
        console.print(Text(f"  `longjobs jobs logs {d.summary.job_id}` prints this job's "
                           "own lines"))


def published(d: JobDetail) -> str:
    """How many state-change events the job's writes published, where that differs from the
    path its record tells (or always, in a word, where it agrees)."""
    if d.sequence is None:
        return ""
    told = len(d.state_changes)
    if d.sequence == told:
        return f" ({told} events)"
    return (f" ({d.sequence} events published; its record tells {told}: its history dropped "
            "old attempts for its size, or it was written before events were counted)")
