"""The store: the job table's policy, a layer of its own over the Table port.

The roles (:class:`StageStore`, :class:`RunnerStore`, :class:`OperatorStore`, and
:class:`Store` for callers that need everything) hold the rules: which states may change to
which, the fences, the conditions, the keys and the codec. They run on a
:class:`dispatcher.ports.table.Table`, whose adapters (DynamoDB, the in-memory twin) implement
only primitives, so the rules exist once and both backends obey them.
"""

from __future__ import annotations

from dispatcher.store.base import Reads
from dispatcher.store.operator import OperatorStore
from dispatcher.store.runner import Beat, Claim, RunnerStore
from dispatcher.store.stage_store import SavedSummary, StageStore
from dispatcher.store.values import Fence, JobUpdate, LaunchOutcome


class Store(StageStore, RunnerStore, OperatorStore):
    """Every role on one table."""


__all__ = [
    "Beat",
    "Claim",
    "Fence",
    "JobUpdate",
    "LaunchOutcome",
    "OperatorStore",
    "Reads",
    "RunnerStore",
    "SavedSummary",
    "StageStore",
    "Store",
]
