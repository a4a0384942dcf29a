"""Newest first without an index on ``enqueued_at``.

An enqueue draws a job's id and stamps it with the clock read right after, drawing again
when the reads around the draw are more than ``drainpipe.job_stamp_window()`` apart. So a
job with a smaller id is at most one window newer, and ``list_jobs_v2`` walks the primary
keys down and stops a window below its page. These tests hold the pages against the order
read from the tables themselves, with overlapping transactions, claims, completions, a
quiet queue and filters; and on pgmq, a queue as an earlier listing left it (jobs stamped
with their transaction's start, now()) against the partial index kept for them."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import psycopg

from drainpipe import Jobs

QUEUES: dict[str, Any] = {"busy": dict[str, Any], "quiet": dict[str, Any]}

STORED = {
    "table": "SELECT id, queue FROM drainpipe.job_messages"
    " ORDER BY enqueued_at DESC, id DESC, queue DESC",
    "pgmq": "SELECT id, queue FROM ("
    " SELECT msg_id AS id, 'busy' AS queue, enqueued_at FROM pgmq.q_busy"
    " UNION ALL SELECT msg_id, 'busy', enqueued_at FROM pgmq.a_busy"
    " UNION ALL SELECT msg_id, 'quiet', enqueued_at FROM pgmq.q_quiet"
    " UNION ALL SELECT msg_id, 'quiet', enqueued_at FROM pgmq.a_quiet) s"
    " ORDER BY enqueued_at DESC, id DESC, queue DESC",
}
PAGE = "SELECT id, queue, enqueued_at FROM drainpipe.list_jobs_v2(%s, %s, NULL, %s, %s, %s, %s)"


def walk(url: str, limit: int, queue: str | None = None, state: str | None = None) -> list[Any]:
    """Every page of the listing, each after the cursor of the one before."""
    seen: list[Any] = []
    cursor: tuple[Any, ...] = (None, None, None)
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            rows = conn.execute(PAGE, (queue, state, limit, *cursor)).fetchall()
            seen += [(row[0], row[1]) for row in rows]
            if len(rows) < limit:
                return seen
            cursor = (rows[-1][2], rows[-1][0], rows[-1][1])


def stored(url: str, backend: str, queue: str | None = None) -> list[Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = [(row[0], row[1]) for row in conn.execute(STORED[backend]).fetchall()]
    return [row for row in rows if queue is None or row[1] == queue]


def settle_some(url: str) -> None:
    """Claim 300 of the busy queue and complete every other one (the rest stay leased)."""
    with psycopg.connect(url, autocommit=True) as conn:
        claimed = conn.execute(
            "SELECT id, attempts FROM drainpipe.claim_jobs_v1('busy', 60, 300)"
        ).fetchall()
        done = [row for row in claimed if row[0] % 2 == 0]
        conn.execute(
            "SELECT count(*) FROM drainpipe.complete_jobs_v1('busy', %s, %s)",
            ([row[0] for row in done], [row[1] for row in done]),
        )


async def test_every_page_follows_the_stored_order(jobs_db_url: str, backend_name: str) -> None:
    async with (
        Jobs(jobs_db_url, QUEUES) as jobs,
        await psycopg.AsyncConnection.connect(jobs_db_url) as early,
    ):
        # a transaction that began first and commits last, between batches of others
        await early.execute("SELECT now()")
        for round_ in range(3):
            await jobs.enqueue_many("busy", [{"n": n} for n in range(700)])
            await jobs.enqueue("quiet", {"round": round_})
            await Jobs(early, QUEUES).enqueue("quiet", {"early": round_})
            await asyncio.sleep(0.002)
        await early.commit()
    settle_some(jobs_db_url)
    everything = stored(jobs_db_url, backend_name)
    assert len(everything) == 3 * 700 + 6
    for limit in (37, 500):
        assert walk(jobs_db_url, limit) == everything, limit
    assert walk(jobs_db_url, 2, queue="quiet") == stored(jobs_db_url, backend_name, "quiet")
    for state in ("queued", "leased", "succeeded"):
        # one page with room for all: the walk reads every id, so it is the order itself
        whole = walk(jobs_db_url, 100_000, state=state)
        assert whole and walk(jobs_db_url, 41, state=state) == whole, state


async def test_ids_and_stamps_agree_within_the_window(jobs_db_url: str) -> None:
    # four writers at once, batches and single jobs: for any two jobs, the one with the
    # smaller id is at most one window newer (what the walk relies on)
    with psycopg.connect(jobs_db_url, autocommit=True) as conn:
        for queue in QUEUES:  # the queues exist before the writers race (pgmq)
            conn.execute("SELECT drainpipe.enqueue_job_v1(%s, '{}')", (queue,))

    def writer(index: int) -> None:
        with psycopg.connect(jobs_db_url, autocommit=True) as conn:
            for n in range(40):
                if n % 4 == 0:
                    conn.execute(
                        "SELECT count(*) FROM drainpipe.enqueue_jobs_v1('busy', %s::jsonb)",
                        ("[" + ",".join(str(i) for i in range(50)) + "]",),
                    )
                else:
                    conn.execute(
                        "SELECT drainpipe.enqueue_job_v1('quiet', %s::jsonb)", (f"{index}",)
                    )

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with psycopg.connect(jobs_db_url, autocommit=True) as conn:
        on_table = conn.execute("SELECT to_regclass('pgmq.q_busy') IS NULL").fetchone() == (True,)
        # one id sequence on the table, one per queue on pgmq (live jobs only: none settled)
        streams = (
            ["SELECT id, enqueued_at FROM drainpipe.job_messages"]
            if on_table
            else [f"SELECT msg_id, enqueued_at FROM pgmq.q_{queue}" for queue in QUEUES]
        )
        for stream in streams:
            late = conn.execute(
                f"""SELECT count(*) FROM (
                        SELECT s.enqueued_at, min(s.enqueued_at) OVER (
                                   ORDER BY s.id ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING
                               ) AS later
                          FROM ({stream}) AS s (id, enqueued_at)) x
                     WHERE x.enqueued_at >= x.later + drainpipe.job_stamp_window()"""
            ).fetchone()
            count = conn.execute(f"SELECT count(*) FROM ({stream}) s").fetchone()
            assert count and count[0] >= 4 * 10, stream
            assert late == (0,), stream


async def test_pgmq_jobs_stored_before_the_migration_keep_their_order(
    fresh_database: Any,
) -> None:
    url = fresh_database("pgmq")
    with psycopg.connect(url, autocommit=True) as conn:
        for queue in QUEUES:
            conn.execute("SELECT drainpipe.ensure_job_queue_v1(%s)", (queue,))
        # the busy queue as an earlier listing left it: pgmq's now() default and full
        # indexes on (enqueued_at, msg_id)
        conn.execute("ALTER TABLE pgmq.q_busy ALTER COLUMN enqueued_at SET DEFAULT now()")
        for table in ("q_busy", "a_busy"):
            conn.execute(f"CREATE INDEX {table}_enqueued_idx ON pgmq.{table} (enqueued_at, msg_id)")
        conn.execute("SELECT pgmq.send('busy', '{\"payload\": 0}')")
    with (
        psycopg.connect(url) as early,
        psycopg.connect(url, autocommit=True) as other,
    ):
        # an early transaction's jobs: larger ids than the other's, older stamps (enough
        # of them that a page's walk would not read them all)
        early.execute("SELECT now()")
        other.execute("SELECT pg_sleep(0.02)")
        for n in range(600):
            other.execute("SELECT pgmq.send('busy', %s::jsonb)", (f'{{"payload": {n}}}',))
        for n in range(300):
            early.execute("SELECT pgmq.send('busy', %s::jsonb)", (f'{{"payload": {n}}}',))
        early.commit()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT drainpipe.pgmq_list_by_ids('busy')")  # the per-queue setup
        indexes = {
            row[0]: row[1]
            for row in conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE tablename IN ('q_busy', 'a_busy')"
            ).fetchall()
        }
        assert "q_busy_enqueued_idx" not in indexes and "a_busy_enqueued_idx" not in indexes
        assert "WHERE (msg_id <= 901)" in indexes["q_busy_old_enqueued"], indexes
        assert "WHERE (msg_id <= 901)" in indexes["a_busy_old_enqueued"], indexes
        assert conn.execute("SELECT last_id FROM drainpipe.pgmq_list_before").fetchall() == [(901,)]
        conn.execute("SELECT drainpipe.pgmq_list_by_ids('busy')")  # again: nothing moves
        assert conn.execute("SELECT last_id FROM drainpipe.pgmq_list_before").fetchall() == [(901,)]
        default = conn.execute(
            "SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef"
            " WHERE adrelid = 'pgmq.q_busy'::regclass AND adnum = 3"
        ).fetchone()
        assert default == ("clock_timestamp()",)
    async with Jobs(url, QUEUES) as jobs:
        await jobs.enqueue_many("busy", [{"n": n} for n in range(200)])
        await jobs.enqueue("quiet", {"n": 0})
    settle_some(url)
    with psycopg.connect(url, autocommit=True) as conn:
        # a job sent straight to pgmq after pgmq_list_by_ids: stamped by clock_timestamp()
        conn.execute("SELECT pgmq.send('busy', '{\"payload\": 1}')")
    everything = stored(url, "pgmq")
    for limit in (1, 7, 100):
        assert walk(url, limit) == everything, limit
    assert walk(url, 9, queue="busy") == stored(url, "pgmq", "busy")
