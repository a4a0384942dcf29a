"""The admin page in real headless Chromium, against the Job Inbox under uvicorn and real
Postgres: sign-in, listing, refresh, paging, the history dialog, an admin's confirmed
cancel and replay (a lost replay answer retried with the same key), a viewer's page."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from drainpipe import Jobs
from drainpipe.errors import DrainpipeError
from drainpipe.http import Receive, Scope, Send, problem_response
from tests.admin.browser import ServedApp, chromium_driver
from tests.admin.conftest import ADMIN, QUEUES, VIEWER, make_app

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from chromium_driver()


class LoseFirstReplayAnswer:
    """Runs the first replay for real, then answers 503 as if its answer had been lost;
    while ``database_down`` is set, the list answers 503 as when Postgres is unreachable."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.lost = 0
        self.keys: list[str] = []
        self.database_down = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == "/jobs" and self.database_down:
            error = DrainpipeError("network", "Database unreachable")
            await problem_response(error, scope["path"])(scope, receive, send)
            return
        if scope["type"] == "http" and scope["path"].endswith("/replay"):
            headers = dict(scope["headers"])
            self.keys.append(headers.get(b"idempotency-key", b"").decode())
            if self.lost == 0:
                self.lost += 1

                async def swallow(message: Any) -> None:
                    return None

                await self.app(scope, receive, swallow)
                error = DrainpipeError("network", "the answer was lost on the way")
                await problem_response(error, scope["path"])(scope, receive, send)
                return
        await self.app(scope, receive, send)


class Page:
    def __init__(self, driver: Any, served: ServedApp, jobs: Jobs, url: str) -> None:
        self.driver, self.served, self.jobs, self.db_url = driver, served, jobs, url

    def wait(self, condition: Any, timeout: float = 10) -> Any:
        from selenium.common.exceptions import StaleElementReferenceException
        from selenium.webdriver.support.ui import WebDriverWait

        # the list is rendered again on every refresh: an element may go stale between looks
        return WebDriverWait(
            self.driver,
            timeout,
            poll_frequency=0.05,
            ignored_exceptions=[StaleElementReferenceException],
        ).until(condition)

    def by_id(self, element_id: str) -> Any:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.ID, element_id)

    def visible(self, element_id: str) -> Any:
        return self.wait(lambda d: self.by_id(element_id).is_displayed() and self.by_id(element_id))

    def open(self, token: str | None) -> None:
        self.driver.get(self.served.url + "/")
        self.driver.execute_script("sessionStorage.clear()")
        self.driver.get(self.served.url + "/")
        if token is not None:
            self.visible("token-input").send_keys(token)
            self.by_id("token-form").submit()

    def job_ids(self) -> list[int]:
        keys = self.driver.execute_script(
            "return [...document.querySelectorAll('#jobs button.open-job')]"
            ".map((b) => b.dataset.job)"
        )
        return [int(key.rpartition("/")[2]) for key in keys]

    def listed(self, expected: list[int]) -> None:
        self.wait(lambda d: self.job_ids() == expected)

    def open_job(self, job_id: int) -> None:
        """Click the job's button (found again if a refresh replaced it meanwhile)."""
        from selenium.webdriver.common.by import By

        def click(driver: Any) -> bool:
            selector = f'#jobs button[data-job="emails/{job_id}"]'
            driver.find_element(By.CSS_SELECTOR, selector).click()
            return True

        self.wait(click)

    def enqueue(self, count: int) -> list[int]:
        return self.served.run(self.jobs.enqueue_many("emails", [{"n": i} for i in range(count)]))

    def dead_job(self) -> int:
        async def make() -> int:
            job_id = await self.jobs.enqueue("emails", {"n": "dead"}, max_attempts=1)
            [job] = await self.jobs.claim("emails", lease=60)
            assert await self.jobs.fail(job, RuntimeError("boom")) == "dead"
            return job_id

        return self.served.run(make())

    def audit(self) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.db_url) as conn:
            return conn.execute(
                "SELECT actor, action, job_id, outcome, code, idempotency_key, new_job_id"
                " FROM drainpipe.management_audit ORDER BY id"
            ).fetchall()


@pytest.fixture
def page(browser: Any, fresh_database: Any) -> Iterator[Page]:
    url = fresh_database("table")
    holder: dict[str, Any] = {}

    served = ServedApp(lambda scope, receive, send: holder["app"](scope, receive, send))
    jobs = served.run(_make_jobs(url))
    holder["inbox"] = make_app(jobs, page_refresh=1)
    holder["app"] = LoseFirstReplayAnswer(holder["inbox"])
    page = Page(browser, served, jobs, url)
    page.lossy = holder["app"]  # type: ignore[attr-defined]
    try:
        yield page
    finally:
        served.run(jobs.close())
        served.stop()


