"""The webhook claim reads its indexes in order with a large table and stale statistics.

The state that broke it: many processed messages, a VACUUM taken while none was waiting
(autovacuum does that when workers keep up), then a backlog. Before the claim turned
bitmap scans off, its generic plan sorted every due message before its LIMIT, and its
dead-letter sweep read every due message to find the few whose last lease ran out. The
messages are written straight into storage (fast); ``auto_explain`` reports the plans of
the statements ``claim_webhooks_v1`` runs.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.sql.test_query_plan import auto_explain, run_explained, scans_of

PROCESSED = 200_000
BACKLOG = 2_000
SOURCE = "hooks"


def fill(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SET session_replication_role = replica")  # no agent fan-out: none listens
    conn.execute(
        "INSERT INTO drainpipe.webhook_inbox (source, message_id, payload, status, processed_at)"
        " SELECT %s, 'done-' || g, '{}', 'processed', now() - interval '1 day'"
        " FROM generate_series(1, %s) g",
        (SOURCE, PROCESSED),
    )
    conn.execute("VACUUM drainpipe.webhook_inbox")  # nothing due: the ready index looks empty
    conn.execute(
        "INSERT INTO drainpipe.webhook_inbox (source, message_id, payload, available_at)"
        " SELECT %s, 'due-' || g, '{}', now() - interval '1 hour' + g * interval '1 ms'"
        " FROM generate_series(1, %s) g",
        (SOURCE, BACKLOG),
    )
    # two whose lease ran out on their last attempt: the sweep's work
    conn.execute(
        "INSERT INTO drainpipe.webhook_inbox (source, message_id, payload, status, attempts,"
        " max_attempts, available_at, locked_by, locked_until)"
        " SELECT %s, 'spent-' || g, '{}', 'processing', 3, 3, now() - interval '2 hours',"
        " 'gone', now() - interval '2 hours' FROM generate_series(1, 2) g",
        (SOURCE,),
    )
    conn.execute("SET session_replication_role = origin")


@pytest.mark.slow
def test_the_claim_and_its_sweep_stay_on_their_indexes_after_a_vacuum_of_an_idle_source(
    db_url: str,
) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        fill(conn)
        auto_explain(conn)
        for _ in range(3):  # plpgsql keeps the plans: the later claims run them again
            plans = run_explained(
                conn,
                "SELECT id FROM drainpipe.claim_webhooks_v1(%s, 'worker', 10, 30)",
                (SOURCE,),
            )
            nested = [(t, n) for t, n in plans if "claim_webhooks_v1(" not in t]
            scans = scans_of(nested, "webhook_inbox")
            assert ("Index Scan", "webhook_inbox_ready_idx") in scans, scans
            assert ("Index Scan", "webhook_inbox_exhausted_idx") in scans, scans
            assert all(kind not in ("Seq Scan", "Bitmap Heap Scan") for kind, _ in scans), scans
        dead = conn.execute(
            "SELECT message_id FROM drainpipe.webhook_inbox WHERE status = 'dead' ORDER BY 1"
        ).fetchall()
        assert [row[0] for row in dead] == ["spent-1", "spent-2"]
        claimed = conn.execute(
            "SELECT message_id FROM drainpipe.webhook_inbox WHERE status = 'processing'"
            " ORDER BY available_at, id"
        ).fetchall()
        assert [row[0] for row in claimed] == [f"due-{n}" for n in range(1, 31)]
