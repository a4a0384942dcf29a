"""Pulls and peeks read their index in order with a large table and stale statistics.

The state that broke them: many settled events, a VACUUM taken while the inbox had no open
event (autovacuum does that when agents keep up), then a backlog. agent_next_v1's generic
plan then sorted every due event before its LIMIT (webhook-inbox migration 0007). The
settled events are written straight into storage (fast); ``auto_explain`` reports the
plans of the statements the functions really run.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.agents.conftest import Setup
from tests.sql.test_query_plan import auto_explain, run_explained, scans_of

SETTLED = 200_000
BACKLOG = 2_000


def fill(conn: psycopg.Connection[Any], inbox_id: str) -> None:
    conn.execute(
        "INSERT INTO drainpipe.agent_events (inbox_id, message_id, subscription_id, source,"
        " state, hold_until, due_at, received_at, settled_at, last_op)"
        " SELECT %s, g, s.id, 'billing', 'acked', now() + interval '7 days',"
        " now() - interval '2 days', now() - interval '2 days', now() - interval '1 day', 'ack'"
        " FROM generate_series(1, %s) g,"
        " (SELECT id FROM drainpipe.agent_subscriptions WHERE inbox_id = %s) s",
        (inbox_id, SETTLED, inbox_id),
    )
    conn.execute("VACUUM drainpipe.agent_events")  # no open event: the due index looks empty
    conn.execute(
        "INSERT INTO drainpipe.agent_events (inbox_id, message_id, subscription_id, source,"
        " priority, hold_until, due_at, received_at)"
        " SELECT %s, g, s.id, 'billing', g %% 3 - 1, now() + interval '7 days',"
        " now() - interval '1 hour' + g * interval '1 ms', now() - interval '1 hour'"
        " FROM generate_series(1, %s) g,"
        " (SELECT id FROM drainpipe.agent_subscriptions WHERE inbox_id = %s) s",
        (inbox_id, BACKLOG, inbox_id),
    )


def leased(conn: psycopg.Connection[Any]) -> set[int]:
    rows = conn.execute("SELECT id FROM drainpipe.agent_events WHERE state = 'leased'")
    return {row[0] for row in rows.fetchall()}


@pytest.mark.slow
async def test_pulls_and_peeks_stay_on_their_index_after_a_vacuum_of_an_empty_inbox(
    setup: Setup,
) -> None:
    with psycopg.connect(setup.url, autocommit=True) as conn:
        fill(conn, setup.inbox_id)
        first_due = {
            row[0]
            for row in conn.execute(
                "SELECT id FROM drainpipe.agent_events WHERE state = 'pending'"
                " ORDER BY due_at, id LIMIT 10"
            ).fetchall()
        }
        auto_explain(conn)
        pulls = {
            "fifo": ("Index Scan", "agent_events_due_idx"),
            "lifo": ("Index Scan", "agent_events_due_idx"),
            "priority": ("Index Scan", "agent_events_ranked_idx"),
        }
        for order, pick in pulls.items():
            plans = run_explained(
                conn,
                "SELECT id, delivery FROM drainpipe.agent_next_v1(%s, %s, 10, 'manual')",
                (setup.inbox_id, order),
            )
            nested = [(text, nodes) for text, nodes in plans if "agent_next_v1(" not in text]
            scans = scans_of(nested, "agent_events")
            assert pick in scans, (order, scans)
            assert all(kind not in ("Seq Scan", "Bitmap Heap Scan") for kind, _ in scans), (
                order,
                scans,
            )
            if order == "fifo":  # what the ordered scan found is what fifo asks for
                assert leased(conn) == first_due
        plans = run_explained(
            conn, "SELECT id FROM drainpipe.agent_events_v1(%s, 0, 50)", (setup.inbox_id,)
        )
        scans = scans_of(plans, "agent_events")
        assert ("Index Scan", "agent_events_open_idx") in scans, scans
        assert all(kind not in ("Seq Scan", "Bitmap Heap Scan") for kind, _ in scans), scans
