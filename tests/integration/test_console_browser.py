"""The web console in a real browser (Debian's headless Chromium, driven through its own
chromedriver by Selenium), walking a newcomer's path in local mode: the overview (its chart
of jobs ended), the failed jobs, one of them with its traceback, its path and its logs, its
retry (``--operate``) seen to succeed without a reload and listed on the Audit page, a bulk
cancel's dry run; and jobs whose payload, error, labels and logs hold markup, script and
``javascript:`` links, shown as text with nothing run (checked from the browser: no dialog,
no element made of them). Each page's screenshot goes to
``$LONGJOBS_SCREENSHOTS`` (``make screenshots``: docs/console/) or the test's own folder."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.select import Select

from tests.helpers import local_mode, wait_for
from tests.integration.test_progress_local import ROOT, longjobs

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
HOSTILE = ['<script>alert("x1")</script>', '"><img src=x onerror=alert("x2")>',
           'javascript:alert("x3")']


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        pytest.fail("the console's browser test needs Debian's chromium and chromium-driver: "
                    "`make browser` installs them (`make test` does it first)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="longjobs-chromium-")
    # The closed network: no background calls to Google's hosts (each would be refused).
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic",
                 "--window-size=1280,1000", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def shoot(driver: WebDriver, folder: Path, name: str) -> None:
    height = driver.execute_script("return document.body.scrollHeight")
    driver.set_window_size(1280, min(max(int(height) + 40, 700), 2400))
    driver.save_screenshot(str(folder / f"{name}.png"))
    driver.set_window_size(1280, 1000)


def no_dialog(driver: WebDriver) -> None:
    try:
        text = driver.switch_to.alert.text
    except NoAlertPresentException:
        return
    raise AssertionError(f"a dialog opened: {text!r}")


def text_of(driver: WebDriver) -> str:
    for _ in range(10):
        try:
            return str(driver.find_element(By.TAG_NAME, "main").text)
        except StaleElementReferenceException:  # the page put a fresh <main> in place
            continue
    raise AssertionError("the page's <main> kept changing under the reader")


def choose(driver: WebDriver, name: str, value: str) -> None:
    """Pick ``value`` in the select ``name`` (found again if the page replaced it)."""
    for _ in range(10):
        try:
            Select(driver.find_element(By.NAME, name)).select_by_value(value)
            return
        except StaleElementReferenceException:
            continue
    raise AssertionError(f"the select {name!r} kept changing")


def click(driver: WebDriver, by: str, value: str) -> None:
    """Click what a person would: a page that follows its state puts a fresh copy of its
    content in place every few seconds, so an element found just before may be gone."""
    for _ in range(10):
        try:
            driver.find_element(by, value).click()
            return
        except StaleElementReferenceException:
            continue
    raise AssertionError(f"{value!r} kept changing under the click")


def test_a_newcomer_walks_the_console(browser: WebDriver, tmp_path: Path) -> None:
    shots = Path(os.environ.get("LONGJOBS_SCREENSHOTS") or tmp_path / "shots")
    shots.mkdir(parents=True, exist_ok=True)
    with local_mode(ROOT, tmp_path, args=("--console-port", "0", "--operate"),
                    LONGJOBS_HANDLERS="flaky=tests.handlers:once_broken,"
                    "hostile=tests.handlers:hostile_text,echo=tests.handlers:echo") as client:
        url = client["LONGJOBS_CONSOLE_URL"].rstrip("/")
        marker = tmp_path / "tried"
        longjobs(client, "submit", "flaky", "--job-id", "nightly-report", "--max-attempts", "1",
                 "--payload", json.dumps({"marker": str(marker)}), "--label", "team=data")
        for n, bad in enumerate(HOSTILE):
            longjobs(client, "submit", "hostile", "--job-id", f"hostile-{n}", "--max-attempts",
                     "1", "--payload", json.dumps({"text": bad}), "--label", f"note={bad}")
        for n in range(3):
            longjobs(client, "submit", "echo", "--job-id", f"later-{n}", "--not-before",
                     str(int(time.time()) + 86400))
        longjobs(client, "submit", "echo", "--job-id", "done-0", "--payload", '{"ok": 1}')
        # The timeout guards against a hang only.
        wait_for(lambda: all(json.loads(longjobs(client, "jobs", "show", j, "--json"))["state"]
                             == "FAILED" for j in ["nightly-report", "hostile-0", "hostile-1",
                                                   "hostile-2"]),
                 180, "the failing jobs failed")

        # The overview.
        browser.get(url + "/")
        assert "Overview" in browser.title and "Jobs by state" in text_of(browser)
        # The chart of jobs ended per hour, drawn by the page once their tasks' stops are
        # counted (a task's jobs count as it stops): the failed ones among them.
        wait_for(lambda: "jobs ended in the last 24 hours (" in text_of(browser)
                 or bool(browser.refresh()), 120, "the chart of jobs ended")
        chart = browser.find_element(By.ID, "ended-chart").text
        assert "failed, shown on top of each bar" in chart
        shoot(browser, shots, "overview")

        # The failed jobs, by the filter on the jobs page.
        click(browser, By.LINK_TEXT, "Jobs")
        choose(browser, "state", "FAILED")
        click(browser, By.CSS_SELECTOR, "form.filters button[type=submit]")
        listed = text_of(browser)
        assert "nightly-report" in listed and "later-0" not in listed and "done-0" not in listed
        shoot(browser, shots, "jobs")

        # One of them: its traceback and its logs.
        click(browser, By.LINK_TEXT, "nightly-report")
        page = text_of(browser)
        assert "FAILED" in page and "RuntimeError: the upstream service said 503" in page
        assert "Traceback (most recent call last)" in page
        # Its path: made, run, failed, as many changes as its events.
        path = browser.find_element(By.ID, "state-changes").text
        assert "(created) PENDING" in path and "RUNNING FAILED" in path
        wait_for(lambda: "run for nightly-report: first" in text_of(browser) or
                 bool(browser.refresh()), 60, "its log line shown")
        shoot(browser, shots, "job")

        # Retried, it runs again and succeeds: the page shows it without a reload.
        click(browser, By.CSS_SELECTOR, "form[action$='/retry'] button")
        assert "Retried" in text_of(browser)
        browser.execute_script("window.notReloaded = true;")
        wait_for(lambda: "SUCCEEDED" in text_of(browser), 120, "the retried job succeeded")
        assert browser.execute_script("return window.notReloaded === true;"), \
            "the page was reloaded: it should have followed the job by itself"
        assert "run for nightly-report: again" in text_of(browser)

        # Hostile text stays text: no dialog, no element made of it, every bit of it shown.
        for n, bad in enumerate(HOSTILE):
            browser.get(f"{url}/jobs/hostile-{n}")
            no_dialog(browser)
            page = text_of(browser)
            assert bad in page, (bad, page[:2000])
            assert browser.execute_script(
                "return document.querySelectorAll('img, iframe, object, embed').length") == 0
            assert browser.execute_script(
                "return Array.from(document.links).filter("
                "l => !l.href.startsWith(location.origin)).length") == 0
            assert browser.execute_script("return document.scripts.length") == 1
        shoot(browser, shots, "job-with-markup")
        browser.get(url + "/jobs?state=FAILED")
        no_dialog(browser)
        assert HOSTILE[0] in text_of(browser)

        # A bulk cancel's dry run: the count and a sample, nothing changed.
        browser.get(url + "/bulk")
        choose(browser, "status", "PENDING")
        browser.find_element(By.NAME, "kind").send_keys("echo")
        click(browser, By.CSS_SELECTOR, "button[name=preview]")
        assert "3 job(s) match" in text_of(browser)
        shoot(browser, shots, "bulk")
        states = {json.loads(longjobs(client, "jobs", "show", f"later-{n}", "--json"))["state"]
                  for n in range(3)}
        assert states == {"SCHEDULED"}

        for name, path in (("deployments", "/deployments"), ("dead-letters", "/dead-letters")):
            browser.get(url + path)
            assert browser.find_element(By.TAG_NAME, "h1").text
            shoot(browser, shots, name)

        # The retry above, on the Audit page: who (this machine's user), what, which job.
        browser.get(url + "/audit")
        row = browser.find_element(By.CSS_SELECTOR, "main table tbody tr").text
        assert "local:" in row and "retry nightly-report 1 done" in row, row
        shoot(browser, shots, "audit")
