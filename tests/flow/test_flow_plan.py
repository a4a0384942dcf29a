"""The limited claim stays on its indexes with a big backlog (an EXPLAIN test, as
tests/sql/test_query_plan.py does for the unlimited one): every statement the flow claim
runs, planned by plpgsql with default settings, reads an index of the storage table, never
a Seq Scan, with half of the backlog's keys held."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from tests.sql.test_query_plan import auto_explain, run_explained, scans_of, seq_scans

BACKLOG = 50_000
KEYS = 1_000
QUEUE = "bench"


def envelope(g: str) -> str:
    return (
        "jsonb_build_object('$dp', 1, 'context', '{}'::jsonb, 'key', 'k' || "
        f"mod({g}, {KEYS}), 'payload', jsonb_build_object('n', {g}))"
    )


@pytest.fixture
def limited(
    fresh_database: Callable[[str], str],
) -> Iterator[Callable[[str], psycopg.Connection[Any]]]:
    opened: list[psycopg.Connection[Any]] = []

    def make(backend: str) -> psycopg.Connection[Any]:
        conn = psycopg.connect(fresh_database(backend), autocommit=True)
        opened.append(conn)
        if backend == "table":
            conn.execute(
                "INSERT INTO drainpipe.job_messages (queue, payload, visible_at)"
                f" SELECT %s, {envelope('g')}, now() - interval '1 hour' + g * interval '1 ms'"
                f" FROM generate_series(1, {BACKLOG}) g",
                (QUEUE,),
            )
        else:
            conn.execute("SELECT drainpipe.ensure_job_queue_v1(%s)", (QUEUE,))
            conn.execute(
                f"INSERT INTO pgmq.q_{QUEUE} (vt, message)"
                " SELECT now() - interval '1 hour' + g * interval '1 ms',"
                f" jsonb_build_object('payload', {envelope('g')}, 'max_attempts', 5)"
                f" FROM generate_series(1, {BACKLOG}) g"
            )
        conn.execute(
            "SELECT drainpipe.ensure_queue_flow_v1(%s, 1000, 1, NULL, NULL, NULL, NULL, false)",
            (QUEUE,),
        )
        table = "drainpipe.job_messages" if backend == "table" else f"pgmq.q_{QUEUE}"
        conn.execute(f"ANALYZE {table}")
        # half the keys held: one job of each of 500 keys leased (key_concurrency=1)
        held = conn.execute(
            "SELECT count(*) FROM drainpipe.claim_jobs_v1(%s, 300, 500)", (QUEUE,)
        ).fetchone()
        assert held == (500,)
        return conn

    yield make
    for conn in opened:
        conn.close()


@pytest.mark.parametrize("backend", ["table", "pgmq"])
def test_the_limited_claim_stays_on_indexes(
    limited: Callable[[str], psycopg.Connection[Any]], backend: str
) -> None:
    conn = limited(backend)
    table = "job_messages" if backend == "table" else f"q_{QUEUE}"
    leased_index = (
        "job_messages_flow_leased_idx" if backend == "table" else f"q_{QUEUE}_dp_flow_leased"
    )
    auto_explain(conn)
    # more than five rounds: plpgsql has made its custom/generic choice by the last ones
    for _ in range(8):
        plans = run_explained(conn, "SELECT id FROM drainpipe.claim_jobs_v1(%s, 300, 10)", (QUEUE,))
        assert seq_scans(plans, table) == [], [text for text, _ in plans]
        used = {index for _, index in scans_of(plans, table)}
        # the per-key probes count leased jobs through the partial index
        assert leased_index in used, used
        # one statement picks (locks) and leases: no statement of its own picks before it
        picking = [nodes for _, nodes in plans if any(n["Node Type"] == "LockRows" for n in nodes)]
        assert len(picking) == 1, [text for text, _ in plans]
        [nodes] = picking
        assert any(
            n["Node Type"] == "ModifyTable" and n.get("Relation Name") == table for n in nodes
        )
        if backend == "pgmq":
            # the rows by their place (a Tid Scan): none is read by id after the pick
            assert any(
                n["Node Type"] == "Tid Scan" and n.get("Relation Name") == table for n in nodes
            )
    # 500 keys were held; the claims took jobs of the other 500, one per key
    keys = conn.execute(
        "SELECT count(DISTINCT k), count(*) FROM ("
        + (
            "SELECT drainpipe.job_key(payload) AS k FROM drainpipe.job_messages"
            " WHERE state = 'leased'"
            if backend == "table"
            else f"SELECT drainpipe.job_key(message -> 'payload') AS k FROM pgmq.q_{QUEUE}"
            " WHERE read_ct > 0"
        )
        + ") s"
    ).fetchone()
    assert keys == (580, 580)


@pytest.mark.parametrize("backend", ["table", "pgmq"])
@pytest.mark.parametrize("with_limits", [False, True])
def test_the_priority_claim_stays_on_its_index(
    fresh_database: Callable[[str], str], backend: str, with_limits: bool
) -> None:
    """A prioritised queue, with and without key limits: every statement reads
    the priority index of the storage table, never a Seq Scan, over a backlog whose top
    level is leased."""
    levels = "CASE WHEN mod(g, 100) = 0 THEN 5 WHEN mod(g, 2) = 0 THEN 0 ELSE -1 END"
    stored = (
        "jsonb_build_object('$dp', 1, 'context', '{}'::jsonb, 'key', 'k' || "
        f"mod(g, {KEYS}), 'payload', jsonb_build_object('n', g), 'priority', {levels})"
    )
    with psycopg.connect(fresh_database(backend), autocommit=True) as conn:
        for level in (5, -1):  # as the enqueues of such jobs note them
            conn.execute("SELECT drainpipe.note_job_priority(%s, %s)", (QUEUE, level))
        if backend == "table":
            conn.execute(
                "INSERT INTO drainpipe.job_messages (queue, payload, visible_at)"
                f" SELECT %s, {stored}, now() - interval '1 hour' + g * interval '1 ms'"
                f" FROM generate_series(1, {BACKLOG}) g",
                (QUEUE,),
            )
        else:
            conn.execute(
                f"INSERT INTO pgmq.q_{QUEUE} (vt, message)"
                " SELECT now() - interval '1 hour' + g * interval '1 ms',"
                f" jsonb_build_object('payload', {stored}, 'max_attempts', 5)"
                f" FROM generate_series(1, {BACKLOG}) g"
            )
        table = "job_messages" if backend == "table" else f"q_{QUEUE}"
        index = "job_messages_priority_idx" if backend == "table" else f"q_{QUEUE}_dp_priority"
        conn.execute(
            f"ANALYZE {'drainpipe.job_messages' if backend == 'table' else 'pgmq.' + table}"
        )
        # the top level leased: a claim passes it (nothing ready there) on to the next
        top = conn.execute(
            "SELECT count(*) FROM drainpipe.claim_jobs_v1(%s, 300, %s)", (QUEUE, BACKLOG // 100)
        ).fetchone()
        assert top == (BACKLOG // 100,)
        if with_limits:  # the 5s' keys are held from now on
            conn.execute(
                "SELECT drainpipe.ensure_queue_flow_v1(%s, NULL, 1, NULL, NULL, NULL, NULL, false)",
                (QUEUE,),
            )
        auto_explain(conn)
        for _ in range(8):
            plans = run_explained(
                conn, "SELECT id FROM drainpipe.claim_jobs_v1(%s, 300, 10)", (QUEUE,)
            )
            assert seq_scans(plans, table) == [], [text for text, _ in plans]
            used = {name for _, name in scans_of(plans, table)}
            assert index in used, used
        levels_taken = conn.execute(
            "SELECT array_agg(DISTINCT drainpipe.job_priority(p)) FROM ("
            + (
                "SELECT payload AS p FROM drainpipe.job_messages WHERE state = 'leased'"
                if backend == "table"
                else f"SELECT message -> 'payload' AS p FROM pgmq.q_{QUEUE} WHERE read_ct > 0"
            )
            + ") s"
        ).fetchone()
        # the 5s first, then 0s only: no -1 was taken while 0s were ready
        assert levels_taken == ([0, 5],)
