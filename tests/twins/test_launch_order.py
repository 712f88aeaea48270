"""Bundles that one drain records together launch in the order they were recorded, on every run:
the order does not come from where their futures happen to sit in memory (which differs from
run to run, and made the system model's examples replay differently)."""

from __future__ import annotations

from dispatcher.domain.bundles import BundleState
from dispatcher.ports.table import Record
from dispatcher.store import codec
from tests.model_faults import one_thread
from tests.twins import Twins

# One small job of each resource class: each opens a bundle of its own, and the drain records
# them all at once when its receives are over.
SHAPES = [(256, 512), (256, 1024), (512, 1024), (512, 2048), (1024, 2048), (1024, 4096),
          (2048, 4096), (2048, 8192)]
WORLDS = 5


def committed_order(twins: Twins) -> list[str]:
    """The bundle ids in the order their recording committed them (PENDING)."""
    order: list[str] = []

    def on_write(before: Record | None, after: Record | None) -> None:
        if after is not None and after.pk.startswith("BUNDLE#") \
                and after.state == BundleState.PENDING \
                and (before is None or before.state != BundleState.PENDING):
            order.append(codec.ident(after.pk))

    twins.table.watch(on_write)
    return order


def test_bundles_recorded_together_launch_in_the_order_they_were_recorded() -> None:
    for world in range(WORLDS):  # fresh worlds: the futures sit elsewhere in memory each time
        twins = Twins()
        committed = committed_order(twins)
        twins.client().submit_many([
            {"kind": "plain", "payload": {}, "job_id": f"w{world}-{cpu}-{memory}",
             "cpu": cpu, "memory": memory, "estimated_seconds": 5.0}
            for cpu, memory in SHAPES])
        with one_thread():  # the drain's work done at once, in the order it is submitted
            decision = twins.stages(LONGJOBS_MAX_RUNNING_TASKS=str(len(SHAPES))).tick.tick()
        assert decision.launch.bundles_launched == len(SHAPES)
        launched = []
        for arn in twins.launcher.tasks:  # in the order RunTask started them
            bundle = twins.store.bundle_for_task(arn)
            assert bundle is not None
            launched.append(bundle.bundle_id)
        assert len(committed) == len(SHAPES)
        assert launched == committed, f"world {world}"
