"""A list by label or tenant goes on page by page by its cursor (the console's jobs page):
every job that carries the label and matches the rest is on exactly one page, newest first,
and no other, however many jobs carried the label before; a page looks at a bounded run of
the label's rows."""

from __future__ import annotations

import pytest

from dispatcher.ops.queries import Queries
from dispatcher.store import label_index
from tests.twins import Twins


def walk(q: Queries, limit: int, **select: str) -> list[list[str]]:
    pages: list[list[str]] = []
    after = None
    while True:
        page = q.page_labelled(limit=limit, after=after, label=select.get("label"),
                               tenant=select.get("tenant"), status=select.get("status"),
                               kind=select.get("kind"))
        pages.append([s.job_id for s in page.jobs])
        if page.next is None:
            return pages
        after = page.next


@pytest.fixture
def labelled(twins: Twins, monkeypatch: pytest.MonkeyPatch) -> Queries:
    monkeypatch.setattr(label_index, "LABEL_RUN", 4)
    monkeypatch.setattr(label_index, "LABEL_READ", 8)
    client = twins.client()
    later = twins.clock() + 3600
    for n in range(40):
        twins.clock.advance(1.0)
        client.submit("a" if n % 2 else "b", {}, job_id=f"j{n:02d}", not_before=later,
                      labels={"team": "night" if n % 4 else "day"},
                      tenant="acme" if n % 5 else None)
    twins.stages().tick.tick()
    return Queries(twins.store, queue=twins.queue, clock=twins.clock)


def test_every_labelled_job_is_on_exactly_one_page(labelled: Queries) -> None:
    pages = walk(labelled, 3, label="team=night")
    seen = [j for page in pages for j in page]
    assert seen == [f"j{n:02d}" for n in range(39, -1, -1) if n % 4]  # once each, newest first
    assert all(len(page) <= 3 for page in pages) and len(pages) >= 10
    assert [j for page in walk(labelled, 50, label="team=night") for j in page] == seen


def test_the_pages_filter_by_kind_state_and_tenant(labelled: Queries) -> None:
    kind_a = [j for page in walk(labelled, 2, label="team=night", kind="a") for j in page]
    assert kind_a == [f"j{n:02d}" for n in range(39, -1, -1) if n % 4 and n % 2]
    tenants = [j for page in walk(labelled, 5, tenant="acme") for j in page]
    assert tenants == [f"j{n:02d}" for n in range(39, -1, -1) if n % 5]
    assert walk(labelled, 5, label="team=night", status="SUCCEEDED") == [[]]


def test_the_first_page_is_what_jobs_list_shows(labelled: Queries) -> None:
    listed = [s.job_id for s in labelled.list_jobs(label="team=day", limit=4)]
    assert listed == walk(labelled, 4, label="team=day")[0] == ["j36", "j32", "j28", "j24"]


def test_the_console_pages_a_list_by_label(twins: Twins, labelled: Queries,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.twins.test_console import console

    monkeypatch.setattr("dispatcher.console.pages.PAGE_ROWS", 3)
    web, _ = console(twins)
    url, seen = "/jobs?label=team%3Dday", []
    while True:
        page = web.get(url).text
        seen += [f"j{n:02d}" for n in range(40) if f'href="/jobs/j{n:02d}"' in page]
        older = page.split('rel="next"', 1)[0].rsplit('<a href="', 1)[-1].split('"')[0] \
            if 'rel="next"' in page else None
        if older is None:
            break
        url = older.replace("&amp;", "&")
    assert sorted(seen) == [f"j{n:02d}" for n in range(0, 40, 4)] and len(seen) == 10
