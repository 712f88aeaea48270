"""The DynamoDB adapter of the Store port (pynamodb).

Every state change is a conditional write whose condition comes from :mod:`dispatcher.state`
and the expected current state, so a stale writer loses instead of overwriting.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from pynamodb.connection import Connection
from pynamodb.exceptions import DoesNotExist, PutError, TransactWriteError
from pynamodb.transactions import TransactWrite

from dispatcher.aws.dynamodb.codec import (
    bundle_item,
    item_bundle,
    item_job,
    item_launch,
    item_rejection,
    job_item,
    launch_item,
    rejection_item,
)
from dispatcher.aws.dynamodb.control import ControlWrites
from dispatcher.aws.dynamodb.models import Item, bind, iso
from dispatcher.aws.dynamodb.runs import RunWrites, failed_conditions
from dispatcher.domain import lifecycle
from dispatcher.domain.bundles import ACTIVE_BUNDLE_STATES, Bundle, BundleState
from dispatcher.domain.errors import ConflictError
from dispatcher.domain.jobs import Job, JobState, Rejection, now
from dispatcher.domain.launches import Launch, LaunchState
from dispatcher.ports.store import LaunchOutcome, Store

# TransactWriteItems: at most 100 actions and 4 MB in total.
# https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html
MAX_TRANSACTION_ITEMS = 100
MAX_TRANSACTION_BYTES = 3_500_000  # stay under 4 MB with room for attribute overhead
LEASE_KEY = "LEASE#dispatcher"
POINTER_TTL_SECONDS = 30 * 86400
LAUNCH_TTL_SECONDS = 7 * 86400


class DynamoStore(RunWrites, ControlWrites, Store):
    def __init__(self, table: str, region: str | None = None, host: str | None = None) -> None:
        bind(table, region, host)
        self._conn = Connection(region=region or getattr(Item.Meta, "region", None), host=host)

    # -- lease ----------------------------------------------------------------------------------
    def acquire_lease(self, owner: str, seconds: float) -> bool:
        t = now()
        item = Item(LEASE_KEY, owner=owner, lease_until=t + seconds, updated_at=t)
        free = Item.pk.does_not_exist() | (Item.lease_until < t) | (Item.owner == owner)
        try:
            item.save(condition=free)
        except PutError as exc:
            if _conditional(exc):
                return False
            raise
        return True

    def release_lease(self, owner: str) -> None:
        try:
            Item(LEASE_KEY).delete(condition=Item.owner == owner)
        except Exception as exc:  # a lost lease is the next owner's; nothing to undo
            if not _conditional(exc):
                raise

    # -- admission ------------------------------------------------------------------------------
    def active_bundles(self) -> list[Bundle]:
        return [item_bundle(i) for s in ACTIVE_BUNDLE_STATES
                for i in Item.by_status.query(f"BUNDLE#{s}")]

    def due_bundles(self, limit: int, at: float) -> list[Bundle]:
        if limit <= 0:
            return []
        rows = Item.by_status.query(f"BUNDLE#{BundleState.PENDING}", Item.status_at <= iso(at),
                                    limit=limit)
        return [item_bundle(i) for i in rows]

    def orphaned_launches(self, older_than: float) -> list[Launch]:
        rows = Item.by_status.query(f"LAUNCH#{LaunchState.STARTING}",
                                    Item.status_at <= iso(older_than))
        return [item_launch(i) for i in rows]

    # -- recording ------------------------------------------------------------------------------
    def record(self, bundles: list[Bundle], jobs: list[Job]) -> set[str]:
        by_id = {j.job_id: j for j in jobs}
        duplicates: set[str] = set()
        for group in _pack(bundles, by_id):
            self._record_group(group, by_id, duplicates)
        return duplicates

    def _record_group(self, group: list[Bundle], by_id: dict[str, Job],
                      duplicates: set[str]) -> None:
        while group:
            puts: list[tuple[str, str]] = []  # (type, id) in transaction order
            try:
                with TransactWrite(connection=self._conn) as tx:
                    for bundle in group:
                        tx.save(bundle_item(bundle), condition=Item.pk.does_not_exist())
                        puts.append(("bundle", bundle.bundle_id))
                        for job_id in bundle.job_ids:
                            tx.save(job_item(by_id[job_id]), condition=Item.pk.does_not_exist())
                            puts.append(("job", job_id))
                return
            except TransactWriteError as exc:
                taken = failed_conditions(exc)
                if not taken:
                    raise
            # Some items exist already: duplicate jobs (or, after a lost response, our own
            # bundle and jobs). Leave them out and write the rest.
            for index in taken:
                kind, ident = puts[index]
                if kind == "job":
                    duplicates.add(ident)
                else:
                    duplicates.update(next(b.job_ids for b in group if b.bundle_id == ident))
            for bundle in group:
                bundle.job_ids = [j for j in bundle.job_ids if j not in duplicates]
            dropped = {b.bundle_id for b in group if not b.job_ids}
            dropped |= {ident for i, (kind, ident) in enumerate(puts)
                        if kind == "bundle" and i in taken}
            group = [b for b in group if b.bundle_id not in dropped]
            for bundle in group:
                bundle.estimated_seconds = sum(by_id[j].estimated_seconds or 0
                                               for j in bundle.job_ids)

    def reject(self, rejections: list[Rejection]) -> None:
        for rej in rejections:
            item = rejection_item(rej, f"REJECT#{rej.key}")
            same = Item.pk.does_not_exist() | (Item.message_id == rej.message_id)
            try:
                item.save(condition=same)
            except PutError as exc:
                if not _conditional(exc):
                    raise
                # Another message was rejected under this job id: keep both.
                rejection_item(rej, f"REJECT#{rej.key}#{rej.message_id}").save()

    # -- launching ------------------------------------------------------------------------------
    def begin_launch(self, launch: Launch, bundles: list[Bundle]) -> None:
        t = now()
        try:
            with TransactWrite(connection=self._conn) as tx:
                tx.save(launch_item(launch), condition=Item.pk.does_not_exist())
                for b in bundles:
                    lifecycle.check_bundle(b.bundle_id, b.state, BundleState.LAUNCHING)
                    tx.update(
                        Item(f"BUNDLE#{b.bundle_id}"),
                        actions=[*_status(f"BUNDLE#{BundleState.LAUNCHING}", t),
                                 Item.attempt.set(b.attempt + 1),
                                 Item.launch_id.set(launch.launch_id),
                                 Item.task_definition.set(launch.task_definition)],
                        condition=(Item.state == b.state) & (Item.attempt == b.attempt),
                    )
        except TransactWriteError as exc:
            if failed_conditions(exc):
                raise ConflictError(f"launch {launch.launch_id}: a bundle changed under us "
                                    "(already launched by someone else?)") from None
            raise
        for b in bundles:
            b.state, b.attempt, b.launch_id = BundleState.LAUNCHING, b.attempt + 1, launch.launch_id
            b.task_definition = launch.task_definition

    def finish_launch(self, launch: Launch, outcome: LaunchOutcome,
                      retry_at: dict[str, float]) -> None:
        t = now()
        mine = (Item.state == BundleState.LAUNCHING) & (Item.launch_id == launch.launch_id)
        try:
            with TransactWrite(connection=self._conn) as tx:
                tx.update(Item(f"LAUNCH#{launch.launch_id}"),
                          actions=[*_status(f"LAUNCH#{LaunchState.DONE}", t),
                                   Item.task_arns.set([arn for _, arn in outcome.assigned]),
                                   Item.expires_at.set(int(t + LAUNCH_TTL_SECONDS))],
                          condition=Item.state == LaunchState.STARTING)
                for bundle_id, arn in outcome.assigned:
                    lifecycle.check_bundle(bundle_id, BundleState.LAUNCHING, BundleState.LAUNCHED)
                    tx.update(Item(f"BUNDLE#{bundle_id}"),
                              actions=[*_status(f"BUNDLE#{BundleState.LAUNCHED}", t),
                                       Item.task_arn.set(arn)],
                              condition=mine)
                    tx.save(Item(f"TASK#{arn}", bundle_id=bundle_id, launch_id=launch.launch_id,
                                 created_at=t, expires_at=int(t + POINTER_TTL_SECONDS)))
                for bundle_id, reason in outcome.failed:
                    lifecycle.check_bundle(bundle_id, BundleState.LAUNCHING, BundleState.PENDING)
                    due = retry_at[bundle_id]
                    tx.update(Item(f"BUNDLE#{bundle_id}"),
                              actions=[Item.state.set(BundleState.PENDING),
                                       Item.status_key.set(f"BUNDLE#{BundleState.PENDING}"),
                                       Item.status_at.set(iso(due)), Item.updated_at.set(t),
                                       Item.next_attempt_at.set(due),
                                       Item.launch_failures.add(1),
                                       Item.last_failure.set(reason[:1000]),
                                       Item.launch_id.remove()],
                              condition=mine)
        except TransactWriteError as exc:
            if failed_conditions(exc):
                raise ConflictError(f"launch {launch.launch_id} was finished already") from None
            raise

    # -- reads ----------------------------------------------------------------------------------
    def get_job(self, job_id: str) -> Job | None:
        item = _get(f"JOB#{job_id}")
        return item_job(item) if item else None

    def get_jobs(self, job_ids: list[str]) -> list[Job]:
        found = {i.pk: i for i in _batch_get(f"JOB#{j}" for j in job_ids)}
        return [item_job(found[f"JOB#{j}"]) for j in job_ids if f"JOB#{j}" in found]

    def get_bundle(self, bundle_id: str) -> Bundle | None:
        item = _get(f"BUNDLE#{bundle_id}")
        return item_bundle(item) if item else None

    def bundle_for_task(self, task_arn: str) -> Bundle | None:
        pointer = _get(f"TASK#{task_arn}")
        return self.get_bundle(pointer.bundle_id) if pointer and pointer.bundle_id else None

    def get_rejection(self, key: str) -> Rejection | None:
        item = _get(f"REJECT#{key}")
        return item_rejection(item) if item else None


def _status(status_key: str, t: float) -> list[Any]:
    return [Item.state.set(status_key.split("#", 1)[1]), Item.status_key.set(status_key),
            Item.status_at.set(iso(t)), Item.updated_at.set(t)]


def _get(pk: str) -> Item | None:
    try:
        return Item.get(pk, consistent_read=True)
    except DoesNotExist:
        return None


def _batch_get(keys: Iterable[str]) -> Iterator[Item]:
    return Item.batch_get(list(dict.fromkeys(keys)), consistent_read=True)


def _conditional(exc: Exception) -> bool:
    cause = getattr(exc, "cause_response_code", None)
    return cause == "ConditionalCheckFailedException"


def _pack(bundles: list[Bundle], by_id: dict[str, Job]) -> list[list[Bundle]]:
    """Group bundles into transactions: a bundle and all its jobs always share one."""
    groups: list[list[Bundle]] = []
    items = size = 0
    for bundle in bundles:
        b_items = 1 + len(bundle.job_ids)
        b_size = 1024 + sum(by_id[j].item_bytes() for j in bundle.job_ids)
        if not groups or items + b_items > MAX_TRANSACTION_ITEMS or \
                size + b_size > MAX_TRANSACTION_BYTES:
            groups.append([])
            items = size = 0
        groups[-1].append(bundle)
        items += b_items
        size += b_size
    return groups


__all__ = ["DynamoStore", "JobState"]
