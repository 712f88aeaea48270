"""Operator actions on the job table: cancel and retry.

A pending job whose bundle has not been launched is cancelled at once; one that sits in an
active bundle gets a cancel *request* on its bundle, which the task's runner reads at its next
heartbeat and honours cooperatively (only the runner writes the jobs of a running bundle).
"""

from __future__ import annotations

from typing import Any

from dispatcher.aws.dynamodb.codec import bundle_item
from dispatcher.aws.dynamodb.models import Item, iso
from dispatcher.aws.dynamodb.runs import transaction
from dispatcher.domain import lifecycle
from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.errors import ConflictError, JobNotFound, LongjobsError
from dispatcher.domain.jobs import TERMINAL_JOB_STATES, Job, JobState, new_id, now

TRIES = 3


class ControlWrites:
    """Mixin of DynamoStore: needs ``self._conn``, ``get_job``, ``get_bundle``, ``get_jobs``."""

    _conn: Any

    def _job(self, job_id: str) -> Job:
        job: Job | None = self.get_job(job_id)  # type: ignore[attr-defined]
        if job is None:
            raise JobNotFound("no such job", job_id=job_id)
        return job

    def cancel(self, job_id: str) -> Job:
        for _ in range(TRIES):
            job = self._job(job_id)
            if job.state in TERMINAL_JOB_STATES:
                raise LongjobsError(f"job is already {job.state}; nothing to cancel",
                                    job_id=job_id)
            bundle: Bundle | None = self.get_bundle(job.bundle_id)  # type: ignore[attr-defined]
            try:
                if job.state == JobState.PENDING and (bundle is None
                                                      or bundle.state == BundleState.PENDING):
                    self._cancel_now(job, bundle)
                else:
                    self._request_cancel(job, bundle)
                return self._job(job_id)
            except ConflictError:
                continue  # the job or its bundle moved on: look again
        raise ConflictError("job kept changing while cancelling; try again", job_id=job_id)

    def _cancel_now(self, job: Job, bundle: Bundle | None) -> None:
        lifecycle.check_job(job.job_id, job.state, JobState.CANCELLED)
        t = now()
        others = [] if bundle is None else [
            j for j in self.get_jobs(bundle.job_ids)  # type: ignore[attr-defined]
            if j.job_id != job.job_id and j.bundle_id == bundle.bundle_id]
        close = bundle is not None and all(j.state in TERMINAL_JOB_STATES for j in others)
        with transaction(self._conn, "changed while cancelling", job_id=job.job_id) as tx:
            tx.update(Item(f"JOB#{job.job_id}"), actions=[
                Item.state.set(str(JobState.CANCELLED)),
                Item.status_key.set(f"JOB#{JobState.CANCELLED}"), Item.updated_at.set(t),
                Item.reason.set("cancelled on request before it started")],
                condition=Item.state == str(JobState.PENDING))
            if bundle is not None:
                cond = (Item.state == str(BundleState.PENDING)) & (
                    Item.attempt == bundle.attempt)
                if close:
                    lifecycle.check_bundle(bundle.bundle_id, bundle.state, BundleState.DONE)
                    tx.update(Item(f"BUNDLE#{bundle.bundle_id}"), actions=[
                        Item.state.set(str(BundleState.DONE)),
                        Item.status_key.set(f"BUNDLE#{BundleState.DONE}"),
                        Item.status_at.set(iso(t)), Item.updated_at.set(t)], condition=cond)
                else:
                    tx.condition_check(Item, f"BUNDLE#{bundle.bundle_id}", condition=cond)

    def _request_cancel(self, job: Job, bundle: Bundle | None) -> None:
        if bundle is None:
            raise LongjobsError("job has no bundle to stop", job_id=job.job_id)
        item = Item(f"BUNDLE#{bundle.bundle_id}")
        try:
            # list_append onto if_not_exists(cancel_jobs, []): one atomic update.
            item.update(actions=[Item.cancel_jobs.set(
                (Item.cancel_jobs | []).append([job.job_id]))],
                condition=Item.state.is_in(*[str(s) for s in (
                    BundleState.LAUNCHING, BundleState.LAUNCHED, BundleState.RUNNING)]))
        except Exception as exc:
            if getattr(exc, "cause_response_code", "") == "ConditionalCheckFailedException":
                raise ConflictError("bundle changed", job_id=job.job_id) from None
            raise

    def retry(self, job_id: str) -> Job:
        """A FAILED or CANCELLED job runs again with a fresh budget, in a new bundle."""
        job = self._job(job_id)
        if job.state not in (JobState.FAILED, JobState.CANCELLED):
            raise LongjobsError(f"only FAILED or CANCELLED jobs can be retried, not {job.state}",
                                job_id=job_id)
        lifecycle.check_job(job_id, job.state, JobState.PENDING)
        t = now()
        bundle = Bundle(bundle_id=new_id(), job_ids=[job_id],
                        estimated_seconds=job.estimated_seconds or 0.0, next_attempt_at=t,
                        created_at=t)
        with transaction(self._conn, "job changed while retrying; try again",
                         job_id=job_id) as tx:
            tx.save(bundle_item(bundle), condition=Item.pk.does_not_exist())
            tx.update(Item(f"JOB#{job_id}"), actions=[
                Item.state.set(str(JobState.PENDING)),
                Item.status_key.set(f"JOB#{JobState.PENDING}"), Item.updated_at.set(t),
                Item.attempts.set(0), Item.infra_attempts.set(0),
                Item.bundle_id.set(bundle.bundle_id),
                Item.reason.set(f"retried on request after {job.state}")],
                condition=Item.state == str(job.state))
        return self._job(job_id)


    def running_jobs(self) -> list[Job]:
        from dispatcher.aws.dynamodb.codec import item_job

        return [item_job(i) for i in Item.by_status.query(f"JOB#{JobState.RUNNING}")]

    def fail_overdue(self, job: Job, reason: str) -> None:
        """Fail a RUNNING job its runner did not stop in time (conditional: still that run)."""
        lifecycle.check_job(job.job_id, JobState.RUNNING, JobState.FAILED)
        try:
            Item(f"JOB#{job.job_id}").update(actions=[
                Item.state.set(str(JobState.FAILED)),
                Item.status_key.set(f"JOB#{JobState.FAILED}"), Item.updated_at.set(now()),
                Item.reason.set(reason), Item.error.set({"type": "Timeout", "message": reason})],
                condition=(Item.state == str(JobState.RUNNING))
                & (Item.attempts == job.attempts) & (Item.bundle_id == (job.bundle_id or "")))
        except Exception as exc:
            if getattr(exc, "cause_response_code", "") == "ConditionalCheckFailedException":
                raise ConflictError("job moved on", job_id=job.job_id) from None
            raise
