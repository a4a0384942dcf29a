"""A queue the database has never held is a one-line error with a code and exit status 1,
for every ``jobs`` command that names queues, on both storages; a known queue with no
rows left (the table storage keeps no queue list) still answers."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from drainpipe import Jobs
from tests.cli.test_cli_ops import run_cli

UNKNOWN = 'drainpipe: not_found QUEUE_NOT_FOUND: No queue "nosuchqueue" in this database'


async def _one_settled_email(url: str) -> None:
    """An email enqueued, claimed and completed: the queue is known but holds nothing."""
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    try:
        jobs = Jobs(conn, {"emails": dict[str, Any]})
        await jobs.enqueue("emails", {"to": "a@x"})
        [job] = await jobs.claim("emails")
        await jobs.complete(job)
    finally:
        await conn.close()


@pytest.mark.parametrize(
    "argv",
    [
        ["jobs", "dead", "nosuchqueue"],
        ["jobs", "dead", "nosuchqueue", "--json"],
        ["jobs", "retry", "nosuchqueue"],
        ["jobs", "stats", "--queue", "emails", "--queue", "nosuchqueue"],
    ],
)
def test_an_unknown_queue_fails_with_a_code(capsys: Any, jobs_db_url: str, argv: list[str]) -> None:
    asyncio.run(_one_settled_email(jobs_db_url))
    status, out, err = run_cli(capsys, *argv, "--database-url", jobs_db_url)
    assert (status, out) == (1, "")
    assert err.startswith(UNKNOWN) and err.count("\n") == 1, err


def test_a_known_queue_still_answers(capsys: Any, jobs_db_url: str) -> None:
    asyncio.run(_one_settled_email(jobs_db_url))
    db = ["--database-url", jobs_db_url]
    assert run_cli(capsys, "jobs", "dead", "emails", *db) == (0, "no dead letters in emails\n", "")
    assert run_cli(capsys, "jobs", "retry", "emails", *db)[:2] == (
        0,
        "retried 0 dead letters of emails\n",
    )
    status, out, _ = run_cli(capsys, "jobs", "stats", "--queue", "emails", *db)
    assert status == 0 and out.splitlines()[1].split()[0] == "emails", out
