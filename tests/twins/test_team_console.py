"""The team console's Lambda function in-process on the twins, fed API Gateway's events
(HTTP API, payload 2.0) as its JWT authorizer passes them: the public door serves the shell
and static files only; the authorized door reads pages as the token's user and acts only
with the ``longjobs/operate`` scope, the same origin and the CSRF token derived from the
bearer token; every action leaves an audit record the Audit page lists; a bulk action runs
within its request and offers to continue. The walk in a real browser, signing in through a
stand-in issuer: tests/integration/test_team_console_browser.py."""

from __future__ import annotations

import re
from typing import Any

import pytest

from dispatcher.console import actions as actions_module
from dispatcher.console.lambda_entry import build
from dispatcher.console.source import ConsoleSource
from dispatcher.console.team import SCOPE_OPERATE, SCOPE_READ
from dispatcher.domain.jobs import JobState
from dispatcher.ops.queries import Queries
from dispatcher.ops.top import Top
from tests.http_api_events import CSRF, HOST, ORIGIN, body_text, http_api_event
from tests.twins import Twins

ENV = {"LONGJOBS_CONSOLE_CLIENT_ID": "client-1",
       "LONGJOBS_CONSOLE_AUTHORIZE_URL": "https://team.auth.eu-west-1.amazoncognito.com/oauth2/authorize",
       "LONGJOBS_CONSOLE_TOKEN_URL": "https://team.auth.eu-west-1.amazoncognito.com/oauth2/token",
       "LONGJOBS_CONSOLE_LOGOUT_URL": "https://team.auth.eu-west-1.amazoncognito.com/logout"}


class Function:
    """The function, and the events API Gateway would send it."""

    def __init__(self, twins: Twins, **settings: str) -> None:
        source = ConsoleSource(twins.client(), Queries(twins.store, queue=twins.queue,
                                                       clock=twins.clock),
                               Top(twins.store, queue=twins.queue, clock=twins.clock),
                               has_dead_letters=False)
        self.handle = build({**ENV, **settings}, source)

    def call(self, method: str, path: str, **request: Any) -> dict[str, Any]:
        return self.handle(http_api_event(method, path, **request), None)


text = body_text


@pytest.fixture
def function(twins: Twins) -> Function:
    return Function(twins)


def test_the_public_door_serves_the_shell_and_static_files_only(twins: Twins,
                                                                  function: Function) -> None:
    twins.client().submit("secret-kind", {"token": "s3cr3t"}, job_id="j1")
    twins.stages().tick.tick()
    for path in ("/", "/jobs/j1", "/jobs", "/audit"):
        shell = function.call("GET", path, user=None)
        assert shell["statusCode"] == 200
        page = text(shell)
        assert 'name="longjobs-login"' in page and 'data-client-id="client-1"' in page
        assert "j1" not in page and "secret-kind" not in page and "s3cr3t" not in page
        csp = shell["headers"]["content-security-policy"]
        assert "connect-src 'self' https://team.auth.eu-west-1.amazoncognito.com;" in csp
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    script = function.call("GET", "/static/console.js", user=None)
    assert script["statusCode"] == 200 and "code_challenge_method" in text(script)


def test_the_authorized_door_reads_pages_as_the_tokens_user(twins: Twins,
                                                           function: Function) -> None:
    twins.client().submit("k", {}, job_id="j1")
    twins.stages().tick.tick()
    page = function.call("GET", "/x/jobs/j1")
    assert page["statusCode"] == 200
    assert "PENDING" in text(page) and 'title="alice"' in text(page)
    assert "Cancel</button>" not in text(page)  # read scope only: no action shown
    assert function.call("GET", "/x")["statusCode"] == 200  # the overview, no slash
    listed = function.call("GET", "/x/jobs", query="state=PENDING")
    assert 'href="/jobs/j1"' in text(listed)  # links are the shell's addresses
    # An event without the authorizer's claims (a route left without it) reads nothing; the
    # door is the route API Gateway matched, not the path: a public route never serves a page.
    assert function.call("GET", "/x/jobs/j1", user=None)["statusCode"] == 401
    public = http_api_event("GET", "/x/jobs/j1", user=None)
    public["routeKey"] = "GET /{proxy+}"
    assert "PENDING" not in text(function.handle(public, None))
    off_route = http_api_event("GET", "/x/jobs/j1")
    off_route["routeKey"] = "GET /elsewhere"
    assert function.handle(off_route, None)["statusCode"] == 404


def test_a_console_set_read_only_lets_no_one_act(twins: Twins) -> None:
    twins.client().submit("k", {}, job_id="j1", not_before=twins.clock() + 3600)
    twins.stages().tick.tick()
    function = Function(twins, LONGJOBS_CONSOLE_OPERATE="false")
    refused = function.call("POST", "/x/jobs/j1/cancel", form={"csrf": CSRF},
                            scopes=(SCOPE_READ, SCOPE_OPERATE))
    assert refused["statusCode"] == 403
    assert twins.job("j1").state == JobState.PENDING


