"""The table's lease bound: the claim and the heartbeat refuse a lease longer
than the queue's max_lease themselves, so drainpipe.job_messages has no row trigger that
every UPDATE (a claim, a completion) would fetch and lock its rows for."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from drainpipe import Jobs, QueuePolicy

QUEUES: dict[str, Any] = {"inbox": dict[str, Any], "free": dict[str, Any]}


def row_triggers(conn: psycopg.Connection[Any]) -> list[str]:
    rows = conn.execute(
        "SELECT tgname FROM pg_trigger WHERE tgrelid = 'drainpipe.job_messages'::regclass"
        " AND NOT tgisinternal AND tgtype & 1 = 1"  # TRIGGER_TYPE_ROW
    ).fetchall()
    return [name for (name,) in rows]


async def test_the_claim_and_the_heartbeat_hold_the_bound_without_a_row_trigger(
    fresh_database: Callable[[str], str],
) -> None:
    url = fresh_database("table")
    policies = {"inbox": QueuePolicy(lease=5, max_lease=10)}
    async with Jobs(url, QUEUES, policies=policies) as jobs:
        await jobs.ensure_policies()
        await jobs.enqueue_many("inbox", [{"n": 1}, {"n": 2}])
        await jobs.enqueue("free", {"n": 3})
    with psycopg.connect(url, autocommit=True) as conn:
        assert row_triggers(conn) == []
        claim = "SELECT id, attempts FROM drainpipe.claim_jobs_v1(%s, %s, 1, %s)"
        with pytest.raises(psycopg.Error) as refused:
            conn.execute(claim, ("inbox", 11.5, None))
        assert refused.value.sqlstate == "DPQ03"
        assert "max_lease of 10 s" in str(refused.value)
        # measured from the attempt's start (p_now), not from the server's clock
        later = "now() + interval '1 hour'"
        [(job_id, attempt)] = conn.execute(
            f"SELECT id, attempts FROM drainpipe.claim_jobs_v1('inbox', 11, 1, {later})"
        ).fetchall()
        # a heartbeat from now: the attempt started in an hour, so an hour and 10 s is fine
        extend = "SELECT * FROM drainpipe.extend_job_leases_v1('inbox', %s, %s, %s)"
        assert conn.execute(extend, ([job_id], [attempt], 3610)).fetchall() == [(job_id,)]
        with pytest.raises(psycopg.Error) as too_long:
            conn.execute(extend, ([job_id], [attempt], 3620))
        assert too_long.value.sqlstate == "DPQ03"
        # another queue keeps its leases; an empty pick refuses nothing (no lease was written)
        assert len(conn.execute(claim, ("free", 300, None)).fetchall()) == 1
        assert conn.execute(claim, ("free", 300, None)).fetchall() == []
