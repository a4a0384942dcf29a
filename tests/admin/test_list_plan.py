"""The Job Inbox's list stays on an index: with thousands of stored jobs, a page of the
record listing walks the primary key backwards and stops after the page, whatever the
filters leave out (the plan auto_explain reports for the statement inside the function)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from drainpipe import Jobs
from tests.admin.conftest import QUEUES


def nested_plans(url: str, statement: str) -> str:
    notices: list[str] = []
    with psycopg.connect(url, autocommit=True) as conn:
        conn.add_notice_handler(lambda diag: notices.append(diag.message_primary or ""))
        conn.execute("LOAD 'auto_explain'")
        for setting in (
            "auto_explain.log_min_duration = 0",
            "auto_explain.log_nested_statements = on",
            "auto_explain.log_level = notice",
            "client_min_messages = notice",
        ):
            conn.execute(f"SET {setting}")
        conn.execute(statement).fetchall()
    return "\n".join(notices)


@pytest.mark.parametrize(
    "arguments",
    [
        "NULL, NULL, NULL, 500, NULL, NULL, NULL",  # the first page
        "NULL, NULL, NULL, 500, 2500, 'emails', NULL",  # a later page
        "'emails', NULL, NULL, 100, 2000, 'emails', NULL",  # one queue's page
    ],
)
async def test_a_page_walks_the_primary_key(fresh_database: Any, arguments: str) -> None:
    url = fresh_database("table")
    async with Jobs(url, QUEUES) as jobs:
        for start in range(0, 5000, 1000):
            await jobs.enqueue_many("emails", [{"n": n} for n in range(start, start + 1000)])
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE drainpipe.job_messages")
    plans = nested_plans(url, f"SELECT * FROM drainpipe.list_jobs_v1({arguments})")
    assert "Index Scan Backward using job_messages_pkey" in plans, plans
    assert "Seq Scan on job_messages" not in plans, plans


@pytest.mark.parametrize(
    "arguments",
    [
        "NULL, NULL, NULL, 500, NULL, NULL, NULL, NULL",  # the first page
        # a later page: the cursor is the 2,500th newest job's (enqueued_at, id, queue)
        "NULL, NULL, NULL, 500, (SELECT enqueued_at FROM drainpipe.job_messages WHERE id = 2500),"
        " 2500, 'emails', NULL",
        "'emails', NULL, NULL, 100, NULL, NULL, NULL, NULL",  # one queue's page
    ],
)
async def test_the_newest_first_page_walks_the_enqueued_index(
    fresh_database: Any, arguments: str
) -> None:
    url = fresh_database("table")
    async with Jobs(url, QUEUES) as jobs:
        for start in range(0, 5000, 1000):
            await jobs.enqueue_many("emails", [{"n": n} for n in range(start, start + 1000)])
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE drainpipe.job_messages")
    plans = nested_plans(url, f"SELECT * FROM drainpipe.list_jobs_v2({arguments})")
    assert "Index Scan Backward using job_messages_enqueued_idx" in plans, plans
    assert "Seq Scan on job_messages" not in plans, plans
    assert "Sort" not in plans, plans


async def test_the_pgmq_page_reads_each_queue_table_by_its_enqueued_index(
    fresh_database: Any,
) -> None:
    # a busy queue with a large archive and a backlog, and a quiet one: each of the four
    # tables is read backwards on its index, at most a page from each, and only those few
    # rows are sorted
    url = fresh_database("pgmq")
    async with Jobs(url, QUEUES) as jobs:
        for start in range(0, 6000, 1000):
            await jobs.enqueue_many("emails", [{"n": n} for n in range(start, start + 1000)])
        claimed = await jobs.backend.read("emails", lease=60.0, batch=1000)  # type: ignore[attr-defined]
        for job in claimed:
            await jobs.backend.complete(job)  # type: ignore[attr-defined]
        await jobs.enqueue(next(name for name in QUEUES if name != "emails"), {"n": 0})
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE pgmq.q_emails")
        conn.execute("ANALYZE pgmq.a_emails")
    plans = nested_plans(
        url, "SELECT * FROM drainpipe.list_jobs_v2(NULL, NULL, NULL, 100, NULL, NULL, NULL, NULL)"
    )
    assert "Index Scan Backward using q_emails_enqueued_idx" in plans, plans
    assert "Index Scan Backward using a_emails_enqueued_idx" in plans, plans
    assert "Seq Scan on q_emails" not in plans and "Seq Scan on a_emails" not in plans, plans
