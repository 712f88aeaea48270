"""Operators' actions on many jobs and on the job code, in the system model
(tests/twins/test_system_model.py): bulk cancels and retries by a filter (``JobClient.bulk``),
cut short part-way and resumed with their bulk id; deploys of new job code (``longjobs deploy``:
a new task-definition revision, recorded as the deployment) at any moment. With what they must
keep: a bulk action acts on each job at most once across all its runs, and a job it retries
gets a fresh budget as a single retry gives it; a launch runs the revision deployed when it
began, a task keeps its revision to its end, and each attempt a job records names the revision
its task ran."""

from __future__ import annotations

import contextlib
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule

from dispatcher.domain.arrays import Tally
from dispatcher.domain.bundles import BundleState
from dispatcher.domain.errors import LongjobsError
from dispatcher.domain.jobs import TERMINAL_JOB_STATES, JobState
from dispatcher.ops.deploy import deploy
from dispatcher.ports.table import Record, TableUnavailable
from dispatcher.store import codec
from dispatcher.store.rate_buckets import RateLimitError
from dispatcher.store.tenant_policies import TenantPolicyError
from dispatcher.testing.memory_launcher import MemoryLauncher
from dispatcher.testing.memory_task_definitions import MemoryTaskDefinitions, Revision
from tests import model_checks as checks
from tests import model_retry_bundles
from tests.model_faults import FaultyTable, LambdaDied
from tests.twins import FAMILY, Twins

# The filters a bulk action takes (``jobs cancel|retry --status S``): every state it selects.
FILTERS = (("cancel", "PENDING"), ("cancel", "SCHEDULED"), ("cancel", "RUNNING"),
           ("retry", "FAILED"), ("retry", "CANCELLED"))
ENDED = (JobState.FAILED, JobState.CANCELLED)  # what a retry takes
# How a bulk run is cut short: not at all; the operator's process dies right after its n-th
# table write; or the table fails k transactions in a row (``lost``: each after it committed),
# more than the store's retries absorb from the 5th on, which stops the run.
INTERRUPTIONS = st.one_of(st.none(), st.tuples(st.just("dies"), st.integers(0, 6)),
                          st.tuples(st.just("flaky"), st.integers(3, 12), st.booleans()))
STACK_IMAGE = "registry/worker:v0"
# The check of a bulk retry cut short while it acts on an array: no retried child may run
# while its parent counts it ended, nor the parent be decided from children not yet retried
# (dispatcher/store/array_retry.py carries the retry on the parent for this).
RETRY_CUT = "bulk_array_retry_cut"


@dataclass(frozen=True)
class BulkRun:
    """What an operator typed: run again as it was to resume it (``--bulk-id``)."""

    verb: str
    status: str
    kind: str | None
    since_seconds: float | None
    from_scratch: bool
    page: int  # index rows a page: small ones cut a run into many pages
    label: str | None = None  # ``--label key=value``: read through the label index
    tenant: str | None = None  # ``--tenant T``: read through it too, without a label


def stack_arn(revision: str) -> str:
    """The stack's revision as the functions' environment names it (``!Ref``: an ARN)."""
    return f"arn:aws:ecs:us-east-1:000000000000:task-definition/{revision}"


def job_marks(items: Mapping[str, Record]) -> dict[str, tuple[str, str | None]]:
    """Each job's (state, bundle id): what a cancel or a retry changes."""
    return {codec.ident(pk): (str(rec.state), rec.bundle_id) for pk, rec in items.items()
            if pk.startswith("JOB#")}


def cancel_requests(items: Mapping[str, Record]) -> set[tuple[str, str]]:
    """(bundle id, job id) of every cancel request standing on a bundle."""
    return {(codec.ident(pk), j) for pk, rec in items.items()
            if pk.startswith("BUNDLE#") for j in rec.cancel_jobs or ()}


def acted(verb: str, before: Mapping[str, tuple[str, str | None]],
          after: Mapping[str, tuple[str, str | None]]) -> set[str]:
    """The jobs a bulk run changed as its verb does (nothing else writes while it runs): a
    cancel ends them CANCELLED; a retry takes them out of FAILED or CANCELLED, into a new
    bundle (an array's parent: into its children's aggregate)."""
    out = set()
    for job_id, (state, bundle_id) in after.items():
        was = before.get(job_id)
        if was is None:
            continue
        cancelled = was[0] not in TERMINAL_JOB_STATES and state == JobState.CANCELLED
        retried = was[0] in ENDED and (state, bundle_id) != was
        if cancelled if verb == "cancel" else retried:
            out.add(job_id)
    return out


