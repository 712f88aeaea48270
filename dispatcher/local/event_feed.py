"""Local mode's readers of the job table's stream: read from moto as Lambda's event source
mappings read it on AWS, handed batch by batch to the stages the stack's two stream functions
run: the release of dependents (:mod:`dispatcher.stages.dependents`), always, and the job
state-change events (:mod:`dispatcher.stages.publish`), into a local sink, when asked for.

The stream is enabled when the feed starts (NEW_AND_OLD_IMAGES, as the template's). Its reads
are the feed's own and go to moto directly, as Lambda's polling of a stream is not a call of
the dispatcher or the runner (nor billed as one).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from dispatcher.aws import job_stream
from dispatcher.domain.job_events import Event
from dispatcher.ports.event_sink import EventSink
from dispatcher.settings import Config
from dispatcher.stages.dependents import Dependents
from dispatcher.stages.publish import publish_changes
from dispatcher.wiring import adapters

log = logging.getLogger("longjobs.local")
# Lambda's mapping reads at most BatchSize records a batch (the template's: 100).
BATCH = 100
# "Lambda polls shards in your DynamoDB stream for records at a base rate of 4 times per second"
# (https://docs.aws.amazon.com/lambda/latest/dg/with-ddb.html): the feed polls no faster.
POLL_SECONDS = 0.25
# How often the stream's shards are listed again: a table's stream gains a shard rarely (when a
# shard closes, hours apart on AWS), and each listing is a request to the endpoint, which
# serves the runners and the tick too.
DESCRIBE_SECONDS = 1.0


class PrintingSink(EventSink):
    """Each event as one line of JSON to ``write`` (``longjobs local --events``), and kept
    with the time it was delivered: the delay from the write is ``delivered - event.at``."""

    def __init__(self, write: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self._write = write
        self._clock = clock
        self._lock = threading.Lock()
        self.delivered: list[tuple[Event, float]] = []

    def publish(self, events: Sequence[Event]) -> None:
        t = self._clock()
        with self._lock:
            self.delivered += [(e, t) for e in events]
        if self._write is not None:
            for e in events:
                self._write(e.line())

    @property
    def events(self) -> list[Event]:
        with self._lock:
            return [e for e, _ in self.delivered]


class StreamFeed:
    """Polls the job table's stream every ``poll_seconds`` while there is nothing new (at
    once while there is), from its beginning; lists its shards at most once a
    ``DESCRIBE_SECONDS``."""

    def __init__(self, cfg: Config, sink: EventSink | None, dependents: Dependents | None = None,
                 *, poll_seconds: float = POLL_SECONDS, endpoint: str | None = None) -> None:
        """``endpoint``: where the stream is read (default: the settings' endpoint)."""
        self.cfg = cfg
        self.sink = sink
        self.dependents = dependents
        self.poll_seconds = poll_seconds
        at = cfg if endpoint is None else cfg.model_copy(update={"endpoint_url": endpoint})
        self._ddb = adapters.client("dynamodb", at)
        self._streams = adapters.client("dynamodbstreams", at)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.stream_arn = ""
        self.table_arn = ""
        # Seconds from each delivered record's commit (the stream's ApproximateCreationDateTime)
        # to its delivery: the stream's part of an event's delay (the latest only).
        self.lags: deque[float] = deque(maxlen=10_000)

    def start(self) -> StreamFeed:
        table = self._ddb.describe_table(TableName=self.cfg.table)["Table"]
        if not table.get("StreamSpecification", {}).get("StreamEnabled"):
            table = self._ddb.update_table(TableName=self.cfg.table, StreamSpecification={
                "StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"})[
                "TableDescription"]
        self.stream_arn = table["LatestStreamArn"]
        self.table_arn = table["TableArn"]
        self._thread = threading.Thread(target=self._run, daemon=True, name="job-events")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _iterators(self, known: dict[str, str | None]) -> None:
        """Start reading every shard not read yet, from its first record."""
        shards = self._streams.describe_stream(StreamArn=self.stream_arn)[
            "StreamDescription"]["Shards"]
        for shard in shards:
            if shard["ShardId"] not in known:
                known[shard["ShardId"]] = self._streams.get_shard_iterator(
                    StreamArn=self.stream_arn, ShardId=shard["ShardId"],
                    ShardIteratorType="TRIM_HORIZON")["ShardIterator"]

    def _run(self) -> None:
        iterators: dict[str, str | None] = {}
        listed = -DESCRIBE_SECONDS
        while not self._stop.is_set():
            busy = False
            try:
                if time.monotonic() - listed >= DESCRIBE_SECONDS:
                    self._iterators(iterators)
                    listed = time.monotonic()
                for shard, it in list(iterators.items()):
                    if it is None:  # closed and read to its end
                        continue
                    got = self._streams.get_records(ShardIterator=it, Limit=BATCH)
                    records: list[dict[str, Any]] = got.get("Records", [])
                    if records and not self._deliver(records):
                        continue  # read again from the same place, as Lambda would
                    iterators[shard] = got.get("NextShardIterator")
                    busy = busy or bool(records)
            except Exception as exc:  # an endpoint going away as local mode stops, a 5xx
                if self._stop.is_set():
                    return
                log.warning("job events: reading the stream failed: %r", exc)
            if not busy:
                self._stop.wait(self.poll_seconds)

    def _deliver(self, records: list[dict[str, Any]]) -> bool:
        # moto's records carry no eventSourceARN; Lambda's do (the publisher names the table
        # from it): give them the table's, so local events name it as AWS's do.
        for rec in records:
            rec.setdefault("eventSourceARN", self.stream_arn)
        changes = job_stream.changes(records)
        if self.dependents is not None:
            try:
                self.dependents.on_changes(changes)
            except Exception as exc:  # as the function failing: the batch is read again
                log.warning("releasing dependents failed; reading the batch again: %r", exc)
                return False
        failed = publish_changes(changes, self.sink) if self.sink is not None else []
        if failed:
            log.warning("job events not delivered; reading them again",
                        extra={"records": len(failed)})
            return False
        now = time.time()
        for rec in records:
            made = rec.get("dynamodb", {}).get("ApproximateCreationDateTime")
            if isinstance(made, datetime):
                self.lags.append(now - made.timestamp())
        return True
