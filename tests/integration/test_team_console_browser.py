"""The team console in a real browser (Debian's headless Chromium): its Lambda function behind
a stand-in for its HTTP API's JWT authorizer and the issuer it signs in with
(tests/team_gateway.py), over the twins. A person opens a job's address, is signed in (the
code flow with PKCE) and lands on that job; walks to the jobs page and back without a reload;
cancels a job as an operator and finds it on the Audit page under their name; a page follows
its job's state with the token; a read-only user sees no action, and one sent anyway is
refused before the function sees it; hostile text stays text; no token in any address."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from dispatcher.console.lambda_entry import build
from dispatcher.console.source import ConsoleSource
from dispatcher.console.team import SCOPE_READ
from dispatcher.domain.jobs import JobState
from dispatcher.ops.queries import Queries
from dispatcher.ops.top import Top
from tests.helpers import wait_for
from tests.integration.test_console_browser import HOSTILE, browser, click, no_dialog, text_of
from tests.team_gateway import Gateway, serving
from tests.twins import Twins

__all__ = ["browser"]  # the fixture, used by name


@pytest.fixture
def team() -> Iterator[tuple[Gateway, Twins]]:
    twins = Twins()
    later = twins.clock() + 3600  # scheduled: a cancel is done at once, no task involved
    for job_id in ("nightly-report", "weekly", "watched"):
        twins.client().submit("report", {"day": 1}, job_id=job_id, not_before=later)
    twins.client().submit("hostile", {"text": HOSTILE[0] + HOSTILE[1]}, job_id="hostile",
                          not_before=later)
    twins.stages().tick.tick()
    source = ConsoleSource(twins.client(), Queries(twins.store, queue=twins.queue,
                                                   clock=twins.clock),
                           Top(twins.store, queue=twins.queue, clock=twins.clock),
                           has_dead_letters=False)
    with serving(Gateway()) as gateway:
        gateway.function = build(gateway.env(), source)
        yield gateway, twins


def signed_in(driver: WebDriver, url: str, shown: str) -> None:
    driver.get(url)
    wait_for(lambda: shown in text_of(driver), 30, f"signed in and shown {shown!r}")


def heading(driver: WebDriver) -> str:
    """The page's <h1>, found again if the script put a new page in place meanwhile."""
    for _ in range(10):
        try:
            return str(driver.find_element(By.TAG_NAME, "h1").text)
        except (StaleElementReferenceException, NoSuchElementException):
            continue
    return ""


def test_a_team_member_signs_in_reads_and_acts(browser: WebDriver,
                                              team: tuple[Gateway, Twins]) -> None:
    gateway, twins = team
    signed_in(browser, gateway.url + "/jobs/nightly-report", "nightly-report")
    # Signed in and on the address asked for; the code and state are gone from it.
    assert browser.current_url == gateway.url + "/jobs/nightly-report"
    assert "/oauth2/authorize" in " ".join(gateway.calls)
    token = browser.execute_script("return sessionStorage.getItem('longjobs.token')")
    assert token and token not in browser.page_source and token not in browser.current_url
    assert "Cancel" in text_of(browser)

    # Links are followed by the script, with the token: no reload.
    browser.execute_script("window.notReloaded = true;")
    click(browser, By.LINK_TEXT, "Jobs")
    wait_for(lambda: browser.current_url == gateway.url + "/jobs", 20, "the jobs page")
    click(browser, By.LINK_TEXT, "weekly")
    wait_for(lambda: "weekly" in heading(browser), 20, "weekly")
    browser.back()
    wait_for(lambda: browser.current_url == gateway.url + "/jobs", 20, "back to the jobs")
    assert browser.execute_script("return window.notReloaded === true;")

    # An operator cancels a job: a POST with the token, its redirect followed behind /x.
    browser.get(gateway.url + "/jobs/nightly-report")
    wait_for(lambda: "Cancel" in text_of(browser), 20, "the job's page")
    click(browser, By.CSS_SELECTOR, "form[action$='/cancel'] button")
    wait_for(lambda: "Cancelled." in text_of(browser), 20, "the cancel's notice")
    assert browser.current_url == gateway.url + "/jobs/nightly-report?done=cancelled"
    assert twins.job("nightly-report").state == JobState.CANCELLED
    click(browser, By.LINK_TEXT, "Audit")
    wait_for(lambda: "Audit" in browser.title, 20, "the audit page")
    row = browser.find_element(By.CSS_SELECTOR, "main table tbody tr").text
    assert "alice" in row and "cancel" in row and "nightly-report" in row

    # The page of a job follows its state, read with the token.
    click(browser, By.LINK_TEXT, "Jobs")
    wait_for(lambda: "watched" in text_of(browser), 20, "the jobs page")
    click(browser, By.LINK_TEXT, "watched")
    wait_for(lambda: "SCHEDULED" in text_of(browser), 20, "watched's page")
    with gateway.lock:
        twins.client().cancel("watched", reason="from elsewhere")
    wait_for(lambda: "CANCELLED" in text_of(browser), 20, "the page followed the cancel")

    # Hostile text stays text.
    browser.get(gateway.url + "/jobs/hostile")
    wait_for(lambda: "<script>alert(" in text_of(browser), 20, "the hostile job's page")
    no_dialog(browser)
    assert browser.execute_script("return document.querySelectorAll('img').length") == 0


def test_a_read_only_member_sees_no_action_and_cannot_act(browser: WebDriver,
                                                         team: tuple[Gateway, Twins]) -> None:
    gateway, twins = team
    gateway.user, gateway.scopes = "rita", (SCOPE_READ,)
    signed_in(browser, gateway.url + "/jobs/weekly", "weekly")
    assert "Cancel" not in text_of(browser)
    assert "read-only" in browser.find_element(By.CSS_SELECTOR, "header .mode").text
    # A cancel sent anyway, with her token, from the page: the route's scope refuses it.
    status = browser.execute_async_script("""
        const done = arguments[arguments.length - 1];
        fetch('/x/jobs/weekly/cancel', {method: 'POST', headers: {
            'Authorization': 'Bearer ' + sessionStorage.getItem('longjobs.token'),
            'Content-Type': 'application/x-www-form-urlencoded'}, body: 'csrf=x'})
          .then(r => done(r.status));""")
    assert status == 403
    assert twins.job("weekly").state != JobState.CANCELLED
    # Without a token, a page is not read at all.
    status = browser.execute_async_script("""
        const done = arguments[arguments.length - 1];
        fetch('/x/jobs/weekly').then(r => done(r.status));""")
    assert status == 401
