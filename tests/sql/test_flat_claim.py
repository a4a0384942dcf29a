"""A claim costs the same whatever waits ahead of the ready jobs (issue 19, item 5).

With 53,000 jobs leased or backing off ahead of the ready ones, a pgmq claim took 29 ms
against 0.8 ms: it walked the queue in msg_id order and filtered out every invisible row
on the way (raw ``pgmq.read`` is as slow). The claim now reads the visibility index from
its start, so rows whose lease or backoff has not ended are never visited. The table
backend was flat already (its index is ordered by visibility too).

The head is made through the SQL functions (enqueue, then claim with a long lease), so the
test holds whatever the storage layout. ``auto_explain`` with ``log_analyze`` reports what
the claim's statements really did: the rows they filtered out must stay far below the
head's size. ``bench/leased_head.py`` measures the latency.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from tests.sql.test_query_plan import plan_nodes

QUEUE = "headq"
HEAD = 20_000
READY = 500


def leased_head(url: str) -> psycopg.Connection[Any]:
    """``HEAD`` jobs claimed with a 10-minute lease, then ``READY`` ready ones behind them."""
    conn = psycopg.connect(url, autocommit=True)
    payloads = json.dumps([{"n": n} for n in range(HEAD)])
    conn.execute("SELECT count(*) FROM drainpipe.enqueue_jobs_v1(%s, %s::jsonb)", (QUEUE, payloads))
    claimed = 0
    while claimed < HEAD:
        row = conn.execute(
            "SELECT count(*) FROM drainpipe.claim_jobs_v1(%s, 600, 1000)", (QUEUE,)
        ).fetchone()
        assert row is not None and row[0] > 0
        claimed += int(row[0])
    ready = json.dumps([{"n": n} for n in range(READY)])
    conn.execute("SELECT count(*) FROM drainpipe.enqueue_jobs_v1(%s, %s::jsonb)", (QUEUE, ready))
    conn.execute("VACUUM ANALYZE")  # what autovacuum does to a table that busy
    return conn


def claim_plans(conn: psycopg.Connection[Any], batch: int) -> tuple[int, list[dict[str, Any]]]:
    """Claim once under auto_explain (ANALYZE): how many came back, and every plan node of
    the statements the claim ran."""
    notices: list[str] = []

    def collect(diag: psycopg.errors.Diagnostic) -> None:
        notices.append(diag.message_primary or "")

    try:
        conn.execute("LOAD 'auto_explain'")
    except psycopg.Error as exc:
        pytest.skip(f"auto_explain is not available: {exc}")
    for setting in (
        "auto_explain.log_min_duration = 0",
        "auto_explain.log_analyze = on",
        "auto_explain.log_nested_statements = on",
        "auto_explain.log_level = notice",
        "auto_explain.log_format = json",
    ):
        conn.execute("SET " + setting)
    conn.add_notice_handler(collect)
    try:
        rows = conn.execute(
            "SELECT id FROM drainpipe.claim_jobs_v1(%s, 30, %s)", (QUEUE, batch)
        ).fetchall()
    finally:
        conn.remove_notice_handler(collect)
        conn.execute("SET auto_explain.log_min_duration = -1")
    nodes: list[dict[str, Any]] = []
    for text in notices:
        if "plan:" in text:
            document = json.loads(text.split("plan:", 1)[1])
            if "claim_jobs_v1" not in document["Query Text"]:  # the nested statements
                nodes += plan_nodes(document["Plan"])
    return len(rows), nodes


def visited(nodes: list[dict[str, Any]]) -> int:
    """Rows the claim's scans looked at and threw away."""
    return sum(
        int(node.get("Rows Removed by Filter", 0))
        + int(node.get("Rows Removed by Index Recheck", 0))
        for node in nodes
    )


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["pgmq", "table"])
def test_a_claim_skips_a_leased_head_without_visiting_it(
    fresh_database: Callable[[str], str], backend: str
) -> None:
    conn = leased_head(fresh_database(backend))
    try:
        for _ in range(7):  # past plpgsql's custom-plan rounds: the cached plan holds too
            claimed, nodes = claim_plans(conn, 10)
            assert claimed == 10
            assert nodes, "auto_explain reported no nested statement"
            thrown_away = visited(nodes)
            assert thrown_away < READY, (
                thrown_away,
                [(n["Node Type"], n.get("Index Name")) for n in nodes],
            )
    finally:
        conn.close()
