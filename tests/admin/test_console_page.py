"""The console on the admin page in real headless Chromium (uvicorn, real Postgres): the
queue overview with its sparklines and pause/resume, the search with the cause of death
in the code column, keyboard navigation, and bulk cancel behind a typed count.

``DRAINPIPE_ADMIN_SCREENSHOT=1`` also saves docs/console-overview.png,
docs/console-search.png and docs/console-bulk.png."""

from __future__ import annotations

import os
from typing import Any

import pytest

from drainpipe import AgentInboxes
from drainpipe.testing import Clock
from tests.admin.conftest import ADMIN, VIEWER, make_app
from tests.admin.test_admin_page import ROOT, Page, browser, page

pytestmark = pytest.mark.slow
__all__ = ["browser", "page"]  # the fixtures, shared with the page's own tests


class Unreachable(Exception):
    code = "UPSTREAM_DOWN"


def screenshot(page: Page, name: str) -> None:
    if os.environ.get("DRAINPIPE_ADMIN_SCREENSHOT"):
        page.driver.set_window_size(1280, 900)
        page.driver.save_screenshot(str(ROOT / "docs" / f"console-{name}.png"))


def spent(page: Page, error: Exception, count: int = 1) -> list[int]:
    async def make() -> list[int]:
        made = []
        for _ in range(count):
            job_id = await page.jobs.enqueue("emails", {"n": "spent"}, max_attempts=1)
            [job] = await page.jobs.claim("emails", lease=60)
            assert await page.jobs.fail(job, error) == "dead"
            made.append(job_id)
        return made

    return page.served.run(make())


def queue_row(page: Page, queue: str) -> dict[str, Any]:
    """The row's cell texts, pause button and sparkline label, read in one script (the
    overview is drawn again on every refresh, so element handles go stale)."""
    found = page.wait(
        lambda d: d.execute_script(
            """const row = document.querySelector('#queues tr[data-queue="' + arguments[0] + '"]');
               if (!row) return null;
               const button = row.querySelector('button[data-queue-action]');
               const spark = row.querySelector('svg.spark');
               return {cells: [...row.querySelectorAll('td')].map((td) => td.textContent),
                       text: row.textContent, button: button ? button.textContent : null,
                       spark: spark ? spark.getAttribute('aria-label') : null,
                       lines: spark ? spark.querySelectorAll('polyline').length : 0};""",
            queue,
        )
    )
    return dict(found)


def click_queue_action(page: Page, queue: str) -> None:
    page.wait(
        lambda d: d.execute_script(
            """const b = document.querySelector(
                 '#queues tr[data-queue="' + arguments[0] + '"] button[data-queue-action]');
               if (b) b.click();
               return !!b;""",
            queue,
        )
    )


def test_the_page_opens_on_the_overview_and_an_admin_pauses(page: Page) -> None:
    spent(page, RuntimeError("boom"), 2)

    async def traffic() -> None:
        await page.jobs.enqueue_many("emails", [{"n": n} for n in range(5)])
        for job in await page.jobs.claim("emails", batch=3, lease=60):
            await page.jobs.complete(job)
        await page.jobs.enqueue_many("reports", [{"n": n} for n in range(2)])

    page.served.run(traffic())
    page.open(ADMIN)
    page.wait(lambda d: "running" in queue_row(page, "emails")["text"])
    row = queue_row(page, "emails")
    # queued, leased, retry_wait, succeeded, dead, cancelled
    assert row["cells"][1:7] == ["2", "0", "0", "3", "2", "0"], row
    assert row["lines"] == 2  # enqueued, succeeded (failed: bars)
    assert "7 enqueued, 3 succeeded, 2 failed" in row["spark"]
    assert row["button"] == "Pause"
    page.wait(lambda d: len(page.job_ids()) == 9)
    screenshot(page, "overview")
    click_queue_action(page, "emails")
    page.wait(lambda d: "paused (2 held)" in queue_row(page, "emails")["text"])
    assert page.served.run(page.jobs.claim("emails", batch=5)) == []
    assert queue_row(page, "emails")["button"] == "Resume"
    click_queue_action(page, "emails")
    page.wait(lambda d: "running" in queue_row(page, "emails")["text"])
    actions = [row[1] for row in page.audit()]
    assert actions == ["pause", "resume"]


def test_a_viewer_sees_the_overview_without_pause(page: Page) -> None:
    page.enqueue(1)
    page.open(VIEWER)
    page.wait(lambda d: "running" in queue_row(page, "emails")["text"])
    assert queue_row(page, "emails")["button"] is None
    assert not page.by_id("bulk-controls").is_displayed()


def inbox_rows(page: Page) -> list[list[str]] | None:
    return page.driver.execute_script(  # type: ignore[no-any-return]
        """const rows = [...document.querySelectorAll('#inboxes tr[data-inbox]')];
           return rows.length ? rows.map((r) => [...r.querySelectorAll('td')]
             .map((td) => td.textContent)) : null;"""
    )


