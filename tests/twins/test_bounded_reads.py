"""Operator reads cost what they show, never the history: ``stats``, ``top`` and ``jobs list``
against a table holding a million finished jobs (30 days' retention of a nightly batch would be
six) read exactly what they read against the same table without them.

The table is :class:`tests.history_table.HistoryTable`: the twin, with the history held
arithmetically behind its own items and every item a read reaches counted as DynamoDB charges
it (a COUNT query reads every item its key condition matches). Its answers are checked here
against the plain twin holding the same items.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from dispatcher.domain.jobs import JobState
from dispatcher.ops.queries import Queries
from dispatcher.ops.top import Top
from dispatcher.ports.table import Eq, Gt, Put
from dispatcher.store import Store
from dispatcher.store import codec as r
from dispatcher.store.job_lists import FILTERED_READ
from dispatcher.testing.memory_table import MemoryTable
from tests.history_table import History, HistoryTable
from tests.twins import Twins, finish_as_runner

T0 = 1_700_000_000.0
DAY = 86_400.0
HISTORY = 1_000_000
# Created over the 30 days' retention before the window: one a second, from 30 days ago.
HISTORY_START = T0 - 30 * DAY


def world(history: History | None) -> tuple[Twins, HistoryTable]:
    """Today's work through the production paths (producer, tick, the runner's writes), with
    ``history`` behind it: 2 SUCCEEDED, 1 FAILED, 1 CANCELLED, 1 REJECTED, 2 RUNNING and
    3 PENDING (two launched, one refused by RunTask)."""
    tw = Twins(T0)
    table = HistoryTable(tw.clock, history)
    tw.table, tw.store = table, Store(table, clock=tw.clock)
    client = tw.client()
    for n in range(7):
        client.submit("k", {}, job_id=f"j{n}")
    client.submit("k", {}, job_id="later", not_before=T0 + DAY)
    tw.queue.send([("bad", "{not json")])
    tw.stages(LONGJOBS_BUNDLE_MAX_JOBS="1").tick.tick()
    for job_id, state in (("j0", JobState.SUCCEEDED), ("j1", JobState.SUCCEEDED),
                          ("j2", JobState.FAILED), ("j3", JobState.RUNNING),
                          ("j4", JobState.RUNNING)):
        finish_as_runner(tw.store, job_id, state)
    tw.store.cancel("later")  # waiting for tomorrow: cancelled at once
    tw.clock.advance(60)
    tw.launcher.inject_failures(["RESOURCE:MEMORY"])
    client.submit("k", {}, job_id="refused")
    tw.stages(LONGJOBS_BUNDLE_MAX_JOBS="1", LONGJOBS_LAUNCH_BACKOFF_SECONDS="3600").tick.tick()
    tw.clock.advance(60)
    return tw, table


@pytest.fixture(scope="module")
def history() -> History:
    return History(HISTORY, HISTORY_START)


def test_the_history_twin_answers_as_the_twin() -> None:
    """At a small size, every read of the history table answers as the plain twin holding the
    same items does: counts, ranges, limits, both orders, filters and pages."""
    hist = History(400, T0 - DAY, step=37.0)
    tw, table = world(hist)
    plain = MemoryTable(tw.clock)
    for rec in table.snapshot().values():
        plain.write(Put(rec))
    for part in hist.parts.values():
        for i in part:
            plain.write(Put(hist.record(i)))
    keys = sorted({rec.status_key for rec in plain.snapshot().values() if rec.status_key})
    assert len(keys) > 30
    cut, top = r.iso(T0 - DAY + 5000), r.iso(T0 - DAY + 12_000)
    wheres = [None, Eq("kind", "history"), Gt("attempt", 1)]
    for key in keys:
        for at_least in (None, cut):
            for where in wheres:
                assert table.count(key, at_least=at_least, where=where) == \
                    plain.count(key, at_least=at_least, where=where), (key, at_least, where)
        for kw in ({}, {"at_least": cut}, {"at_most": top}, {"at_least": cut, "at_most": top}):
            for newest_first in (False, True):
                for limit in (None, 1, 7):
                    for where in wheres:
                        args: dict[str, Any] = {**kw, "newest_first": newest_first,
                                                "limit": limit, "where": where}
                        got = table.query(key, **args)
                        assert got == plain.query(key, **args), (key, args)
                        if got:
                            assert table.query(key, after=got[0], **args) == \
                                plain.query(key, after=got[0], **args), (key, args)
    some = [hist.pk(0), hist.pk(3), hist.pk(-1), r.job_key("j0"), "JOB#nothing"]
    assert table.get_many(some) == plain.get_many(some)
    assert [table.get(pk) for pk in some] == [plain.get(pk) for pk in some]


def test_stats_reads_what_it_shows_not_the_history(history: History) -> None:
    """``stats`` against a million finished jobs reads exactly the items it reads without
    them: the active jobs, the finished ones of its window, the active and recent bundles."""
    tw, table = world(None)
    without, read_without = table.reads(Queries(tw.store, clock=tw.clock).stats)
    tw, table = world(history)
    queries = Queries(tw.store, clock=tw.clock)
    stats, read = table.reads(queries.stats)
    assert read == read_without, f"stats read {read} items; {read_without} without the history"
    assert read < 60  # what it shows: a dozen jobs and their bundles, a few counted twice
    assert stats.to_json() == without.to_json()
    assert stats.jobs == {"PENDING": 3, "RUNNING": 2, "SUCCEEDED": 2, "FAILED": 1,
                          "CANCELLED": 1, "REJECTED": 1}
    assert stats.launch_failures_last_hour == {"RESOURCE:MEMORY": 1}
    assert stats.finished_since == T0 + 120 - DAY  # the window is said: the last 24 h
    assert json.loads(json.dumps(stats.to_json()))["finished_since"] == \
        r.iso(T0 + 120 - DAY)
    # The history is there: a window reaching back over it counts it (and reads it).
    longer, read = table.reads(lambda: queries.stats(since=HISTORY_START))
    assert longer.jobs["SUCCEEDED"] == 2 + HISTORY // 4 and read > HISTORY


def test_top_and_the_waiting_list_read_what_they_show(history: History) -> None:
    """``top`` and ``jobs list --waiting-for`` read the same items with the history behind
    the work as without it."""
    reads: list[dict[str, int]] = []
    for behind in (None, history):
        tw, table = world(behind)
        q = Queries(tw.store, clock=tw.clock)
        calls: dict[str, Callable[[], Any]] = {
            "top": Top(tw.store, queue=tw.queue, clock=tw.clock, window_seconds=3600).snapshot,
            "top_day": Top(tw.store, clock=tw.clock, window_seconds=DAY).snapshot,
            "waiting": functools.partial(q.list_jobs, waiting_for="capacity")}
        reads.append({name: table.reads(call)[1] for name, call in calls.items()})
    assert reads[1] == reads[0]
    assert max(reads[1].values()) < 60


def test_a_list_reads_its_limit_of_each_partition_not_the_history(history: History) -> None:
    """``jobs list`` reads at most ``limit`` items of each index partition of the states it
    lists (eight shards and the unsharded key: nine a state), newest first, however long the
    history behind them."""
    tw, table = world(history)
    q = Queries(tw.store, clock=tw.clock)
    rows, read = table.reads(lambda: q.list_jobs(status="FAILED", limit=100))
    assert len(rows) == 100 and rows[0].job_id == "j2"
    assert read <= 9 * 100
    rows, read = table.reads(lambda: q.list_jobs(status="SUCCEEDED", limit=5))
    assert [s.job_id for s in rows[:2]] == ["j1", "j0"] and read <= 9 * 5
    rows, read = table.reads(lambda: q.list_jobs(limit=1000))
    assert len(rows) == 1000 and read <= 6 * 9 * 1000


def test_stats_says_its_window_and_takes_another(monkeypatch: pytest.MonkeyPatch) -> None:
    """``longjobs stats`` counts the finished jobs of the last 24 h unless ``--since`` gives a
    duration or a time, and says which; a window that ends before today's work counts none
    of it, and the active jobs are counted whatever the window."""
    from typer.testing import CliRunner

    from dispatcher.cli import jobs_commands
    from dispatcher.cli.app import app

    tw, _ = world(None)
    queries = Queries(tw.store, clock=tw.clock)  # what the client's stats() calls, on the twins
    monkeypatch.setattr(jobs_commands, "client", lambda: SimpleNamespace(stats=queries.stats))
    runner = CliRunner()

    def stats(*args: str) -> Any:
        result = runner.invoke(app, ["stats", "--json", *args])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    now = T0 + 120
    assert stats()["finished_since"] == r.iso(now - DAY)
    assert stats()["finished_window_seconds"] == DAY
    assert stats("--since", "90s")["finished_since"] == r.iso(now - 90)
    # Today's work was admitted 120 s ago: a 90 s window holds none of the finished jobs.
    assert stats("--since", "90s")["jobs"] == {"PENDING": 3, "RUNNING": 2, "SUCCEEDED": 0,
                                               "FAILED": 0, "CANCELLED": 0, "REJECTED": 0}
    assert stats("--since", "2m")["jobs"]["SUCCEEDED"] == 2
    assert stats("--since", r.iso(T0)[:16])["finished_since"] == r.iso(T0 - T0 % 60)
    assert stats("--since", "2023-11-14T22:13:20+00:00")["jobs"]["SUCCEEDED"] == 2
    text = runner.invoke(app, ["stats"]).stdout
    assert "finished: admitted since 2023-11-13 22:15:20 UTC (24 h); active: all" in text
    bad = runner.invoke(app, ["stats", "--since", "yesterday"])
    assert bad.exit_code == 2 and bad.stderr.startswith("error: --since 'yesterday' is neither")


def test_a_list_of_one_kind_looks_among_the_newest_not_the_whole_history(
        history: History) -> None:
    """A filter is applied after DynamoDB reads the rows: a list of a rare kind over the
    finished states would read their whole history. Without ``--since`` it looks among the
    newest FILTERED_READ rows of each partition; with it, within the window asked for."""
    tw, table = world(history)
    q = Queries(tw.store, clock=tw.clock)
    finished_partitions = 4 * 9
    rows, read = table.reads(lambda: q.list_jobs(kind="rare"))
    assert rows == [] and read <= finished_partitions * FILTERED_READ + 60
    rows, read = table.reads(lambda: q.list_jobs(kind="k", status="FAILED"))
    assert [s.job_id for s in rows] == ["j2"] and read <= 9 * FILTERED_READ
    rows, read = table.reads(lambda: q.list_jobs(kind="history", status="FAILED", limit=3))
    assert len(rows) == 3 and all(s.kind == "history" for s in rows) and read <= 2 * 9 * 3
    rows, read = table.reads(lambda: q.list_jobs(kind="rare", since_seconds=DAY))
    assert rows == [] and read < 60  # the window's rows only
