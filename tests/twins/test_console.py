"""The web console in-process on the twins (Starlette's test client): what each page shows,
its pages of jobs, and its rules — loopback host names only, read-only unless operating,
every change a same-origin POST with the CSRF token, everything from jobs escaped, a CSP
with no inline script. The walk in a real browser: tests/integration/test_console_browser.py."""

from __future__ import annotations

import re
from typing import Any

import pytest
from markupsafe import escape
from starlette.testclient import TestClient

from dispatcher.console.guard import CSP, Guard
from dispatcher.console.routes import console_app
from dispatcher.console.source import ConsoleSource
from dispatcher.domain.jobs import JobState
from dispatcher.ops.client import JobClient
from dispatcher.ops.dead_letters import DeadLetters
from dispatcher.ops.queries import Queries
from dispatcher.ops.top import Top
from dispatcher.store import JobUpdate
from dispatcher.testing.memory_queue import MemoryQueue
from tests.helpers import wait_for
from tests.twins import ENV, Twins, finish_as_runner

ORIGIN = "http://127.0.0.1:8765"
HOSTILE = ['<script>alert(1)</script>', '"><img src=x onerror=alert(2)>',
           "javascript:alert(3)"]


def console(twins: Twins, *, operate: bool = False) -> tuple[TestClient, Guard]:
    source = ConsoleSource(twins.client(), Queries(twins.store, queue=twins.queue,
                                                   clock=twins.clock),
                           Top(twins.store, queue=twins.queue, clock=twins.clock),
                           has_dead_letters=False)
    guard = Guard.serving("127.0.0.1", 8765, operate=operate)
    return TestClient(console_app(source, guard, clock=twins.clock), base_url=ORIGIN), guard


def failed(twins: Twins, job_id: str, *, kind: str = "k", message: str = "it broke",
           payload: Any = None) -> None:
    twins.client().submit(kind, payload if payload is not None else {}, job_id=job_id,
                          max_attempts=1)
    twins.stages().tick.tick()
    fence = finish_as_runner(twins.store, job_id, JobState.RUNNING)
    twins.store.apply(fence, [JobUpdate(job_id, JobState.RUNNING, JobState.FAILED, error={
        "type": "ValueError", "message": message,
        "traceback": f"Traceback (most recent call last):\n  ValueError: {message}\n"})])


def test_every_page_answers_with_the_csp_and_no_inline_script(twins: Twins) -> None:
    failed(twins, "j1")
    web, _ = console(twins)
    for path in ("/", "/jobs", "/jobs/j1", "/bulk", "/deployments", "/dead-letters",
                 "/bulk?verb=retry&status=FAILED&preview=1"):
        page = web.get(path)
        assert page.status_code == 200, (path, page.text[:500])
        assert page.headers["content-security-policy"] == CSP
        assert "'unsafe-inline'" not in CSP and "script-src 'self'" in CSP
        assert page.headers["x-frame-options"] == "DENY"
        # Every <script> has a src of the console's own; no handler attribute anywhere.
        for tag in re.findall(r"<script[^>]*>", page.text):
            assert 'src="/static/' in tag, tag
        assert not re.search(r"\son[a-z]+=", page.text), path
    assert web.get("/static/console.js").status_code == 200


def test_a_failed_job_shows_its_traceback_attempts_and_payload(twins: Twins) -> None:
    failed(twins, "j1", message="disk full", payload={"rows": 3})
    web, _ = console(twins)
    page = web.get("/jobs/j1").text
    assert "FAILED" in page and "ValueError: disk full" in page
    assert "Traceback (most recent call last)" in page
    assert "&#34;rows&#34;: 3" in page  # the payload, as JSON text
    assert "Attempts" in page and "data-refresh" not in page  # settled: it stops following
    listed = web.get("/jobs?state=FAILED").text
    assert 'href="/jobs/j1"' in listed


def test_a_pending_job_says_what_it_waits_for_and_follows_itself(twins: Twins) -> None:
    twins.client().submit("k", {}, job_id="later", not_before=twins.clock() + 3600)
    twins.stages().tick.tick()
    web, _ = console(twins)
    page = web.get("/jobs/later").text
    assert "Waiting for: scheduled until" in page
    assert 'data-refresh="3"' in page


