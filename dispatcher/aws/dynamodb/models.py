"""The job table: one DynamoDB table, one pynamodb model, items told apart by their key prefix.

Key prefixes: ``JOB#<job_id>``, ``REJECT#<job_id or message_id>``, ``BUNDLE#<id>``,
``LAUNCH#<id>``, ``TASK#<task arn>`` (points a task at its bundle, read strongly consistent by the
runner), ``LEASE#dispatcher``. The ``by_status`` index (``status_key`` = ``<TYPE>#<STATE>``,
``status_at`` = ISO time) answers every "which items are in state S" question without a scan.
``infra/template.yaml`` declares the same schema; a test keeps them equal.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pynamodb.attributes import (
    JSONAttribute,
    ListAttribute,
    NumberAttribute,
    UnicodeAttribute,
)
from pynamodb.indexes import AllProjection, GlobalSecondaryIndex
from pynamodb.models import Model

STATUS_INDEX = "by_status"
TTL_ATTRIBUTE = "expires_at"


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class StatusIndex(GlobalSecondaryIndex["Item"]):  # type: ignore[no-untyped-call]
    class Meta:
        index_name = STATUS_INDEX
        projection = AllProjection()

    status_key = UnicodeAttribute(hash_key=True)
    status_at = UnicodeAttribute(range_key=True)


class Item(Model):
    """Every item of the table. Attributes that a given item type does not use stay null."""

    class Meta:
        table_name = "longjobs"  # replaced by bind()
        billing_mode = "PAY_PER_REQUEST"

    pk = UnicodeAttribute(hash_key=True)
    status_key = UnicodeAttribute(null=True)
    status_at = UnicodeAttribute(null=True)
    by_status = StatusIndex()
    expires_at = NumberAttribute(null=True)  # TTL: terminal jobs expire after a retention period

    state = UnicodeAttribute(null=True)
    created_at = NumberAttribute(null=True)
    updated_at = NumberAttribute(null=True)
    # job
    kind = UnicodeAttribute(null=True)
    payload = JSONAttribute(null=True)
    bundle_id = UnicodeAttribute(null=True)
    estimated_seconds = NumberAttribute(null=True)
    max_attempts = NumberAttribute(null=True)
    timeout_seconds = NumberAttribute(null=True)
    attempts = NumberAttribute(null=True)
    infra_attempts = NumberAttribute(null=True)
    enqueued_at = NumberAttribute(null=True)
    message_id = UnicodeAttribute(null=True)
    reason = UnicodeAttribute(null=True)
    result = JSONAttribute(null=True)
    error = JSONAttribute(null=True)
    history = JSONAttribute(null=True)
    checkpoint = JSONAttribute(null=True)
    job_id = UnicodeAttribute(null=True)
    body = UnicodeAttribute(null=True)
    # bundle
    job_ids = ListAttribute[Any](of=UnicodeAttribute, null=True)
    attempt = NumberAttribute(null=True)
    launch_id = UnicodeAttribute(null=True)
    task_arn = UnicodeAttribute(null=True)
    task_definition = UnicodeAttribute(null=True)
    next_attempt_at = NumberAttribute(null=True)
    launch_failures = NumberAttribute(null=True)
    last_failure = UnicodeAttribute(null=True)
    claimed_at = NumberAttribute(null=True)
    heartbeat_at = NumberAttribute(null=True)
    current_job = UnicodeAttribute(null=True)
    cancel_jobs = ListAttribute[Any](of=UnicodeAttribute, null=True)
    # launch
    bundle_ids = ListAttribute[Any](of=UnicodeAttribute, null=True)
    task_arns = ListAttribute[Any](of=UnicodeAttribute, null=True)
    # lease
    owner = UnicodeAttribute(null=True)
    lease_until = NumberAttribute(null=True)


def bind(table_name: str, region: str | None = None, host: str | None = None) -> None:
    """Point the model at the configured table and endpoint (pynamodb keeps them on Meta)."""
    meta: Any = Item.Meta
    meta.table_name = table_name
    if region:
        meta.region = region
    meta.host = host
    Item._connection = None
    StatusIndex._connection = None  # type: ignore[attr-defined]


def key_schema() -> dict[str, Any]:
    """The table's key schema and indexes, as the infra template must declare them."""
    return {
        "hash_key": "pk",
        "attributes": {"pk": "S", "status_key": "S", "status_at": "S"},
        "indexes": {STATUS_INDEX: {"hash_key": "status_key", "range_key": "status_at",
                                   "projection": "ALL"}},
        "ttl_attribute": TTL_ATTRIBUTE,
    }