async def _make_jobs(url: str) -> Jobs:
    return Jobs(url, QUEUES)


def test_the_token_is_asked_once_and_a_wrong_one_is_refused(page: Page) -> None:
    page.open("wrong-token-wrong-token")
    message = page.visible("whoami")
    page.wait(lambda d: "not accepted" in message.text)
    assert page.by_id("token-input").is_displayed()
    page.by_id("token-input").send_keys(VIEWER)
    page.by_id("token-form").submit()
    page.visible("empty")  # no jobs yet: the empty state, not an error
    assert "intern@example.com (viewer)" in page.by_id("whoami").text
    page.driver.refresh()  # kept in sessionStorage: not asked again
    page.visible("empty")
    assert not page.by_id("sign-in").is_displayed()


def test_lists_refreshes_and_pages_without_losing_the_position(page: Page) -> None:
    ids = page.enqueue(60)
    page.open(ADMIN)
    newest_first = sorted(ids, reverse=True)
    page.listed(newest_first[:50])
    assert page.by_id("prev").get_attribute("disabled") is not None
    page.by_id("next").click()
    page.listed(newest_first[50:])
    assert "page 2" in page.by_id("page-number").text
    assert page.by_id("next").get_attribute("disabled") is not None
    # new jobs arrive: the refresh keeps page 2 where it is (its cursor), page 1 shows them
    refreshes = int(
        page.driver.find_element("css selector", "body").get_attribute("data-refreshes")
    )
    more = page.enqueue(3)
    page.wait(
        lambda d: (
            int(d.find_element("css selector", "body").get_attribute("data-refreshes"))
            > refreshes + 1
        )
    )
    page.listed(newest_first[50:])
    page.by_id("prev").click()
    page.listed((sorted(more, reverse=True) + newest_first)[:50])
    # filters start again from the first page
    from selenium.webdriver.support.ui import Select

    Select(page.by_id("state-filter")).select_by_visible_text("succeeded")
    page.visible("empty")
    assert page.driver.current_url.endswith("#state=succeeded")
    # a link carries its filters: opened again, the page shows the same list
    page.driver.get(page.served.url + "/#queue=emails&state=queued")
    page.driver.refresh()
    page.listed((sorted(more, reverse=True) + newest_first)[:50])
    page.wait(lambda d: page.by_id("queue-filter").get_attribute("value") == "emails")
    assert page.by_id("state-filter").get_attribute("value") == "queued"
    page.by_id("tenant-filter").send_keys("nobody\n")
    page.visible("empty")
    assert "tenant=nobody" in page.driver.current_url


def test_an_outage_shows_an_error_and_the_next_refresh_recovers(page: Page) -> None:
    [job_id] = page.enqueue(1)
    page.open(VIEWER)
    page.listed([job_id])
    lossy: LoseFirstReplayAnswer = page.lossy  # type: ignore[attr-defined]
    lossy.database_down = True
    error = page.visible("error")
    assert error.text == "Could not load jobs: Database unreachable"
    assert page.job_ids() == [job_id]  # the last good page stays on screen
    lossy.database_down = False
    page.wait(lambda d: not page.by_id("error").is_displayed())
    page.listed([job_id])


def test_the_history_dialog_survives_refreshes_and_escape_returns_focus(page: Page) -> None:
    from selenium.webdriver.common.keys import Keys

    dead = page.dead_job()
    page.open(VIEWER)
    page.listed([dead])
    page.open_job(dead)
    dialog = page.visible("job-dialog")
    assert f"Job #{dead} in emails" in page.by_id("dialog-title").text
    assert (
        "failed" in page.by_id("attempts").text and "HANDLER_ERROR" in page.by_id("attempts").text
    )
    body = page.driver.find_element("css selector", "body")
    seen = int(body.get_attribute("data-refreshes"))
    page.wait(lambda d: int(body.get_attribute("data-refreshes")) >= seen + 2)
    assert dialog.is_displayed()  # two refreshes later the dialog is still open
    # a viewer sees no write control, nor the audit log
    assert not page.by_id("write-controls").is_displayed()
    assert not page.by_id("show-audit").is_displayed()
    assert not page.by_id("cancel-job").is_displayed()
    page.driver.switch_to.active_element.send_keys(Keys.ESCAPE)
    page.wait(lambda d: not dialog.is_displayed())
    # focus back on the job's row (looked up again on each look: a refresh renders the row
    # anew, and the element read a moment ago goes stale)
    page.wait(lambda d: d.switch_to.active_element.get_attribute("data-job") == f"emails/{dead}")


