"""The system model's rate limits' checks (tests/model_tokens.py): ``rate_bound`` (no bucket
grants more than rate x window + burst in any window), ``tokens_taken`` (no task starts for a
bundle whose tokens were not granted) and ``rate_limit`` (a bucket the tick says is short is).

Jobs taking tokens of one key, and of a ``{tenant}`` key, with runners' ``ctx.acquire`` among
them, run through ticks under limits an operator sets. Today every check holds; with the
tick's look and take skipped, ``tokens_taken`` sees it; with the table's take granting past
the bound, ``rate_bound`` does; with the tick calling full buckets short, ``rate_limit``."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dispatcher.domain import rate_limits
from dispatcher.domain.jobs import JobState
from dispatcher.domain.rate_limits import RateLimit
from dispatcher.domain.waiting import RateWait
from dispatcher.stages.tick_tokens import TickTokens
from dispatcher.store.rate_buckets import RateBuckets
from tests.twins import test_system_model as model
from tests.twins.test_system_model_gaps import machines, rounds, seen_by, spec

__all__ = ["machines"]  # the fixture, used by name


def rate_limited(m: model.SystemModel) -> None:
    m.change_settings(concurrency="2", limits="", tasks="6")
    m.rate_limit("api", "2/min", 1)
    m.rate_limit("api:{tenant}", "1/s", 2)
    m.rate_limit("wide", "100/s", 100)  # plenty: a claim that it is short is false
    m.submit(spec(uses={"api": 1}), 6, False, "succeed")
    m.submit(spec(uses={"api:{tenant}": 2}, tenant="t1"), 3, False, "succeed")
    m.submit(spec(tenant="t2"), 4, False, "acquire")  # ctx.acquire("api:{tenant}", 1)
    m.submit(spec(uses={"wide": 1}), 2, False, "succeed")
    rounds(m, 10, "by_nature", 30.0)


def test_the_rate_limits_hold_at_every_step(machines: Callable[[], model.SystemModel]) -> None:
    for check in ("rate_bound", "tokens_taken", "rate_limit"):
        m = machines()
        assert seen_by(m, check, rate_limited) == [], check
    jobs = m.twins.jobs()
    assert {j.state for j in jobs if j.uses} == {JobState.SUCCEEDED}
    granted = {bucket for _, bucket, _, _ in m.tokens.grants}
    # the launches' takes and the runners' acquires
    assert granted == {"api", "api:{t1}", "api:{t2}", "wide"}


def test_tokens_taken_sees_a_launch_without_them(
        machines: Callable[[], model.SystemModel], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(TickTokens, "admit", lambda self, bundles: bundles)
    monkeypatch.setattr(TickTokens, "take", lambda self, bundles: bundles)
    seen = seen_by(machines(), "tokens_taken", rate_limited)
    assert seen and "were needed by the bundles started this step" in seen[0]


def _grant_always(self: RateBuckets, bucket: str, shard: int, n: float, limit: RateLimit,
                  now: float, known: float | None) -> float | None:
    return now + n * limit.interval


def test_rate_bound_sees_a_bucket_granting_past_it(
        machines: Callable[[], model.SystemModel], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(RateBuckets, "take", _grant_always)
    monkeypatch.setattr(rate_limits, "grant", lambda tat, now, n, limit: now)
    seen = seen_by(machines(), "rate_bound", rate_limited)
    assert seen and "over its bound" in seen[0]


def _short(self: TickTokens) -> dict[str, RateWait]:
    """The broken rule: every bucket the tick saw is called short, full or not."""
    now = self._clock()
    return {rate_limits.resolve(declared, b.tenant): RateWait(now + 60.0, n, 2.0, declared)
            for b in self._seen.values() for declared, n in (b.uses or {}).items()}


def test_rate_limit_sees_a_full_bucket_called_short(
        machines: Callable[[], model.SystemModel], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(TickTokens, "waits", _short)
    seen = seen_by(machines(), "rate_limit", rate_limited)
    assert seen and "could grant them" in seen[0]
