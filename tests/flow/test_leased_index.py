"""The table's leased index (ensure_flow_indexes): a queue-wide concurrency counts
leased jobs through a (queue, visible_at) index, so claims on the shared table evaluate no
job key for it; the keyed index exists once some queue has a key_concurrency, which reads
it, and a concurrency-only queue declared later does not take it away."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from tests.sql.test_query_plan import auto_explain, run_explained, scans_of, seq_scans

KEYED = "job_messages_flow_leased_idx"
NARROW = "job_messages_flow_leased_queue_idx"


def flow(conn: psycopg.Connection[Any], queue: str, concurrency: int, key: int | None) -> None:
    conn.execute(
        "SELECT drainpipe.ensure_queue_flow_v1(%s, %s, %s, NULL, NULL, NULL, NULL, false)",
        (queue, concurrency, key),
    )


def leased_indexes(conn: psycopg.Connection[Any]) -> set[str]:
    rows = conn.execute(
        "SELECT indexrelid::regclass::text FROM pg_index"
        " WHERE indrelid = 'drainpipe.job_messages'::regclass"
    ).fetchall()
    return {name.removeprefix("drainpipe.") for (name,) in rows} & {KEYED, NARROW}


def test_a_queue_wide_concurrency_counts_through_the_narrow_index(
    fresh_database: Callable[[str], str],
) -> None:
    with psycopg.connect(fresh_database("table"), autocommit=True) as conn:
        conn.execute(
            "INSERT INTO drainpipe.job_messages (queue, payload, visible_at)"
            " SELECT 'q', jsonb_build_object('$dp', 1, 'key', 'k' || mod(g, 10),"
            " 'payload', jsonb_build_object('n', g)), now() - interval '1 hour'"
            " FROM generate_series(1, 20000) g"
        )
        flow(conn, "q", 3, None)
        assert leased_indexes(conn) == {NARROW}
        conn.execute("ANALYZE drainpipe.job_messages")
        auto_explain(conn)
        for _ in range(4):  # the limit binds: every claim counts what is leased exactly
            plans = run_explained(conn, "SELECT id FROM drainpipe.claim_jobs_v1('q', 300, 2)")
            assert seq_scans(plans, "job_messages") == [], [text for text, _ in plans]
            assert NARROW in {index for _, index in scans_of(plans, "job_messages")}
        row = conn.execute(
            "SELECT count(*) FROM drainpipe.job_messages WHERE queue = 'q' AND state = 'leased'"
        ).fetchone()
        assert row == (3,)  # the count through the narrow index held the limit


def test_a_key_limit_takes_the_keyed_index_and_keeps_it(
    fresh_database: Callable[[str], str],
) -> None:
    with psycopg.connect(fresh_database("table"), autocommit=True) as conn:
        assert leased_indexes(conn) == set()
        flow(conn, "wide", 100, None)
        assert leased_indexes(conn) == {NARROW}
        flow(conn, "keyed", 100, 1)
        assert leased_indexes(conn) == {KEYED}
        # the keyed index serves the queue-wide counts too: no second index to maintain
        flow(conn, "wide2", 50, None)
        assert leased_indexes(conn) == {KEYED}
