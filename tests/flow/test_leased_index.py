"""The table's leased index (ensure_flow_indexes): a queue-wide concurrency counts
leased jobs through a (queue, visible_at) index, so claims on the shared table evaluate no
job key for it; the keyed index exists once some queue has a key_concurrency, which reads
it, and a concurrency-only queue declared later does not take it away. A queue with a
policy (every lease held to max_lease) needs neither: its count reads the live index over
the window its leases can end in, and its leases enter no index of ours; on both storages
that window reaches the leases granted before its bound."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from tests.sql.test_query_plan import auto_explain, run_explained, scans_of, seq_scans

KEYED = "job_messages_flow_leased_idx"
NARROW = "job_messages_flow_leased_queue_idx"


def flow(conn: psycopg.Connection[Any], queue: str, concurrency: int, key: int | None) -> None:
    conn.execute(
        "SELECT drainpipe.ensure_queue_flow_v1(%s, %s, %s, NULL, NULL, NULL, NULL, false)",
        (queue, concurrency, key),
    )


def policy_flow(conn: psycopg.Connection[Any], queue: str, max_lease: float) -> None:
    """A policy (lease 30 s, ``max_lease``) with concurrency=3, as ensure_policies() sends it."""
    conn.execute(
        "SELECT drainpipe.ensure_queue_policy_v3(%s, 1000000, 1000000, 30, %s, 86400, 5, NULL,"
        " 86400, false, NULL, true, p_concurrency => 3)",
        (queue, max_lease),
    )


def fill(conn: psycopg.Connection[Any], queue: str, count: int) -> None:
    conn.execute(
        "INSERT INTO drainpipe.job_messages (queue, payload, visible_at)"
        " SELECT %s, jsonb_build_object('$dp', 1, 'key', 'k' || mod(g, 10),"
        " 'payload', jsonb_build_object('n', g)), now() - interval '1 hour'"
        " FROM generate_series(1, %s) g",
        (queue, count),
    )


def leased(conn: psycopg.Connection[Any], queue: str) -> int:
    row = conn.execute(
        "SELECT count(*) FROM drainpipe.job_messages WHERE queue = %s AND state = 'leased'",
        (queue,),
    ).fetchone()
    assert row is not None
    return int(row[0])


def lease_window(conn: psycopg.Connection[Any]) -> tuple[float, float]:
    """The queue's window, and how far ahead every lease from before it ends (s)."""
    row = conn.execute(
        "SELECT lease_window, extract(epoch FROM leases_end_by - clock_timestamp())"
        " FROM drainpipe.queue_flow WHERE queue = 'q'"
    ).fetchone()
    assert row is not None and row[0] is not None
    return float(row[0]), float(row[1] or 0)


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


def test_a_policy_queue_counts_its_leases_through_the_live_index(
    fresh_database: Callable[[str], str],
) -> None:
    with psycopg.connect(fresh_database("table"), autocommit=True) as conn:
        fill(conn, "q", 20000)
        policy_flow(conn, "q", 60)
        assert leased_indexes(conn) == set()  # a lease pays for no index of ours
        assert lease_window(conn) == (61, 0)  # max_lease and the claim's second of slack
        conn.execute("ANALYZE drainpipe.job_messages")
        auto_explain(conn)
        for _ in range(4):  # the limit binds: every claim counts what is leased exactly
            plans = run_explained(conn, "SELECT id FROM drainpipe.claim_jobs_v1('q', 30, 2)")
            assert seq_scans(plans, "job_messages") == [], [text for text, _ in plans]
            assert "job_messages_live_idx" in {i for _, i in scans_of(plans, "job_messages")}
        assert leased(conn, "q") == 3


@pytest.mark.parametrize("backend", ["table", "pgmq"])
@pytest.mark.parametrize("before", ["no policy", "a longer max_lease"])
def test_a_lease_granted_before_the_bound_still_counts(
    fresh_database: Callable[[str], str], before: str, backend: str
) -> None:
    """Leases longer than max_lease, granted before the policy (or under a longer one), end
    past the window a new max_lease gives: the window reaches them, so the limit holds."""
    with psycopg.connect(fresh_database(backend), autocommit=True) as conn:
        if backend == "table":
            fill(conn, "q", 50)
        else:
            conn.execute("SELECT drainpipe.ensure_job_queue_v1('q')")
            conn.execute(
                "INSERT INTO pgmq.q_q (vt, message) SELECT now() - interval '1 hour',"
                " jsonb_build_object('payload', jsonb_build_object('$dp', 1, 'payload',"
                " jsonb_build_object('n', g)), 'max_attempts', 5)"
                " FROM generate_series(1, 50) g"
            )
        if before == "a longer max_lease":
            policy_flow(conn, "q", 3600)
        conn.execute("SELECT id FROM drainpipe.claim_jobs_v1('q', 1800, 2)").fetchall()
        policy_flow(conn, "q", 60)
        # the window is max_lease and the claim's second of slack, and the count reaches
        # the long leases' end: found by a read of the jobs under the queue's first policy,
        # and as the old window from now when max_lease shrinks
        window, end_by = lease_window(conn)
        assert window == 61
        assert (1790 < end_by < 1802) if before == "no policy" else (3590 < end_by < 3603)
        taken = conn.execute("SELECT id FROM drainpipe.claim_jobs_v1('q', 30, 5)").fetchall()
        assert len(taken) == 1  # 2 leased of 3 before this claim
        policy_flow(conn, "q", 60)  # the next cold start changes nothing
        assert lease_window(conn)[1] == pytest.approx(end_by, abs=2)
        if backend == "table":
            assert leased(conn, "q") == 3
            return
        # pgmq: the count's scan of the queue's vt index stops at the window's end
        auto_explain(conn)
        plans = run_explained(conn, "SELECT id FROM drainpipe.claim_jobs_v1('q', 30, 5)")
        conds = [
            node.get("Index Cond", "")
            for _, nodes in plans
            for node in nodes
            if node.get("Index Name") == "q_q_vt_idx"
        ]
        assert any("vt <=" in cond and "vt >" in cond for cond in conds), conds


def test_a_per_key_pick_beside_keeps_the_narrow_index(
    fresh_database: Callable[[str], str],
) -> None:
    """The per-key pick (ordered, key_rate) plans a probe of leased jobs, run or not: a
    policy queue beside one does not take its index away."""
    with psycopg.connect(fresh_database("table"), autocommit=True) as conn:
        policy_flow(conn, "windowed", 60)
        assert leased_indexes(conn) == set()
        conn.execute(
            "SELECT drainpipe.ensure_queue_flow_v1('ord', NULL, NULL, NULL, NULL, NULL, NULL, true)"
        )
        assert leased_indexes(conn) == {NARROW}
        policy_flow(conn, "windowed", 60)
        assert leased_indexes(conn) == {NARROW}
