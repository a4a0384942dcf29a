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