def unlike_a_retry(view: checks.View, retried: set[str], from_scratch: bool) -> list[str]:
    """Jobs a bulk retry left otherwise than a single ``retry`` leaves a job: PENDING with a
    fresh budget (no attempts of either kind), waiting for no dependency, in a new bundle that
    has never launched and holds only jobs this retry retried (small ones share bundles as
    admitted ones do), its checkpoint dropped only ``from_scratch``."""
    out = []
    for job_id in sorted(retried):
        job = view.job(job_id)
        if job is None or job.array_size is not None:  # an array's parent never runs itself
            continue
        bundle = view.bundle(job.bundle_id) if job.bundle_id else None
        wrong = [what for what, bad in (
            (f"is {job.state}", job.state != JobState.PENDING),
            (f"has {job.attempts} attempts and {job.infra_attempts} infrastructure attempts",
             job.attempts != 0 or job.infra_attempts != 0),
            (f"still waits for {job.depends_on}", bool(job.depends_on)),
            ("kept its checkpoint (from scratch)", from_scratch and job.checkpoint is not None),
            (f"is in bundle {job.bundle_id}, not a new one of this retry's jobs: "
             f"{None if bundle is None else (bundle.state, bundle.attempt, bundle.job_ids)}",
             bundle is None or job_id not in bundle.job_ids
             or not set(bundle.job_ids) <= retried or bundle.attempt != 0
             or bundle.state != BundleState.PENDING)) if bad]
        if wrong:
            out.append(f"{job_id}, retried by a bulk retry, " + "; ".join(wrong) + ": "
                       + checks.describe(job))
    return out


def arrays_unlike_alone(view: checks.View, verb: str, done: set[str]) -> list[str]:
    """Arrays a bulk action acted on otherwise than ``jobs cancel|retry`` of the one parent
    does: a retry reopens the array (its open marker back, so the ticks settle it again) and
    never gives the parent a bundle (it never runs itself); a cancel leaves none of its
    recorded children unfinished without a cancel request standing. And a child retried while
    its parent counts it ended: the parent is no longer its children's aggregate."""
    asked = {j for _, j in cancel_requests(view.items)}
    out = []
    for job_id in sorted(done):
        job = view.job(job_id)
        parent = view.items.get(codec.job_key(job.array_parent)) \
            if job is not None and job.array_parent else None
        if job is not None and parent is not None and job.array_index is not None \
                and job.array_index < Tally.from_json(parent.array_tally).settled \
                and job.state not in TERMINAL_JOB_STATES:
            out.append(f"array {job.array_parent}'s child {job_id}, retried by a bulk retry, "
                       f"runs again while its parent ({parent.state}) counts it ended")
        if job is None or job.array_size is None:
            continue
        if verb == "retry" and (codec.array_key(job_id) not in view.items or job.bundle_id):
            out.append(f"array {job_id} retried by a bulk retry as a plain job: "
                       f"{checks.describe(job)}; its open marker "
                       f"{'is' if codec.array_key(job_id) in view.items else 'is not'} there")
        if verb == "cancel":
            rec = view.items[codec.job_key(job_id)]
            left = [c for i in range(int(rec.array_next or 0))
                    if (child := view.job(f"{job_id}:{i}")) is not None
                    and child.state not in TERMINAL_JOB_STATES and (c := child.job_id) not in asked]
            if left:
                out.append(f"array {job_id} cancelled by a bulk cancel, its children {left} "
                           "left to run")
    return out


def untenanted(view: checks.View, tenant: str | None, done: set[str]) -> list[str]:
    """Jobs a bulk action by ``tenant`` acted on (or asked a task to cancel) that are another
    tenant's (or none's)."""
    if tenant is None:
        return []
    return [f"{job_id} was acted on by a bulk action --tenant {tenant} it is not of: "
            f"{checks.describe(job)}" for job_id in sorted(done)
            if (job := view.job(job_id)) is not None and job.tenant != tenant]


def unlabelled(view: checks.View, label: str | None, done: set[str]) -> list[str]:
    """Jobs a bulk action by ``label`` acted on that do not carry it."""
    if label is None:
        return []
    key, _, value = label.partition("=")
    return [f"{job_id} was acted on by a bulk action --label {label} it does not carry: "
            f"{checks.describe(job)}" for job_id in sorted(done)
            if (job := view.job(job_id)) is not None and (job.labels or {}).get(key) != value]


