"""Per-job resources: a job's cpu/memory/ephemeral storage become its task's
RunTask task-level overrides; jobs of different sizes never share a task, nor a RunTask call
(a call's overrides apply to all its tasks); a recovered launch repeats its request exactly.

The launch stage runs on the twins (bundles recorded straight into the store); the whole path
from ``JobClient.submit`` runs on the twins too; the ECS form of the overrides is read on moto
through the proxy in ``tests/contract/test_ecs_launcher.py``.
"""

from __future__ import annotations

from dispatcher import settings
from dispatcher.aws.ecs import task_overrides
from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.jobs import Job, Resources
from dispatcher.domain.launches import Launch
from dispatcher.domain.pacing import LaunchPacer
from dispatcher.local.local_launcher import LocalLauncher
from dispatcher.ports.launcher import LaunchRequest
from dispatcher.stages.launch import Launches, LaunchStats, calls_for, request_for
from dispatcher.stages.policy import LaunchPolicy
from dispatcher.store import codec as r
from tests.twins import FAMILY, Twins

BIG = Resources(cpu=4096, memory=8192)
SMALL = Resources(cpu=256, memory=512)
DISK = Resources(ephemeral_storage=100)


# -- the request's shape ------------------------------------------------------------------------
def test_task_overrides_carry_only_what_was_asked_for() -> None:
    assert task_overrides(Resources()) == {}
    assert task_overrides(BIG) == {"cpu": "4096", "memory": "8192"}
    assert task_overrides(Resources(256, 512, 21)) == {
        "cpu": "256", "memory": "512", "ephemeralStorage": {"sizeInGiB": 21}}
    assert task_overrides(DISK) == {"ephemeralStorage": {"sizeInGiB": 100}}


def test_a_launch_request_carries_the_launchs_resources() -> None:
    launch = Launch("L1", ["b1", "b2"], f"{FAMILY}:1", resources=BIG)
    assert request_for(launch).resources == BIG
    assert request_for(Launch("L2", ["b3"], f"{FAMILY}:1")).resources == Resources()


def test_the_launch_record_keeps_its_resources() -> None:
    """So a launch a crashed tick left is retried with the byte-identical request."""
    for resources in (BIG, Resources(1024, 2048, 40), DISK, Resources()):
        launch = Launch("L1", ["b1"], f"{FAMILY}:3", created_at=1.0, resources=resources)
        again = r.record_launch(r.launch_record(launch))
        assert again.resources == resources
        assert request_for(again) == request_for(launch)


def test_calls_are_cut_by_resources_then_by_ten() -> None:
    sizes = [BIG if i % 3 else SMALL for i in range(25)] + [Resources(), DISK]
    bundles = [Bundle(f"b{i:02}", [f"j{i:02}"], resources=res) for i, res in enumerate(sizes)]
    calls = calls_for(bundles)
    assert [len(c) for c in calls] == [9, 10, 6, 1, 1]
    for call in calls:
        assert len({b.resources for b in call}) == 1
    assert [c[0].resources for c in calls] == [SMALL, BIG, BIG, Resources(), DISK]
    assert sorted(b.bundle_id for c in calls for b in c) == [b.bundle_id for b in bundles]
    for call in calls:  # the bundles' own order within each call
        assert [b.bundle_id for b in call] == sorted(b.bundle_id for b in call)


# -- the launch stage on the twins -------------------------------------------------------------
def _recorded(twins: Twins, sizes: list[Resources]) -> list[Bundle]:
    """One PENDING bundle per size (one job each), recorded in the twin store."""
    bundles = [Bundle(f"b{i:02}", [f"j{i:02}"], resources=res) for i, res in enumerate(sizes)]
    twins.store.record(bundles, [Job(job_id=f"j{i:02}", kind="k", payload={}, bundle_id=f"b{i:02}",
                                     resources=res) for i, res in enumerate(sizes)])
    return [b for b in (twins.store.get_bundle(b.bundle_id) for b in bundles) if b]


def _launches(twins: Twins) -> Launches:
    return Launches(twins.store, twins.launcher, LaunchPolicy(), twins.clock,
                    pacer=LaunchPacer.simulated())


def _size_of_task(twins: Twins) -> dict[str, Resources]:
    """The size of each bundle's task, as its RunTask asked for it."""
    out = {}
    for bundle in twins.bundles():
        assert bundle.task_arn is not None
        out[bundle.bundle_id] = twins.launcher.tasks[bundle.task_arn].request.resources
    return out


def test_each_runtask_call_launches_one_size(twins: Twins) -> None:
    sizes = [BIG, SMALL, Resources(), BIG, DISK, SMALL] * 4
    bundles = _recorded(twins, sizes)
    assert [b.resources for b in bundles] == sizes  # the store keeps a bundle's size
    stats = LaunchStats()
    _launches(twins).launch(bundles, f"{FAMILY}:1", stats)
    assert stats.bundles_launched == len(sizes)
    requests = twins.launcher.requests
    assert sorted(r.resources.describe() for r in requests) == sorted(
        res.describe() for res in (BIG, SMALL, Resources(), DISK))
    assert all(r.count == 8 if r.resources in (BIG, SMALL) else r.count == 4 for r in requests)
    assert _size_of_task(twins) == {b.bundle_id: b.resources for b in bundles}