def test_an_admin_cancels_through_the_confirmation(page: Page) -> None:
    [job_id] = page.enqueue(1)
    page.open(ADMIN)
    page.listed([job_id])
    page.open_job(job_id)
    page.visible("job-dialog")
    page.visible("cancel-job").click()
    assert page.by_id("replay-job").get_attribute("disabled") is not None  # not dead
    confirm = page.visible("confirm")
    assert "cannot undo" in confirm.text
    assert page.audit() == []  # nothing happens before the confirmation
    page.by_id("confirm-action").click()
    page.wait(lambda d: "is cancelled" in page.by_id("action-result").text)
    page.wait(lambda d: "cancelled" in page.by_id("job-fields").text)
    assert page.audit() == [("ops@example.com", "cancel", job_id, "ok", None, None, None)]
    # the audit log, for admins, shows it
    page.by_id("dialog-close").click()
    page.visible("show-audit").click()
    rows = page.visible("audit-rows")
    page.wait(lambda d: f"emails #{job_id}" in rows.text)
    assert "ops@example.com" in rows.text and "cancel" in rows.text and "ok" in rows.text


def test_an_admin_replays_and_a_lost_answer_is_retried_with_the_same_key(page: Page) -> None:
    dead = page.dead_job()
    page.open(ADMIN)
    page.listed([dead])
    page.open_job(dead)
    page.visible("replay-job").click()
    page.visible("confirm-action").click()
    # the first answer is lost: the page says so and keeps the confirmation (and its key)
    page.wait(lambda d: "Not confirmed yet" in page.by_id("action-result").text)
    page.by_id("confirm-action").click()
    page.wait(lambda d: "Replayed as job #" in page.by_id("action-result").text)
    lossy: LoseFirstReplayAnswer = page.lossy  # type: ignore[attr-defined]
    assert len(lossy.keys) == 2 and lossy.keys[0] == lossy.keys[1] and lossy.keys[0]
    [row] = page.audit()  # the retry was answered from storage: one replay, one audit row
    assert row[:5] == ("ops@example.com", "replay", dead, "ok", None)
    assert row[5] == lossy.keys[0]
    assert f"#{row[6]}" in page.by_id("action-result").text
    page.wait(lambda d: str(row[6]) in page.by_id("job-fields").text)  # replayed by
    if os.environ.get("DRAINPIPE_ADMIN_SCREENSHOT"):
        _screenshot(page)


def _screenshot(page: Page) -> None:
    """``DRAINPIPE_ADMIN_SCREENSHOT=1``: docs/admin-page.png, the list behind the open
    history of the replayed job."""

    async def variety() -> None:
        jobs = page.jobs
        await jobs.enqueue_many("emails", [{"n": i} for i in range(6)])
        await jobs.enqueue_many("reports", [{"n": i} for i in range(3)])
        for job in await jobs.claim("emails", batch=3, lease=60):
            if job.id % 2:
                await jobs.complete(job)
            else:
                await jobs.fail(job, "smtp down")
        [report] = await jobs.claim("reports", lease=60)
        await jobs.cancel("reports", report.id)

    page.served.run(variety())
    page.driver.set_window_size(1280, 860)
    page.wait(lambda d: len(page.job_ids()) >= 10)
    page.driver.save_screenshot(str(ROOT / "docs" / "admin-page.png"))


def test_a_refused_replay_shows_its_code(page: Page) -> None:
    dead = page.dead_job()
    with psycopg.connect(page.db_url, autocommit=True) as conn:
        # stored by any writer (ensure_policies of another service): replays are refused
        conn.execute(
            "SELECT drainpipe.ensure_queue_policy_v3('emails', 65536, 10000, 30, 60, 604800,"
            " 5, NULL, 2592000, false, NULL, false)"
        )
    page.open(ADMIN)
    page.listed([dead])
    page.open_job(dead)
    page.visible("replay-job").click()
    page.visible("confirm-action").click()
    page.wait(lambda d: "Not confirmed yet" in page.by_id("action-result").text)  # answer lost
    page.by_id("confirm-action").click()
    result = page.by_id("action-result")
    page.wait(lambda d: result.text.startswith("Refused (REPLAY_BLOCKED): "))
    assert result.get_attribute("data-code") == "REPLAY_BLOCKED"
    assert not page.by_id("confirm").is_displayed()  # a refusal is final: no retry offered
    [row] = page.audit()  # refused once, answered again from storage
    assert row[:5] == ("ops@example.com", "replay", dead, "refused", "REPLAY_BLOCKED")