def test_acting_needs_the_operate_scope_the_origin_and_the_token(twins: Twins,
                                                                function: Function) -> None:
    twins.client().submit("k", {}, job_id="j1", not_before=twins.clock() + 3600)
    twins.stages().tick.tick()
    reader = function.call("POST", "/x/jobs/j1/cancel", form={"csrf": CSRF})
    assert reader["statusCode"] == 403 and "operators group" in text(reader)
    operate = (SCOPE_READ, SCOPE_OPERATE)
    page = text(function.call("GET", "/x/jobs/j1", scopes=operate))
    assert "Cancel</button>" in page and f'value="{CSRF}"' in page
    for form, origin in (({"csrf": "guess"}, ORIGIN), ({}, ORIGIN),
                         ({"csrf": CSRF}, "https://evil.example"), ({"csrf": CSRF}, None),
                         ({"csrf": CSRF}, f"http://{HOST}")):
        refused = function.call("POST", "/x/jobs/j1/cancel", scopes=operate, form=form,
                                origin=origin)
        assert refused["statusCode"] == 403, (form, origin)
    assert twins.job("j1").state == JobState.PENDING
    done = function.call("POST", "/x/jobs/j1/cancel", scopes=operate, form={"csrf": CSRF})
    # The redirect stays behind the authorized door, where the script follows it.
    assert done["statusCode"] == 303
    assert done["headers"]["location"] == "/x/jobs/j1?done=cancelled"
    assert twins.job("j1").state == JobState.CANCELLED


def test_every_action_is_listed_on_the_audit_page(twins: Twins, function: Function) -> None:
    later = twins.clock() + 3600
    for n in range(3):
        twins.client().submit("k", {}, job_id=f"b{n}", not_before=later)
    twins.stages().tick.tick()
    operate = (SCOPE_READ, SCOPE_OPERATE)
    assert "No action has been taken" in text(function.call("GET", "/x/audit"))
    function.call("POST", "/x/jobs/b0/cancel", scopes=operate, form={"csrf": CSRF},
                  user="bob")
    # A job that does not exist: refused, and its attempt is recorded too.
    function.call("POST", "/x/jobs/nope/retry", scopes=operate, form={"csrf": CSRF},
                  user="bob")
    bulk = function.call("POST", "/x/bulk", scopes=operate, user="carol",
                         form={"csrf": CSRF, "verb": "cancel", "status": "PENDING",
                               "kind": "k", "matched": "2"})
    assert bulk["statusCode"] == 200 and 'class="bulk-state">done<' in text(bulk)
    rows = re.findall(r"<tr><td>[^<]*</td><td>([^<]*)</td><td>([^<]*)</td>\s*<td>(?:<a[^>]*>)?"
                      r"([^<]*)(?:</a>)?</td>\s*<td>(\d+)</td><td>([^<]*)</td>",
                      text(function.call("GET", "/x/audit")))
    assert [(who, action, target, count, outcome[:12]) for who, action, target, count, outcome
            in rows] == [
        ("carol", "bulk-cancel", "status=PENDING kind=k", "2", "acted on 2, "),
        ("carol", "bulk-cancel", "status=PENDING kind=k", "2", "started"),
        ("bob", "retry", "nope", "0", "not done: no"),
        ("bob", "cancel", "b0", "1", "done"),
    ]
    assert all(twins.job(f"b{n}").state == JobState.CANCELLED for n in range(3))


def test_a_bulk_action_stops_within_its_request_and_continues(
        twins: Twins, function: Function, monkeypatch: pytest.MonkeyPatch) -> None:
    later = twins.clock() + 3600
    for n in range(5):
        twins.client().submit("k", {}, job_id=f"b{n}", not_before=later)
    twins.stages().tick.tick()
    monkeypatch.setattr(actions_module, "IN_REQUEST_SECONDS", -1.0)  # out of time at once
    operate = (SCOPE_READ, SCOPE_OPERATE)
    form = {"csrf": CSRF, "verb": "cancel", "status": "PENDING", "kind": "k", "matched": "5"}
    first = text(function.call("POST", "/x/bulk", scopes=operate, form=form))
    assert "has more to do" in first and "Resume it" in first
    bulk_id = re.search(r"--bulk-id (\S+)</code>", first).group(1)  # type: ignore[union-attr]
    left = sum(twins.job(f"b{n}").state == JobState.PENDING for n in range(5))
    monkeypatch.setattr(actions_module, "IN_REQUEST_SECONDS", 20.0)
    rest = text(function.call("POST", "/x/bulk", scopes=operate,
                              form={**form, "matched": str(left), "bulk_id": bulk_id}))
    assert 'class="bulk-state">done<' in rest
    assert all(twins.job(f"b{n}").state == JobState.CANCELLED for n in range(5))
