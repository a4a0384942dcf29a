"""Pulls and peeks read their index in order with a large table and stale statistics.

The state that broke them: many settled events, a VACUUM taken while the inbox had no open
event (autovacuum does that when agents keep up), then a backlog. agent_next_v1's generic
plan then sorted every due event before its LIMIT, until its functions turned
bitmap scans off. The
settled events are written straight into storage (fast); ``auto_explain`` reports the
plans of the statements the functions really run.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.agents.conftest import Setup
from tests.sql.test_query_plan import auto_explain, plan_nodes, run_explained, scans_of

SETTLED = 200_000
BACKLOG = 2_000


def fill(conn: psycopg.Connection[Any], inbox_id: str, settled: int = SETTLED) -> None:
    conn.execute(
        "INSERT INTO drainpipe.agent_events (inbox_id, message_id, subscription_id, source,"
        " state, hold_until, due_at, received_at, settled_at, last_op)"
        " SELECT %s, g, s.id, 'billing', 'acked', now() + interval '7 days',"
        " now() - interval '2 days', now() - interval '2 days', now() - interval '1 day', 'ack'"
        " FROM generate_series(1, %s) g,"
        " (SELECT id FROM drainpipe.agent_subscriptions WHERE inbox_id = %s) s",
        (inbox_id, settled, inbox_id),
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


def due_scan_buffers(conn: psycopg.Connection[Any], inbox_id: str) -> int:
    """Pages a fifo pick of 10 reads in the due index and the heap (EXPLAIN BUFFERS), with
    the ordered index scan agent_next_v1 runs (its functions turn bitmap scans off)."""
    conn.execute("SET enable_bitmapscan = off")
    row = conn.execute(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT x.id FROM drainpipe.agent_events x"
        " WHERE hashtext(x.inbox_id) = hashtext(%s) AND x.inbox_id = %s"
        " AND x.state IN ('pending', 'leased') AND x.due_at <= now()"
        " ORDER BY x.due_at, x.id LIMIT 10",
        (inbox_id, inbox_id),
    ).fetchone()
    assert row is not None
    [document] = row[0]
    nodes = list(plan_nodes(document["Plan"]))
    [scan] = [node for node in nodes if node.get("Index Name") == "agent_events_due_idx"]
    return int(scan["Shared Hit Blocks"]) + int(scan["Shared Read Blocks"])


@pytest.mark.slow
async def test_a_vacuum_of_a_large_inbox_removes_the_entries_pulls_would_step_over(
    setup: Setup,
) -> None:
    """Hand-outs and acks leave dead entries at the front of the due index, where every
    pull starts. On a table this large a plain VACUUM would skip its indexes (fewer than 2%
    of the pages hold dead rows: "index scan bypassed") and each pull would still step over
    every event handed out since; the table's storage parameters make every vacuum clean
    them."""
    with psycopg.connect(setup.url, autocommit=True) as conn:
        fill(conn, setup.inbox_id, 2 * SETTLED)
        conn.execute("VACUUM drainpipe.agent_events")
        fresh = due_scan_buffers(conn, setup.inbox_id)
        # 1,500 of the backlog handed out and acked, as pulls do: two dead versions each
        conn.execute(
            "UPDATE drainpipe.agent_events SET state = 'leased', delivery = 1,"
            " due_at = now() + interval '60 s', lease_until = now() + interval '60 s'"
            " WHERE id IN (SELECT id FROM drainpipe.agent_events WHERE state = 'pending'"
            " ORDER BY id LIMIT 1500)"
        )
        conn.execute(
            "UPDATE drainpipe.agent_events SET state = 'acked', last_op = 'ack',"
            " settled_at = now() WHERE state = 'leased'"
        )
        conn.execute("VACUUM drainpipe.agent_events")
        after = due_scan_buffers(conn, setup.inbox_id)
        options = {
            name: options
            for name, options in conn.execute(
                "SELECT relname, reloptions FROM pg_class WHERE oid IN"
                " ('drainpipe.agent_events'::regclass, 'drainpipe.webhook_inbox'::regclass)"
            ).fetchall()
        }
    assert fresh <= 16, fresh  # the index's levels and the heap pages of the 10 rows
    # without the cleanup: about 50 more (the index pages of 1,500 dead entries, and the
    # heap pages of those no scan has marked dead yet)
    assert after <= fresh + 3, (fresh, after)
    for name in ("agent_events", "webhook_inbox"):
        assert "vacuum_index_cleanup=on" in options[name], options
        assert "autovacuum_vacuum_scale_factor=0" in options[name], options


async def test_two_inboxes_whose_ids_share_a_hash_keep_their_own_events(setup: Setup) -> None:
    """The indexes lead with hashtext(inbox_id); two inboxes with the
    same hash meet in one index range, and each pull and peek still sees its own only."""
    with psycopg.connect(setup.url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT array_agg(name) FROM (SELECT 'inb_hash' || g AS name"
            " FROM generate_series(1, 300000) g) n"
            " GROUP BY hashtext(name) HAVING count(*) > 1 LIMIT 1"
        ).fetchone()
        assert row is not None
        ids = row[0][:2]
        for inbox_id in ids:  # two inboxes like the fixture's, under the colliding ids
            conn.execute(
                "INSERT INTO drainpipe.agent_inboxes SELECT (jsonb_populate_record(i,"
                " jsonb_build_object('id', %s::text, 'name', %s::text))).*"
                " FROM drainpipe.agent_inboxes i WHERE i.id = %s",
                (inbox_id, inbox_id, setup.inbox_id),
            )
            conn.execute(
                "INSERT INTO drainpipe.agent_events (inbox_id, message_id, subscription_id,"
                " source, hold_until, due_at, received_at)"
                " SELECT %s, g, 'sub_x', 'billing', now() + interval '7 days',"
                " now() - interval '1 hour' + g * interval '1 ms', now() - interval '1 hour'"
                " FROM generate_series(1, 6) g",
                (inbox_id,),
            )
        owners: dict[int, str] = dict(
            conn.execute(
                "SELECT id, inbox_id FROM drainpipe.agent_events WHERE inbox_id = ANY (%s)",
                (ids,),
            ).fetchall()
        )
    assert len(ids) == 2 and len(owners) == 12
    for inbox_id in ids:
        inbox = setup.agents.inbox(inbox_id)
        peeked = (await inbox.events()).items
        pulled = []
        for order in ("fifo", "lifo", "priority"):  # each scan meets the other's entries
            pulled += await inbox.next(max=2, order=order)
        pulled += await inbox.next(max=10)  # nothing of this inbox is left
        assert len(peeked) == 6 and len(pulled) == 6, (len(peeked), len(pulled))
        for envelope in peeked + pulled:
            assert owners[int(envelope.id.removeprefix("evt_"))] == inbox_id