def selects_an_array(view: checks.View, how: BulkRun, now: float) -> bool:
    """Whether the filter selects an array's parent or child now (as the status index
    would)."""
    state = JobState.PENDING if how.status == "SCHEDULED" else JobState(how.status)
    for pk, rec in view.items.items():
        if pk.startswith("JOB#") and (rec.array_size is not None or rec.array_parent) \
                and rec.state == state \
                and how.kind in (None, rec.kind) and (how.since_seconds is None or float(
                    rec.created_at or 0) >= now - how.since_seconds):
            return True
    return False


def revision_problems(items: Mapping[str, Record], launcher: MemoryLauncher,
                      launched_on: dict[tuple[str, int], str],
                      deployed: str) -> dict[str, list[str]]:
    """By check: ``launch_revision``, a launch begun since the last look (a bundle's attempt
    not seen before) on another revision than ``deployed``; ``kept_revision``, a launch whose
    revision changed since (its task would run other code than its bundle says), or a task
    running another revision than its bundle's; ``attempt_revision``, a job's recorded attempt
    naming another revision than its task's. ``items``: the bundles and jobs to look at (those
    written since the last look: the others were looked at as they are); ``launched_on``: the
    revision of every launch seen, by (bundle id, attempt), kept up to date here."""
    out: dict[str, list[str]] = {"launch_revision": [], "kept_revision": [],
                                 "attempt_revision": []}
    for pk, rec in items.items():
        if pk.startswith("BUNDLE#") and rec.task_definition and int(rec.attempt or 0) >= 1:
            bundle_id, attempt, td = codec.ident(pk), int(rec.attempt or 0), rec.task_definition
            seen = launched_on.get((bundle_id, attempt))
            if seen is None:
                launched_on[(bundle_id, attempt)] = td
                if td != deployed:
                    out["launch_revision"].append(
                        f"bundle {bundle_id} attempt {attempt} ({rec.state}) was launched on "
                        f"{td} after {deployed} was deployed")
            elif td != seen:
                out["kept_revision"].append(f"bundle {bundle_id} attempt {attempt} "
                                            f"({rec.state}) was launched on {seen}, now says {td}")
            task = launcher.tasks.get(rec.task_arn or "")
            if rec.state in (BundleState.LAUNCHED, BundleState.RUNNING) and task is not None \
                    and task.request.task_definition != td:
                out["kept_revision"].append(f"bundle {bundle_id} says {td}; its task "
                                            f"{rec.task_arn} runs {task.request.task_definition}")
        elif pk.startswith("JOB#"):
            for entry in rec.history or ():
                task = launcher.tasks.get(entry.get("task_arn") or "")
                if task is not None \
                        and entry.get("task_definition") != task.request.task_definition:
                    out["attempt_revision"].append(
                        f"{codec.ident(pk)}'s attempt {entry.get('attempt')} names "
                        f"{entry.get('task_definition')!r}; its task {task.task_arn} ran "
                        f"{task.request.task_definition}")
    return out


