"""The Job Inbox's list stays on an index: with thousands of stored jobs, a page of the
record listing (list_jobs_v2, newest first) reads the primary keys and stops after the page,
whatever the filters leave out (the plan auto_explain reports for the statement inside the
function): ids and stamps are drawn together, so the walk stops about a page (plus the
jobs enqueued within a millisecond of its end) below where it starts; no index on
enqueued_at is kept."""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest

from drainpipe import Jobs
from tests.admin.conftest import QUEUES


def nested_plans(url: str, statement: str, *, analyze: bool = False) -> str:
    notices: list[str] = []
    with psycopg.connect(url, autocommit=True) as conn:
        conn.add_notice_handler(lambda diag: notices.append(diag.message_primary or ""))
        conn.execute("LOAD 'auto_explain'")
        for setting in (
            "auto_explain.log_min_duration = 0",
            "auto_explain.log_nested_statements = on",
            "auto_explain.log_level = notice",
            "client_min_messages = notice",
            f"auto_explain.log_analyze = {'on' if analyze else 'off'}",
        ):
            conn.execute(f"SET {setting}")
        conn.execute(statement).fetchall()
    return "\n".join(notices)


def rows_read(plans: str, table: str) -> list[int]:
    """The rows each scan of ``table`` returned, from auto_explain's analyzed plans."""
    return [
        int(match)
        for match in re.findall(
            rf"Scan[^\n]* on {table} [^\n]*actual time=[^\n]* rows=(\d+)", plans
        )
    ]


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
async def test_the_newest_first_page_walks_the_primary_key(
    fresh_database: Any, arguments: str
) -> None:
    url = fresh_database("table")
    async with Jobs(url, QUEUES) as jobs:
        for start in range(0, 5000, 1000):
            await jobs.enqueue_many("emails", [{"n": n} for n in range(start, start + 1000)])
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE drainpipe.job_messages")
        assert conn.execute(
            "SELECT count(*) FROM pg_indexes WHERE indexdef LIKE '%(enqueued_at%'"
        ).fetchone() == (0,)
    plans = nested_plans(url, f"SELECT * FROM drainpipe.list_jobs_v2({arguments})", analyze=True)
    assert "Index Scan Backward using job_messages_pkey" in plans, plans
    assert "Seq Scan on job_messages" not in plans, plans
    # a page and the walk past it: far from the 5,000 rows stored
    read = rows_read(plans, "job_messages")
    assert read and max(read) <= 2000, (read, plans)


async def test_the_pgmq_page_reads_each_queue_by_its_primary_keys(
    fresh_database: Any,
) -> None:
    # a busy queue with a large archive and a backlog, and a quiet one: each of the four
    # tables is read backwards on its primary key, merged by id, about a page from each
    url = fresh_database("pgmq")
    async with Jobs(url, QUEUES) as jobs:
        for start in range(0, 6000, 1000):
            await jobs.enqueue_many("emails", [{"n": n} for n in range(start, start + 1000)])
        claimed = await jobs.backend.read("emails", lease=60.0, batch=1000)  # type: ignore[attr-defined]
        for job in claimed:
            await jobs.backend.complete(job)  # type: ignore[attr-defined]
        await jobs.enqueue(next(name for name in QUEUES if name != "emails"), {"n": 0})
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute(
            "SELECT count(*) FROM pg_indexes WHERE indexdef LIKE '%(enqueued_at%'"
        ).fetchone() == (0,)
    for arguments in (
        "NULL, NULL, NULL, 100, NULL, NULL, NULL, NULL",
        # a later page, in the archive's ids
        "NULL, NULL, NULL, 100, (SELECT enqueued_at FROM pgmq.a_emails WHERE msg_id = 500),"
        " 500, 'emails', NULL",
    ):
        plans = nested_plans(
            url, f"SELECT * FROM drainpipe.list_jobs_v2({arguments})", analyze=True
        )
        assert "Index Scan Backward using q_emails_pkey" in plans, plans
        assert "Index Scan Backward using a_emails_pkey" in plans, plans
        assert "Merge Append" in plans, plans
        assert "Seq Scan on q_emails" not in plans and "Seq Scan on a_emails" not in plans, plans
        read = rows_read(plans, "q_emails") + rows_read(plans, "a_emails")
        assert read and max(read) <= 2000, (read, plans)