def test_the_overview_shows_the_agent_inboxes_only_when_given(page: Page) -> None:
    from tests.admin.test_console_inboxes import events_of_every_state

    page.open(VIEWER)
    page.wait(lambda d: "running" in queue_row(page, "emails")["text"])
    assert not page.by_id("agent-inboxes").is_displayed()  # this app has no agents
    clock = Clock()

    async def with_events() -> AgentInboxes:
        agents = AgentInboxes(page.db_url, lease_secret="lease-secret-of-the-page-test", now=clock)
        await events_of_every_state(agents, page.db_url, clock)
        return agents

    agents = page.served.run(with_events())
    try:
        page.lossy.app = make_app(page.jobs, page_refresh=1, agents=agents)  # type: ignore[attr-defined]
        page.open(VIEWER)
        rows = page.wait(lambda d: inbox_rows(page))
        assert page.by_id("agent-inboxes").is_displayed()
        # inbox, pending, leased, acked, delivered, failed, expired, open streams, oldest open
        archive, support = rows
        assert archive == ["archive", "0", "0", "0", "0", "0", "1", "0", "—"]
        assert support[:8] == ["support", "1", "1", "1", "1", "1", "0", "1"]
        assert support[8].endswith(" s")
    finally:
        page.served.run(agents.close())


def test_search_shows_the_cause_and_the_keyboard_moves(page: Page) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    [boom] = spent(page, RuntimeError("boom"))
    [down] = spent(page, Unreachable("down"))
    page.enqueue(3)
    page.open(VIEWER)
    page.wait(lambda d: len(page.job_ids()) == 5)
    body = page.driver.find_element(By.TAG_NAME, "body")
    body.send_keys("/")
    assert page.driver.switch_to.active_element.get_attribute("id") == "id-filter"
    page.by_id("code-filter").send_keys("UPSTREAM_DOWN\n")
    page.listed([down])
    assert "code=UPSTREAM_DOWN" in page.driver.current_url
    code = page.driver.find_element(By.CSS_SELECTOR, "#jobs td.code")
    assert code.text == "MAX_ATTEMPTS ← UPSTREAM_DOWN"
    screenshot(page, "search")
    page.by_id("code-filter").clear()
    page.by_id("code-filter").send_keys("MAX_ATTEMPTS\n")
    page.listed([down, boom])
    # j/k move between jobs, Enter opens one, Escape closes it
    page.driver.execute_script("document.activeElement.blur()")

    def press(key: str) -> None:  # to whatever has the focus, as a person would
        ActionChains(page.driver).send_keys(key).perform()

    def focused_on(job: int) -> None:
        # read in one script: a refresh renders the rows again (keeping the focus on the
        # same job), so an element fetched first may be stale by the time it is read
        script = "const e = document.activeElement; return e ? e.getAttribute('data-job') : null"
        page.wait(lambda d: d.execute_script(script) == f"emails/{job}")

    press("j")
    focused_on(down)
    press("j")
    focused_on(boom)
    press("k")
    focused_on(down)
    press(Keys.ENTER)
    dialog = page.visible("job-dialog")
    press(Keys.ESCAPE)
    page.wait(lambda d: not dialog.is_displayed())
    page.by_id("code-filter").clear()
    page.by_id("id-filter").send_keys(f"{boom}\n")
    page.listed([boom])


def test_bulk_cancel_asks_for_the_count_typed(page: Page) -> None:
    from selenium.webdriver.common.by import By

    async def tenant_jobs(count: int) -> list[int]:
        return [
            await page.jobs.enqueue("emails", {"n": n}, context={"tenant": "acme"})
            for n in range(count)
        ]

    made = page.served.run(tenant_jobs(3))
    page.enqueue(2)
    page.open(ADMIN)
    page.wait(lambda d: len(page.job_ids()) == 5)
    page.by_id("tenant-filter").send_keys("acme\n")
    page.listed(sorted(made, reverse=True))
    page.visible("bulk-cancel").click()
    confirm = page.visible("bulk-confirm")
    page.wait(lambda d: "Cancel 3 jobs matching tenant=acme?" in confirm.text)
    go = page.by_id("bulk-go")
    assert go.get_attribute("disabled") is not None
    page.by_id("bulk-count").send_keys("2")
    assert go.get_attribute("disabled") is not None  # not the count shown
    page.by_id("bulk-count").clear()
    page.by_id("bulk-count").send_keys("3")
    page.wait(lambda d: go.get_attribute("disabled") is None)
    screenshot(page, "bulk")
    assert [row for row in page.audit() if row[1] != "bulk_cancel"] == []
    # one more matches before the confirmation lands: the page shows the new count
    made += page.served.run(tenant_jobs(1))
    go.click()
    page.wait(lambda d: "The count changed. Cancel 4 jobs" in page.by_id("bulk-text").text)
    assert go.get_attribute("disabled") is not None
    page.by_id("bulk-count").send_keys("4")
    page.wait(lambda d: go.get_attribute("disabled") is None)
    go.click()
    page.wait(lambda d: "Cancelled 4 of 4." in page.by_id("bulk-result").text)
    rows = page.audit()
    assert sorted(row[2] for row in rows if row[1] == "cancel") == sorted(made)
    assert [row[1] for row in rows if row[1].startswith("bulk")] == ["bulk_cancel"]
    page.wait(
        lambda d: all(
            cell.text == "cancelled" for cell in d.find_elements(By.CSS_SELECTOR, "#jobs td.state")
        )
    )