def test_what_jobs_carry_is_rendered_as_text(twins: Twins) -> None:
    for n, bad in enumerate(HOSTILE):
        failed(twins, f"x{n}", kind="k", message=bad, payload={"html": bad})
    web, _ = console(twins)
    for n, bad in enumerate(HOSTILE):
        for page in (web.get(f"/jobs/x{n}").text, web.get("/jobs?state=FAILED").text):
            assert "<script>alert" not in page and "<img src=x" not in page
            assert 'href="javascript:' not in page
        assert str(escape(bad)) in web.get(f"/jobs/x{n}").text  # shown, as text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in web.get("/jobs/x0").text


def test_an_id_that_is_no_path_stays_one_path_segment(twins: Twins) -> None:
    web, _ = console(twins)
    page = web.get("/jobs", params={"q": "javascript:alert(1)"})
    assert page.status_code == 404 and "No job has the id" in page.text
    twins.client().submit("k", {}, job_id="a:b")  # a child-like id: its colon is encoded
    twins.stages().tick.tick()
    found = web.get("/jobs", params={"q": "a:b"}, follow_redirects=False)
    assert found.status_code == 303 and found.headers["location"] == "/jobs/a%3Ab"
    assert web.get("/jobs/a%3Ab").status_code == 200


def test_pages_of_jobs_follow_the_cursor_without_repeats_or_gaps(twins: Twins) -> None:
    ids = [f"p{n:03d}" for n in range(120)]
    for n, job_id in enumerate(ids):
        twins.clock.advance(1 if n % 7 else 0)  # some share their creation time
        twins.client().submit("k", {}, job_id=job_id)
    twins.stages(LONGJOBS_MAX_RUNNING_TASKS="500").tick.tick()  # every one recorded at once
    assert len(twins.jobs()) == len(ids)
    web, _ = console(twins)
    seen: list[str] = []
    url: str | None = "/jobs?state=PENDING"
    while url:
        page = web.get(url).text
        seen += re.findall(r'href="/jobs/(p\d{3})"', page)
        nxt = re.search(r'href="([^"]+)" rel="next"', page)
        url = nxt.group(1).replace("&amp;", "&") if nxt else None
    assert sorted(seen) == ids and len(seen) == len(set(seen))


def test_jobs_created_more_than_a_while_ago(twins: Twins) -> None:
    for batch in range(3):  # recorded 100 s apart (a job's creation is its recording)
        for n in range(3):
            twins.client().submit("k", {}, job_id=f"b{batch}-{n}")
        twins.stages().tick.tick()
        twins.clock.advance(100)
    web, _ = console(twins)
    older = re.findall(r'href="/jobs/(b\d-\d)"', web.get("/jobs?until=150s").text)
    assert sorted(older) == ["b0-0", "b0-1", "b0-2", "b1-0", "b1-1", "b1-2"]


def test_bad_filters_and_unknown_pages_say_what_to_do(twins: Twins) -> None:
    web, _ = console(twins)
    bad = web.get("/jobs?state=DONE")
    assert bad.status_code == 400 and "is not one of" in bad.text
    assert web.get("/jobs?since=soon").status_code == 400
    assert web.get("/jobs?after=nonsense").status_code == 400
    assert "start again from the first page" in web.get("/jobs?after=nonsense").text
    assert web.get("/nowhere").status_code == 404


def test_a_read_only_console_refuses_every_change(twins: Twins) -> None:
    twins.client().submit("k", {}, job_id="j1")
    twins.stages().tick.tick()
    web, guard = console(twins)
    assert "Cancel</button>" not in web.get("/jobs/j1").text
    refused = web.post("/jobs/j1/cancel", data={"csrf": guard.token},
                       headers={"Origin": ORIGIN})
    assert refused.status_code == 403 and "--operate" in refused.text
    assert twins.job("j1").state == JobState.PENDING


