"""A list by waiting reason goes on page by page by its cursor (the console's jobs page):
every job waiting so is on exactly one page, newest first, and no other; a page that looked
at its run of jobs and found none says there are more to look at."""

from __future__ import annotations

import pytest

from dispatcher.domain.errors import LongjobsError
from dispatcher.ops import queries as queries_module
from dispatcher.ops.queries import Queries
from tests.twins import Twins


def walk(q: Queries, reason: str, limit: int) -> list[list[str]]:
    pages, after = [], None
    while True:
        page = q.page_waiting(reason, limit=limit, after=after)
        pages.append([s.job_id for s in page.jobs])
        if page.next is None:
            return pages
        after = page.next


def test_the_pages_hold_every_job_waiting_so_once(twins: Twins,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queries_module, "WAITING_RUN", 4)
    monkeypatch.setattr(queries_module, "WAITING_READ", 8)
    client = twins.client()
    later = twins.clock() + 3600
    for n in range(30):
        # Every third job is held until later (it waits as scheduled); the rest wait for
        # the one job they depend on.
        twins.clock.advance(1.0)
        if n % 3 == 0:
            client.submit("k", {}, job_id=f"s{n:02d}", not_before=later)
        else:
            client.submit("k", {}, job_id=f"d{n:02d}", depends_on=["root"])
    client.submit("k", {}, job_id="root", not_before=later + 3600)
    twins.stages().tick.tick()
    q = Queries(twins.store, queue=twins.queue, clock=twins.clock)
    pages = walk(q, "scheduled", limit=3)
    seen = [j for page in pages for j in page]
    assert sorted(seen) == sorted(["root", *(f"s{n:02d}" for n in range(0, 30, 3))]), pages
    held = [j for j in seen if j.startswith("s")]
    assert held == sorted(held, reverse=True)  # newest first (all held to the same time)
    assert all(len(page) <= 3 for page in pages) and len(pages) > 4
    waiting = [j for page in walk(q, "dependencies", limit=50) for j in page]
    assert waiting == [f"d{n:02d}" for n in range(29, -1, -1) if n % 3]


def test_an_unknown_reason_is_a_clear_error(twins: Twins) -> None:
    with pytest.raises(LongjobsError, match="unknown waiting reason 'nope'"):
        Queries(twins.store, clock=twins.clock).page_waiting("nope")


def test_the_console_pages_a_list_by_waiting_reason(twins: Twins,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.twins.test_console import console

    monkeypatch.setattr("dispatcher.console.pages.PAGE_ROWS", 2)
    client = twins.client()
    for n in range(5):
        twins.clock.advance(1.0)
        client.submit("k", {}, job_id=f"s{n}", not_before=twins.clock() + 3600)
    twins.stages().tick.tick()
    web, _ = console(twins)
    url, seen = "/jobs?waiting_for=scheduled", []
    while True:
        page = web.get(url).text
        seen += [j for j in ("s0", "s1", "s2", "s3", "s4") if f'href="/jobs/{j}"' in page]
        older = page.split('rel="next"', 1)[0].rsplit('<a href="', 1)[-1].split('"')[0] \
            if 'rel="next"' in page else None
        if older is None:
            break
        url = older.replace("&amp;", "&")
    assert sorted(seen) == ["s0", "s1", "s2", "s3", "s4"] and len(seen) == 5