def test_a_recovered_launch_repeats_its_request_with_its_resources(twins: Twins) -> None:
    bundles = _recorded(twins, [BIG, BIG])
    launches = _launches(twins)
    twins.launcher.inject_throttle(1)  # the outcome is unknown: left STARTING for recovery
    stats = LaunchStats()
    launches.launch(bundles, f"{FAMILY}:1", stats)
    assert stats.left_for_recovery == 1 and not twins.launcher.tasks
    twins.clock.advance(LaunchPolicy().recovery_seconds + 1)
    launches.recover(stats)
    assert stats.recovered == 1 and stats.bundles_launched == 2
    first, again = twins.launcher.requests
    assert again == first and again.resources == BIG  # same token, same parameters
    assert {b.state for b in twins.bundles()} == {BundleState.LAUNCHED}


def test_a_spot_fallback_keeps_each_bundles_size(twins: Twins) -> None:
    bundles = _recorded(twins, [BIG, SMALL])
    launches = Launches(twins.store, twins.launcher,
                        LaunchPolicy(capacity_providers=("FARGATE_SPOT",), spot_fallback=True),
                        twins.clock, pacer=LaunchPacer.simulated())
    twins.launcher.set_spot_capacity(False)
    launches.launch(bundles, f"{FAMILY}:1", LaunchStats())
    on_demand = [r for r in twins.launcher.requests if r.on_demand]
    assert sorted(r.resources.describe() for r in on_demand) == sorted(
        [BIG.describe(), SMALL.describe()])
    assert _size_of_task(twins) == {"b00": BIG, "b01": SMALL}


# -- the whole path on the twins ----------------------------------------------------------------
def test_a_big_job_launches_with_its_size_and_never_shares_a_task_with_a_small_one(
        twins: Twins) -> None:
    d = twins.stages(LONGJOBS_MAX_RUNNING_TASKS="50").tick
    c = twins.client()
    # All of them small by their estimate: only their sizes keep them apart.
    c.submit("k", {}, job_id="big", cpu=4096, memory=8192, estimated_seconds=1)
    c.submit_many([{"kind": "k", "payload": {}, "job_id": f"small-{i}", "cpu": 256,
                    "memory": 512, "estimated_seconds": 1} for i in range(5)])
    c.submit_many([{"kind": "k", "payload": {}, "job_id": f"plain-{i}",
                    "estimated_seconds": 1} for i in range(3)])
    d.tick()

    jobs = {j.job_id: j for j in twins.jobs()}
    assert len(jobs) == 9
    assert jobs["big"].resources == BIG  # admitted with the size it asked for
    assert {jobs[f"small-{i}"].resources for i in range(5)} == {SMALL}

    tasks = _size_of_task(twins)
    by_bundle = {b.bundle_id: b for b in twins.bundles()}
    for job in jobs.values():
        assert job.bundle_id is not None
        bundle = by_bundle[job.bundle_id]
        assert bundle.resources == job.resources
        assert tasks[bundle.bundle_id] == job.resources  # its task's RunTask overrides
    big_bundle = by_bundle[jobs["big"].bundle_id]  # type: ignore[index]
    assert big_bundle.job_ids == ["big"]
    for request in twins.launcher.requests:  # no RunTask mixes sizes either
        arns = [a for a, t in twins.launcher.tasks.items() if t.request is request]
        assert {tasks[b.bundle_id] for b in by_bundle.values() if b.task_arn in arns} \
            <= {request.resources}


# -- local mode ---------------------------------------------------------------------------------
def test_the_local_launcher_keeps_each_requests_size() -> None:
    cfg = settings.load("dispatcher", {
        "LONGJOBS_QUEUE_URL": "q", "LONGJOBS_TABLE": "t", "LONGJOBS_CLUSTER": "c",
        "LONGJOBS_TASK_FAMILY": "f", "LONGJOBS_LAUNCHER": "local",
        "LONGJOBS_LOCAL_START_SECONDS": "3600"})  # tasks never start before the shutdown
    local = LocalLauncher(cfg, env={"PATH": "/usr/bin:/bin"}, stop_timeout=5,
                          enforce_limits=False)
    try:
        first = local.run(LaunchRequest("f:1", 2, "sized", "local", resources=BIG))
        # The token reused with another size: the first call's tasks, nothing new started.
        assert local.run(LaunchRequest("f:1", 2, "sized", "local")) == first
    finally:
        local.shutdown(grace=5)
    assert [q.resources for q in local.requests] == [BIG, Resources()]
    assert {t.request.resources for t in local.tasks.values()} == {BIG}


def test_a_recovered_launch_without_spot_falls_back_on_the_revision_deployed_now(
        twins: Twins) -> None:
    """A launch left for recovery repeats its request as it was (its clientToken, its
    revision: what may have started must be the same). If Spot then has no capacity, the
    fallback is a new launch: its tasks run the code deployed now, not before the deploy."""
    bundles = _recorded(twins, [BIG])
    launches = Launches(twins.store, twins.launcher,
                        LaunchPolicy(capacity_providers=("FARGATE_SPOT",), spot_fallback=True),
                        twins.clock, pacer=LaunchPacer.simulated())
    twins.launcher.inject_throttle(1)  # the outcome is unknown: left STARTING for recovery
    stats = LaunchStats()
    launches.launch(bundles, f"{FAMILY}:1", stats)
    assert stats.left_for_recovery == 1
    twins.clock.advance(LaunchPolicy().recovery_seconds + 1)
    twins.launcher.set_spot_capacity(False)
    deployed = twins.launcher.register_task_definition()  # a deploy meanwhile
    assert deployed == f"{FAMILY}:2"
    launches.recover(stats, deployed)
    first, again, fallback = twins.launcher.requests
    assert again == first and again.task_definition == f"{FAMILY}:1"
    assert fallback.on_demand and fallback.task_definition == f"{FAMILY}:2"
    (bundle,) = twins.bundles()
    assert bundle.state == BundleState.LAUNCHED and bundle.task_definition == f"{FAMILY}:2"