def test_a_change_needs_the_token_and_the_consoles_own_origin(twins: Twins) -> None:
    # Scheduled for later: no task runs it, so a cancel is done at once.
    twins.client().submit("k", {}, job_id="j1", not_before=twins.clock() + 3600)
    twins.stages().tick.tick()
    web, guard = console(twins, operate=True)
    assert "Cancel</button>" in web.get("/jobs/j1").text
    for data, headers in (({}, {"Origin": ORIGIN}),
                          ({"csrf": "guess"}, {"Origin": ORIGIN}),
                          ({"csrf": "gu\u00e9ss"}, {"Origin": ORIGIN}),
                          ({"csrf": guard.token}, {"Origin": "http://evil.example"}),
                          ({"csrf": guard.token}, {"Origin": "http://localhost"}),
                          ({"csrf": guard.token}, {"Origin": "https://127.0.0.1:8765"}),
                          ({"csrf": guard.token}, {"Origin": "null"}),
                          ({"csrf": guard.token}, {})):
        refused = web.post("/jobs/j1/cancel", data=data, headers=headers)
        assert refused.status_code == 403, (data, headers)
    assert twins.job("j1").state == JobState.PENDING
    done = web.post("/jobs/j1/cancel", data={"csrf": guard.token},
                    headers={"Origin": ORIGIN}, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == "/jobs/j1?done=cancelled"
    assert twins.job("j1").state == JobState.CANCELLED
    assert "Cancelled." in web.get(done.headers["location"]).text


def test_another_host_name_is_refused(twins: Twins) -> None:
    web, _ = console(twins)
    rebound = web.get("/", headers={"Host": "attacker.example:8765"})
    assert rebound.status_code == 421
    assert rebound.headers["content-security-policy"] == CSP
    assert web.get("/", headers={"Host": "localhost"}).status_code == 421  # not port 80
    assert web.get("/", headers={"Host": "localhost:8765"}).status_code == 200


def test_an_ipv6_loopback_console_answers_to_its_bracketed_address() -> None:
    guard = Guard.serving("::1", 8765)
    assert "[::1]:8765" in guard.hosts and "localhost:8765" in guard.hosts
    assert "127.0.0.1:8765" not in guard.hosts  # it does not listen there


def test_a_bulk_cancel_counts_first_then_acts_with_progress(twins: Twins) -> None:
    later = twins.clock() + 3600  # not launched: each cancel is done at once
    for n in range(5):
        twins.client().submit("k", {}, job_id=f"b{n}", not_before=later)
    twins.client().submit("other", {}, job_id="keep", not_before=later)
    twins.stages().tick.tick()
    web, guard = console(twins, operate=True)
    dry = web.get("/bulk", params={"verb": "cancel", "status": "PENDING", "kind": "k",
                                   "preview": "1"}).text
    assert "<strong>5</strong> job(s) match" in dry
    assert all(twins.job(f"b{n}").state == JobState.PENDING for n in range(5))
    # Another job of the kind since the dry run: more than it showed, so nothing is done.
    twins.client().submit("k", {}, job_id="b5", not_before=later)
    twins.stages().tick.tick()
    form = {"csrf": guard.token, "verb": "cancel", "status": "PENDING", "kind": "k",
            "matched": "5"}
    again = web.post("/bulk", data=form, headers={"Origin": ORIGIN}, follow_redirects=False)
    assert again.status_code == 409 and "6 job(s) match now, not the 5" in again.text
    assert all(twins.job(f"b{n}").state == JobState.PENDING for n in range(6))
    started = web.post("/bulk", data={**form, "matched": "6"}, headers={"Origin": ORIGIN},
                       follow_redirects=False)
    assert started.status_code == 303
    where = started.headers["location"]

    def state() -> str:
        return re.search(r'class="bulk-state">(\w+)<', web.get(where).text).group(1)  # type: ignore[union-attr]
    wait_for(lambda: state() != "running", 60, "the bulk action ended")
    page = web.get(where).text
    assert state() == "done" and '<td class="acted">6</td>' in page
    assert all(twins.job(f"b{n}").state == JobState.CANCELLED for n in range(6))
    assert twins.job("keep").state == JobState.PENDING
    # Resumed by its id: a dry run of its filter first; nothing is left to act on.
    bulk_id = where.rsplit("/", 1)[1]
    dry = web.get("/bulk", params={"verb": "cancel", "status": "PENDING", "kind": "k",
                                   "preview": "1", "resume": bulk_id}).text
    assert "<strong>0</strong> job(s) match" in dry and "Cancel 0" not in dry
    bad = web.get("/bulk", params={"verb": "cancel", "status": "PENDING", "preview": "1",
                                   "resume": "a/b"}).text
    assert "bulk id &#39;a/b&#39;: 1-64 of letters" in bad


# A GET of an action's path is the page of the job of that id (ids may hold "/"), none here.
@pytest.mark.parametrize(("path", "status"), [
    ("/jobs/j1/retry", 404), ("/jobs/j1/cancel", 404), ("/bulk", 200),
    ("/dead-letters/redrive", 405)])
def test_a_get_never_changes_anything(twins: Twins, path: str, status: int) -> None:
    failed(twins, "j1")
    web, _ = console(twins, operate=True)
    assert web.get(path).status_code == status
    job = twins.job("j1")
    assert job is not None and job.state == JobState.FAILED


def test_jobs_show_and_filter_by_their_tenant(twins: Twins) -> None:
    client = twins.client()
    client.submit("k", {}, job_id="a1", tenant="acme")
    client.submit("k", {}, job_id="b1", tenant="bolt")
    client.submit("k", {}, job_id="plain")
    twins.stages().tick.tick()
    web, _ = console(twins)
    every = web.get("/jobs").text
    assert "<th>Tenant</th>" in every and ">acme</td>" in every
    acme = web.get("/jobs?tenant=acme").text
    assert re.findall(r'href="/jobs/([ab]1|plain)"', acme) == ["a1"]
    assert "tenant acme" in web.get("/jobs/a1").text
    bad = web.get("/jobs?tenant=a%20b")
    assert bad.status_code == 400 and "1-64 characters" in bad.text
    overview = web.get("/").text
    assert "Running tasks by tenant" in overview and 'href="/jobs?tenant=acme"' in overview
    untenanted = Twins()
    untenanted.client().submit("k", {}, job_id="p")
    untenanted.stages().tick.tick()
    assert "<th>Tenant</th>" not in console(untenanted)[0].get("/jobs").text
    assert "by tenant" not in console(untenanted)[0].get("/").text


def test_open_overviews_share_their_reads(twins: Twins) -> None:
    web, _ = console(twins)
    counts: list[str] = []
    inner = twins.table.count

    def counted(key: str, **kwargs: Any) -> int:
        counts.append(key)
        return inner(key, **kwargs)
    twins.table.count = counted  # type: ignore[method-assign]
    assert web.get("/").status_code == 200
    first = len(counts)
    assert first > 0
    for _ in range(5):  # five more tabs (or refreshes) at once: the figures are shared
        web.get("/")
    assert len(counts) == first


def test_a_read_only_dry_run_names_the_cli_command_quoted(twins: Twins) -> None:
    web, _ = console(twins)
    page = web.get("/bulk", params={"verb": "cancel", "status": "PENDING", "preview": "1",
                                    "kind": "x; touch /tmp/owned"}).text
    assert "--kind &#39;x; touch /tmp/owned&#39;" in page  # one shell word, as text


def test_a_jobs_page_links_what_it_waits_for_and_what_waits_for_it(twins: Twins) -> None:
    later = twins.clock() + 3600
    twins.client().submit("k", {}, job_id="first", not_before=later)
    twins.client().submit("k", {}, job_id="second", depends_on=["first"])
    twins.stages().tick.tick()
    web, _ = console(twins)
    second = web.get("/jobs/second").text
    assert 'Depends on</th><td><a href="/jobs/first">first</a>' in second
    first = web.get("/jobs/first").text
    assert 'Waited for by</th><td><a href="/jobs/second">second</a>' in first


def test_deployments_show_the_ones_before(twins: Twins) -> None:
    from dispatcher.domain.deployment import Deployment

    read = None
    for n in range(1, 4):
        read = twins.store.save_deployment(
            Deployment(f"repo/worker:v{n}", f"longjobs-worker:{n + 10}", "longjobs-worker:1",
                       updated_by="deploy"), read)
    web, _ = console(twins)
    page = web.get("/deployments").text
    assert "longjobs-worker:13" in page and "Before it" in page
    before = page.split("Before it", 1)[1]
    assert before.index("repo/worker:v2") < before.index("repo/worker:v1")


def test_a_console_remembers_a_bounded_number_of_bulk_actions() -> None:
    from dispatcher.console.actions import RUNS_KEPT, BulkRun, BulkRuns
    from dispatcher.ops.bulk import BulkReport

    runs = BulkRuns()
    going = BulkRun(BulkReport("bulk-going", "cancel", "status=PENDING", 1), "")
    runs.start(going)
    for n in range(3 * RUNS_KEPT):
        runs.put(BulkRun(BulkReport(f"bulk-{n}", "cancel", "status=PENDING", 1), "", done=True))
    kept = runs.all()
    assert len(kept) <= RUNS_KEPT and runs.get("bulk-going") is not None
    assert runs.get(f"bulk-{3 * RUNS_KEPT - 1}") is not None and runs.get("bulk-0") is None


def test_a_bulk_dry_run_by_tenant_names_it(twins: Twins) -> None:
    twins.client().submit("k", {}, job_id="a1", tenant="acme", not_before=twins.clock() + 3600)
    twins.client().submit("k", {}, job_id="p1", not_before=twins.clock() + 3600)
    twins.stages().tick.tick()
    web, _ = console(twins)
    page = web.get("/bulk", params={"verb": "cancel", "status": "PENDING", "tenant": "acme",
                                    "preview": "1"}).text
    assert "<strong>1</strong> job(s) match" in page and "tenant acme" in page
    assert "--tenant acme" in page  # the read-only console's command


def test_dead_letters_are_shown_as_text_and_moved_back_with_the_token(twins: Twins) -> None:
    """A DLQ holding a message whose body carries markup: the page shows it as text; the
    redrive, a POST with the token from the console's own origin, moves it back to the job
    queue and says how many it moved."""
    dlq = MemoryQueue(clock=twins.clock)
    body = '{"schema_version": 1, "job_id": "<b>x</b>", "kind": "k", "payload": {}}'
    dlq.send([("m1", body)])

    class WithLetters(JobClient):
        def dead_letters(self) -> DeadLetters:
            return DeadLetters(dlq, twins.queue)

    client = WithLetters(queue_url=ENV["LONGJOBS_QUEUE_URL"], table_name=ENV["LONGJOBS_TABLE"],
                         region="us-east-1", queue=twins.queue, store=twins.store)
    source = ConsoleSource(client, Queries(twins.store, queue=twins.queue, clock=twins.clock),
                           Top(twins.store, queue=twins.queue, clock=twins.clock),
                           has_dead_letters=True)
    guard = Guard.serving("127.0.0.1", 8765, operate=True)
    web = TestClient(console_app(source, guard, clock=twins.clock), base_url=ORIGIN)
    page = web.get("/dead-letters").text
    assert str(escape("<b>x</b>")) in page and "<b>x</b>" not in page
    refused = web.post("/dead-letters/redrive", data={"csrf": "guess", "limit": "10"},
                       headers={"Origin": ORIGIN}, follow_redirects=False)
    assert refused.status_code == 403 and twins.queue_counts()[0] == 0
    moved = web.post("/dead-letters/redrive", data={"csrf": guard.token, "limit": "10"},
                     headers={"Origin": ORIGIN}, follow_redirects=False)
    assert moved.status_code == 303 and moved.headers["location"] == "/dead-letters?moved=1"
    assert twins.queue_counts()[0] == 1 and dlq.backlog().visible + dlq.backlog().in_flight == 0
    assert "Moved 1 message(s) back" in web.get(moved.headers["location"]).text


def test_jobs_filter_by_the_start_of_their_id_and_page_on(twins: Twins) -> None:
    """The jobs page (and the operator API under it) lists the jobs whose id starts with what
    is typed, of any state, a page at a time; other filters narrow it further."""
    client = twins.client()
    for n in range(7):
        client.submit("k", {}, job_id=f"nightly-{n}")
    client.submit("k", {}, job_id="adhoc-1")
    client.submit("other", {}, job_id="nightly-x")
    twins.stages().tick.tick()
    queries = Queries(twins.store, clock=twins.clock)
    listed = {s.job_id for s in queries.list_jobs(prefix="nightly-")}
    assert listed == {f"nightly-{n}" for n in range(7)} | {"nightly-x"}
    for state in {str(j.state) for j in twins.jobs()}:
        assert {s.job_id for s in queries.list_jobs(prefix="nightly-", status=state)} == \
            {j.job_id for j in twins.jobs() if str(j.state) == state
             and j.job_id.startswith("nightly-")}
    assert {s.job_id for s in queries.list_jobs(prefix="nightly-", kind="other")} == \
        {"nightly-x"}
    first = queries.page_jobs(prefix="nightly-", limit=5)
    assert len(first.jobs) == 5 and first.next is not None
    rest = queries.page_jobs(prefix="nightly-", limit=5, after=first.next)
    assert {s.job_id for s in [*first.jobs, *rest.jobs]} == listed and rest.next is None
    web, _ = console(twins)
    page = web.get("/jobs?prefix=adhoc").text
    assert re.findall(r'href="/jobs/([a-z]+-[0-9x])"', page) == ["adhoc-1"]
    assert 'name="prefix" value="adhoc"' in page
    # A page so filtered reads up to 1,000 rows a partition: it does not refresh by itself.
    assert "data-refresh" not in page and "data-refresh" in web.get("/jobs").text
