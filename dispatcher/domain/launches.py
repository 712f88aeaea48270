"""Launches: one RunTask call for up to 10 bundles, recorded before the call."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from enum import StrEnum

from dispatcher.domain import tenants
from dispatcher.domain.bundles import Bundle
from dispatcher.domain.jobs import Resources, now


class LaunchState(StrEnum):
    STARTING = "STARTING"  # recorded before RunTask; a crash leaves it here for recovery
    DONE = "DONE"


@dataclass
class Launch:
    """One RunTask call for up to 10 bundles sharing a launch profile.

    Recorded before the call, so a crashed tick leaves a trace; the clientToken is derived from
    the bundles and their attempts, so repeating the call returns the same tasks.
    """

    launch_id: str
    bundle_ids: list[str]
    task_definition: str
    state: LaunchState = LaunchState.STARTING
    created_at: float = field(default_factory=now)
    task_arns: list[str] = field(default_factory=list)
    on_demand: bool = False  # the Spot fallback: launch type FARGATE whatever the strategy
    # Task-level size of its tasks (RunTask overrides), shared by all its bundles; recorded so
    # a recovered launch repeats the same request under the same clientToken.
    resources: Resources = field(default_factory=Resources)
    # The kind of every job of its bundles, when they share one: its tasks' tag
    # ``longjobs:kind``, for AWS's split cost allocation to be matched against ours.
    kind: str | None = None
    # The labels every job of its bundles has (a call is of one set: stages.launch.calls_for):
    # its tasks' tags (dispatcher.domain.labels.tags).
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def tenant(self) -> str | None:
        """The tenant of its bundles (a call is of one: stages.launch.calls_for), named by
        their ids, so a recovered launch tags its tasks as the first call did."""
        return tenants.of_bundle(self.bundle_ids[0]) if self.bundle_ids else None

    @property
    def client_token(self) -> str:
        # RunTask accepts up to 64 ASCII characters; tokens live 24 hours.
        # https://docs.aws.amazon.com/AmazonECS/latest/APIReference/ECS_Idempotency.html
        return f"lj-{self.launch_id}"[:64]

    @staticmethod
    def make_id(bundles: list[Bundle]) -> str:
        key = "|".join(f"{b.bundle_id}:{b.attempt + 1}" for b in bundles)
        return hashlib.sha256(key.encode()).hexdigest()[:40]


