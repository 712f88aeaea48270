"""The whole-system model's checks of the kind limits (``LONGJOBS_KIND_LIMITS``): the handlers
of a limited kind running at once, in all tasks, never exceed its limit; and of the tenants'
caps (:class:`TenantCapWatch`).

A changed limit applies to the bundles launched from then on; a running bundle keeps the slots
its launch decided. Each launch counts the slots of the kind's active bundles against the limit
of then, so the runs of the bundles active now are bounded by the limit in force when the last
of them launched, at most the largest limit any of them launched under. If one of them
launched while the kind had no limit (its slots counted nowhere), there is no bound. Runs of a
bundle of several kinds are not counted: such a bundle is recorded only while none of its kinds
has a limit, and cannot say later which of its jobs a limit is for (docs/design.md).

The model's settings change only between steps, and the check runs after every step, so the
limit in force at the step where a launch is first seen is the one it was decided with."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from dispatcher.domain.bundles import ACTIVE_BUNDLE_STATES
from dispatcher.domain.tenant_shares import TenantPolicy
from dispatcher.settings import kind_limits
from dispatcher.store import codec
from tests.model_checks import View
from tests.model_runner import SimTask


class KindLimitWatch:
    def __init__(self) -> None:
        # Each launch seen (bundle id, attempt): its kind's limit then (None: none).
        self._launched_under: dict[tuple[str, int], int | None] = {}

    def check(self, view: View, tasks: Iterable[SimTask], limits: Mapping[str, int]
              ) -> list[str]:
        for b in view.bundles():
            if b.kind is not None and b.state in ACTIVE_BUNDLE_STATES:
                self._launched_under.setdefault((b.bundle_id, b.attempt), limits.get(b.kind))
        live: Counter[str] = Counter()
        under: dict[str, list[int | None]] = {}
        for sim in tasks:
            for job_id in sim.live_runs():
                job = sim.runs[job_id].job
                bundle = view.bundle(job.bundle_id or "")
                if bundle is None or bundle.kind != job.kind:
                    continue  # a bundle of several kinds
                live[job.kind] += 1
                under.setdefault(job.kind, []).append(
                    self._launched_under.get((sim.key[0], sim.key[1])))
        for b in view.bundles():
            if b.kind is not None and b.kind in live and b.state in ACTIVE_BUNDLE_STATES:
                under[b.kind].append(self._launched_under.get((b.bundle_id, b.attempt)))
        out = []
        for kind, n in sorted(live.items()):
            if any(limit is None for limit in under[kind]):
                continue
            bound = max(limit for limit in under[kind] if limit is not None)
            if n > bound:
                out.append(f"{n} handlers of kind {kind} run at once, over the limit {bound} "
                           "their bundles launched under")
        return out


def parse_limits(text: str) -> dict[str, int]:
    """``LONGJOBS_KIND_LIMITS`` as the model sets it, read as the settings read it."""
    limits: dict[str, int] = kind_limits(text)
    return limits


class TenantCapWatch:
    """No step that starts a task leaves its tenant past its cap (``longjobs tenants set T
    --max-running N``, as the table holds it after the step): a launch, a relaunch. A take
    (the task goes on with another bundle) starts none; a cap lowered below the tenant's
    tasks holds once enough of them end; a crashed tick's launches that the next tick
    completes were decided under the cap of their tick."""

    def __init__(self) -> None:
        self._before: set[tuple[str, int]] = set()  # active bundles (id, attempt)
        self._tasks: set[str] = set()  # their tasks

    def check(self, view: View, recovered: bool) -> list[str]:
        rec = view.items.get(codec.TENANT_POLICIES_KEY)
        policies = rec.tenants if rec is not None and isinstance(rec.tenants, dict) else {}
        caps = {t: TenantPolicy.from_json(p).max_running for t, p in policies.items()}
        active = [b for b in view.bundles() if b.state in ACTIVE_BUNDLE_STATES]
        now = Counter(b.tenant for b in active if b.tenant is not None)
        started = Counter(b.tenant for b in active
                          if (b.bundle_id, b.attempt) not in self._before
                          and b.task_arn not in self._tasks and b.tenant is not None)
        self._before = {(b.bundle_id, b.attempt) for b in active}
        self._tasks = {b.task_arn for b in active if b.task_arn is not None}
        if recovered:
            return []
        return [f"tenant {t} runs {now[t]} tasks after a step that started {started[t]}, "
                f"over its cap of {cap}" for t, cap in sorted(caps.items())
                if cap is not None and started[t] and now[t] > cap]