class OperatorRules:
    """The system model's rules for bulk actions and deploys, and their checks (mixed into
    tests/twins/test_system_model.py's SystemModel, which provides the world and the helpers
    below; :meth:`operators_begin` sets up this part of it)."""

    # Provided by SystemModel: table, twins, submitted, runs, depends, fail(), sync(), gap()
    # (whether a check is a known gap: skipped today).
    table: FaultyTable
    twins: Twins
    submitted: dict[str, str]
    runs: dict[str, int]
    depends: dict[str, Any]
    uncancel: Any  # SystemModel.uncancel: a retried job may run again (cancel_kept)

    def operators_begin(self) -> None:
        # Bulk actions: what each bulk id was run as, which of them were cut short (to be
        # resumed), and how often each acted on each job (a cancel request counted apart).
        self.bulk_runs: dict[str, BulkRun] = {}
        self.cut_short: list[str] = []
        self.bulk_acts: dict[str, Counter[str]] = {}
        self.bulk_requests: dict[str, Counter[tuple[str, str]]] = {}
        # The job code: the stack's own revision, launched until something is deployed; the
        # revision launches must run (the deployment's); each launch's revision as first seen.
        self.defs = MemoryTaskDefinitions(self.twins.launcher)
        self.twins.task_definitions = self.defs
        self.stack = self.defs.register(Revision(STACK_IMAGE))
        self.deployed = self.stack
        self.images = [STACK_IMAGE]
        self.launched_on: dict[tuple[str, int], str] = {}
        self.looked_at: dict[str, Record] = {}  # each item as last looked at

    def revision_env(self) -> dict[str, str]:
        """The functions' environment names the stack's revision (as the template does)."""
        return {"LONGJOBS_STACK_TASK_DEFINITION": stack_arn(self.stack)}

    # -- tenants' shares --------------------------------------------------------------------------
    @rule(tenant=st.sampled_from(checks.TENANTS), cap=st.sampled_from([None, 0, 1, 2]),
          weight=st.sampled_from([None, 0.0, 3.0]), reserve=st.sampled_from([None, 0, 1, 2]))
    def tenant_cap(self, tenant: str, cap: int | None, weight: float | None = None,
                   reserve: int | None = None) -> None:
        """``longjobs tenants set T --max-running N --reserve R`` (or ``--no-cap``): the next
        ticks, and the stop events' relaunches, keep to it (the ``tenant_cap``,
        ``reserve_kept`` and ``tenant_turns`` checks). A reserve past the cap is refused."""
        # Written or not: the check reads the table's policy.
        with contextlib.suppress(LambdaDied, TableUnavailable, TenantPolicyError):
            self.twins.store.set_tenant_policy(tenant, weight=weight, max_running=cap,
                                              reserve=reserve, no_cap=cap is None)

    @rule(key=st.sampled_from(["api", "api:{tenant}"]),
          rate=st.sampled_from([None, "2/min", "1/s", "30/min"]), burst=st.sampled_from([1, 2, 4]))
    def rate_limit(self, key: str, rate: str | None, burst: int) -> None:
        """``longjobs limits set KEY --rate R --burst B`` (or ``limits delete KEY``): the next
        launches and acquires keep to it (the ``rate_bound`` and ``tokens_taken`` checks)."""
        client = self.twins.client()
        with contextlib.suppress(LambdaDied, TableUnavailable, RateLimitError):
            if rate is None:
                client.delete_limit(key)
            else:
                client.set_limit(key, rate, burst=burst)

    # -- bulk actions ----------------------------------------------------------------------------
    @precondition(lambda self: bool(self.submitted))
    @rule(which=st.sampled_from(FILTERS),
          kind=st.sampled_from([None, None, "plain", "report", "k"]),
          since=st.sampled_from([None, None, 120.0, 86_400.0]),
          from_scratch=st.booleans(), page=st.sampled_from([1, 3, 100]), cut=INTERRUPTIONS,
          label=st.sampled_from([None, None, "team=a", "tier=gold"]),
          tenant=st.sampled_from([None, None, *checks.TENANTS]))
    def bulk_action(self, which: tuple[str, str], kind: str | None, since: float | None,
                    from_scratch: bool, page: int, cut: tuple[Any, ...] | None,
                    label: str | None = None, tenant: str | None = None) -> None:
        """``jobs cancel|retry --status S [--kind K] [--since D] [--label K=V] [--tenant T]``,
        perhaps cut short."""
        bulk_id = f"bulk-{len(self.bulk_runs):03d}"
        self.bulk_runs[bulk_id] = BulkRun(which[0], which[1], kind, since, from_scratch, page,
                                          label, tenant)
        self.run_bulk(bulk_id, cut)

    @precondition(lambda self: bool(self.cut_short))
    @rule(data=st.data(), cut=INTERRUPTIONS)
    def resume_bulk(self, data: st.DataObject, cut: tuple[Any, ...] | None) -> None:
        """The operator runs a bulk action that was cut short again, with its bulk id."""
        self.run_bulk(data.draw(st.sampled_from(self.cut_short)), cut)

    def run_bulk(self, bulk_id: str, cut: tuple[Any, ...] | None) -> None:
        how = self.bulk_runs[bulk_id]
        view = checks.View.read(self.table, self.twins.queue)
        if self.gap("bulk_array") and selects_an_array(view, how, self.twins.clock()):
            # Known to fail (the check says how); it would fail the checks of lost jobs too.
            # Run with LONGJOBS_MODEL_GAPS= to see it.
            return
        before = view.items
        marks, requests = job_marks(before), cancel_requests(before)
        action, f = self.twins.client().bulk(how.verb, status=how.status, kind=how.kind,
                                             since_seconds=how.since_seconds, label=how.label,
                                             tenant=how.tenant)
        # The twins' clock, not the machine's: ``since`` and SCHEDULED count from the model's
        # now, and an example replays alike.
        action.clock, action.page = self.twins.clock, how.page
        if cut is not None and cut[0] == "dies":
            self.table.crash_after(cut[1])
        elif cut is not None:
            self.table.fail_next(cut[1], cut[2])
        try:
            action.run(f, bulk_id=bulk_id, reason="the model's operator",
                       from_scratch=how.from_scratch)
            if bulk_id in self.cut_short:
                self.cut_short.remove(bulk_id)
        except (LambdaDied, TableUnavailable):
            if bulk_id not in self.cut_short:
                self.cut_short.append(bulk_id)
        except LongjobsError as exc:  # a bulk run reports what it could not do, never raises
            self.fail("bulk_raises", [f"{bulk_id} ({how}) raised {exc!r}"])
        finally:
            self.table.revive()
        view = checks.View.read(self.table, self.twins.queue)
        done = acted(how.verb, marks, job_marks(view.items))
        self.bulk_acts.setdefault(bulk_id, Counter()).update(done)
        asked = cancel_requests(view.items) - requests
        self.bulk_requests.setdefault(bulk_id, Counter()).update(asked)
        self.fail(RETRY_CUT if how.verb == "retry" and cut is not None else "bulk_array",
                  arrays_unlike_alone(view, how.verb, done))
        self.fail("bulk_label", unlabelled(view, how.label, done))
        self.fail("bulk_tenant", untenanted(view, how.tenant,
                                            set(done) | {job_id for _, job_id in asked}))
        if how.verb == "retry":
            for job_id in done:  # a fresh budget; it waits for no dependency (as retry)
                self.runs[job_id] = 0
                self.depends.pop(job_id, None)
                self.uncancel(job_id)
            self.fail("bulk_retry_budget", unlike_a_retry(view, done, how.from_scratch))
            # The pages this run read at most: the jobs in its state before it, a page each
            # ``how.page`` of them.
            entry = how.label or (f"@tenant={how.tenant}" if how.tenant else None)
            rows = sum(1 for state, _ in marks.values() if state == how.status) \
                if entry is None else sum(  # the label's (or tenant's) entries
                    1 for pk in before if pk.startswith(f"LABEL#{entry}#"))
            self.fail("retries_bundled", model_retry_bundles.unbundled(
                view, set(done), self.twins.store.bundle_sizes,
                max(1, math.ceil(rows / how.page)), self.twins.clock()))
        self.sync()

    # -- deploys ---------------------------------------------------------------------------------
    @rule(rollback=st.booleans(), env=st.sampled_from([None, {"FEATURE": "on"}]))
    def deploy_code(self, rollback: bool, env: dict[str, str] | None) -> None:
        """``longjobs deploy --image X`` (or ``--revision N``, a rollback to an earlier
        deployment's image): the launches begun so far keep their revision."""
        self.note_launches()
        if rollback and len(self.images) > 1:
            earlier = self.images[-2]
            revision = next(int(name.rsplit(":", 1)[1])
                            for name, rev in sorted(self.defs.revisions.items())
                            if rev.image == earlier)
            done = deploy(self.twins.store, self.defs, family=FAMILY,
                          stack=stack_arn(self.stack),
                          latest=self.twins.launcher.resolve_task_definition,
                          revision=revision, env=env)
        else:
            done = deploy(self.twins.store, self.defs, family=FAMILY,
                          stack=stack_arn(self.stack),
                          latest=self.twins.launcher.resolve_task_definition,
                          image=f"registry/worker:v{len(self.images)}", env=env)
        self.images.append(done.deployment.image)
        self.deployed = done.deployment.task_definition

    def note_launches(self) -> None:
        self.revisions_hold(checks.View.read(self.table, self.twins.queue))

    def revisions_hold(self, view: checks.View) -> None:
        # The table twin makes a new record at each write: the items whose record is the one
        # looked at last are as they were then (looking at every item after every step added
        # about a third to the model's time).
        changed = {pk: rec for pk, rec in view.items.items()
                   if self.looked_at.get(pk) is not rec}
        self.looked_at = dict(view.items)
        found = revision_problems(changed, self.twins.launcher, self.launched_on,
                                  self.deployed)
        for check, problems in found.items():
            self.fail(check, problems)

    # -- checks ----------------------------------------------------------------------------------
    @invariant()
    def operators_hold(self) -> None:
        self.fail("bulk_once", [
            f"{bulk_id} ({self.bulk_runs[bulk_id]}) acted on {job_id} {n} times"
            for bulk_id, acts in self.bulk_acts.items() for job_id, n in acts.items()
            if n > 1])
        self.fail("bulk_once", [
            f"{bulk_id} ({self.bulk_runs[bulk_id]}) asked bundle {bundle}'s task to cancel "
            f"{job_id} {n} times" for bulk_id, asked in self.bulk_requests.items()
            for (bundle, job_id), n in asked.items() if n > 1])
        self.revisions_hold(checks.View.read(self.table, self.twins.queue))
