"""A claim starts at its connection's bound for the queue, not at the index's start
(issue 37).

While a session holds an old snapshot, vacuum can remove no entry of a job claimed since,
and a claim reading its index from the start visits all of them. The claim now starts at
the visibility time of the oldest job its connection's previous claim picked. These tests
hold what that must not cost: a job made due below the bound (by hand, or by an enqueue
that commits after later jobs were claimed) is still claimed, once, by the next claim that
comes up short or by the connection's pass from the start; and behind a held snapshot a
late claim touches about what an early one did.

Each test runs twice: on a plain queue, and on a prioritised one, whose claim
keeps a bound per priority level (its jobs are all at level 0 here, so the level-0 bound
plays the queue's part, over the priority index).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

QUEUE = "boundq"
# the name of the claim's bound (the queue's, or its level 0's on a prioritised queue)
SHAPE = {"bound": QUEUE}


@pytest.fixture(params=["plain", "prioritised"])
def url(jobs_db_url: str, request: pytest.FixtureRequest) -> str:
    SHAPE["bound"] = QUEUE
    if request.param == "prioritised":
        with psycopg.connect(jobs_db_url, autocommit=True) as conn:
            conn.execute("SELECT drainpipe.note_job_priority(%s, 1)", (QUEUE,))
        SHAPE["bound"] = f"{QUEUE}__p0"
    return jobs_db_url


@pytest.fixture
def conn(url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(url, autocommit=True) as connection:
        yield connection


def enqueue(conn: psycopg.Connection[Any], count: int) -> list[int]:
    payloads = json.dumps([{"n": n} for n in range(count)])
    rows = conn.execute(
        "SELECT * FROM drainpipe.enqueue_jobs_v1(%s, %s::jsonb)", (QUEUE, payloads)
    ).fetchall()
    return [row[0] for row in rows]


def claim(conn: psycopg.Connection[Any], batch: int) -> list[int]:
    rows = conn.execute(
        "SELECT id FROM drainpipe.claim_jobs_v1(%s, 300, %s)", (QUEUE, batch)
    ).fetchall()
    return [row[0] for row in rows]


def drain(conn: psycopg.Connection[Any], batch: int) -> list[int]:
    claimed: list[int] = []
    while ids := claim(conn, batch):
        claimed += ids
    return claimed


def due_an_hour_ago(conn: psycopg.Connection[Any], backend: str, job: int) -> None:
    """Set a job's visibility time into the past by hand: below any bound."""
    if backend == "table":
        conn.execute(
            "UPDATE drainpipe.job_messages SET visible_at = now() - interval '1 hour'"
            " WHERE id = %s",
            (job,),
        )
    else:
        conn.execute(
            f"UPDATE pgmq.q_{QUEUE} SET vt = now() - interval '1 hour' WHERE msg_id = %s", (job,)
        )


def bound(conn: psycopg.Connection[Any]) -> str | None:
    row = conn.execute(
        f"SELECT current_setting('drainpipe.claim_from.{SHAPE['bound']}', true)"
    ).fetchone()
    return row[0] if row else None


def test_a_claim_keeps_a_bound_and_a_job_due_below_it_is_claimed_once(
    conn: psycopg.Connection[Any], backend_name: str
) -> None:
    enqueue(conn, 300)
    first = claim(conn, 100)
    assert len(first) == 100
    assert bound(conn), "the claim kept no bound"
    (late,) = enqueue(conn, 1)
    due_an_hour_ago(conn, backend_name, late)
    # 199 jobs above the bound (+ the late one below it): full batches come from above it
    second = claim(conn, 100)
    assert len(second) == 100 and late not in second
    # 99 left above the bound: the claim comes up short there and takes the rest from below
    rest = drain(conn, 100)
    assert late in rest
    everything = first + second + rest
    assert len(everything) == len(set(everything)) == 301


def test_the_pass_from_the_start_takes_what_the_bound_hides_behind_a_full_backlog(
    conn: psycopg.Connection[Any], backend_name: str
) -> None:
    enqueue(conn, 1000)
    taken = claim(conn, 100)
    (late,) = enqueue(conn, 1)
    due_an_hour_ago(conn, backend_name, late)
    taken += claim(conn, 100)
    assert late not in taken  # the bound holds while batches fill above it
    # the connection's last pass from the start was longer ago than claim_bound_pass()
    conn.execute(
        f"SELECT set_config('drainpipe.claim_passed.{SHAPE['bound']}',"
        " ((extract(epoch FROM clock_timestamp() - interval '1 minute') * 1000000)::bigint)::text,"
        " false)"
    )
    passed = claim(conn, 100)
    assert late in passed  # oldest first, from the index's start
    taken += passed + drain(conn, 100)
    assert len(taken) == len(set(taken)) == 1001


def test_an_enqueue_that_commits_after_later_jobs_were_claimed_is_not_lost(
    url: str, conn: psycopg.Connection[Any]
) -> None:
    # three connections: a producer whose transaction stays open, one that commits jobs
    # stamped after it, and the claiming one
    assert claim(conn, 1) == []  # makes the queue (pgmq): no enqueue below waits on that
    with psycopg.connect(url) as slow:
        slow.execute("SELECT drainpipe.enqueue_job_v1(%s, %s::jsonb)", (QUEUE, '{"slow": 1}'))
        with psycopg.connect(url, autocommit=True) as quick:
            enqueue(quick, 300)
        taken = claim(conn, 100)  # the bound is now past the slow job's visibility time
        slow.commit()
    taken += drain(conn, 100)
    assert len(taken) == len(set(taken)) == 301


def test_a_claim_given_its_clock_keeps_no_bound(conn: psycopg.Connection[Any]) -> None:
    enqueue(conn, 10)
    rows = conn.execute(
        "SELECT id FROM drainpipe.claim_jobs_v1(%s, 300, 5, clock_timestamp())", (QUEUE,)
    ).fetchall()
    assert len(rows) == 5
    assert not bound(conn)


def entries_read(conn: psycopg.Connection[Any], backend: str) -> int:
    """Entries of the claim's index one claim of 100 read, live or not (the issue's measure:
    192k a claim after a minute behind a held snapshot), from its transaction's counters."""
    prioritised = SHAPE["bound"] != QUEUE
    if backend == "table":
        index = "job_messages_priority_idx" if prioritised else "job_messages_live_idx"
        index = f"drainpipe.{index}"
    else:
        index = f"pgmq.q_{QUEUE}_{'dp_priority' if prioritised else 'vt_idx'}"
    # the backend's pending counters, which Postgres 15+ flushes at most once a second, so
    # they may still hold earlier transactions' reads (a fast loop before this claim): the
    # claim's own reads are the difference across it
    returned = "SELECT pg_stat_get_xact_tuples_returned(%s::regclass)"
    with conn.transaction():
        before = conn.execute(returned, (index,)).fetchone()
        assert len(claim(conn, 100)) == 100
        after = conn.execute(returned, (index,)).fetchone()
    assert before is not None and after is not None
    return int(after[0]) - int(before[0])


@pytest.mark.slow
def test_behind_a_held_snapshot_a_late_claim_skips_what_the_snapshot_keeps(
    url: str, conn: psycopg.Connection[Any], backend_name: str
) -> None:
    with (
        psycopg.connect(url, autocommit=True) as worker,
        psycopg.connect(url, autocommit=True) as holder,
    ):
        for _ in range(30):
            enqueue(worker, 100)
        worker.execute("VACUUM ANALYZE")
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT txid_current()")
        claim(conn, 100)  # the bound
        early = entries_read(conn, backend_name)
        for _ in range(150):  # 15,000 jobs through the queue: claimed, then completed
            enqueue(worker, 101)
            ids = claim(worker, 100)
            worker.execute(
                "SELECT drainpipe.complete_jobs_v1(%s, %s::bigint[], %s::integer[])",
                (QUEUE, ids, [1] * len(ids)),
            )
            # this connection's bound keeps up: its claim picks the batch's last job (an
            # empty claim keeps no bound, and one pass from the start in a loop slower than
            # 10 s would leave the bound where that pass found a job)
            assert claim(conn, 1)
        worker.execute("VACUUM")  # it can remove nothing the held snapshot may still see
        # the loop above may take longer than the 10 s after which a connection passes from
        # the index's start: the late claim is measured with that pass just done
        conn.execute(
            f"SELECT set_config('drainpipe.claim_passed.{SHAPE['bound']}',"
            " (extract(epoch FROM clock_timestamp()) * 1000000)::bigint::text, false)"
        )
        late = entries_read(conn, backend_name)
        # the next claim passes from the index's start: a claim without a bound
        conn.execute(f"SELECT set_config('drainpipe.claim_passed.{SHAPE['bound']}', '0', false)")
        from_start = entries_read(conn, backend_name)
        holder.execute("ROLLBACK")
    assert from_start > 10_000, (early, late, from_start)  # the held snapshot did keep them
    # the bound skips them (pgmq's batch enqueue gives a batch one vt, and the bound is a vt:
    # a claim may also read the claimed entries of its bound's batch, here up to 100)
    assert late * 2 < from_start, (early, late, from_start)  # seen: 4.6x-14x


def test_claims_by_many_connections_take_each_job_once(
    url: str, conn: psycopg.Connection[Any]
) -> None:
    # interleaved claims of five connections, each with its own bound, and enqueues between
    connections = [psycopg.connect(url, autocommit=True) for _ in range(5)]
    try:
        enqueue(conn, 500)
        taken: list[int] = []
        for round_ in range(20):
            for each in connections:
                taken += claim(each, 37)
            if round_ % 3 == 0:
                enqueue(conn, 200)
        for each in connections:
            taken += drain(each, 50)
    finally:
        for each in connections:
            each.close()
    assert len(taken) == len(set(taken)) == 500 + 7 * 200


def test_a_claim_racing_enqueues_always_returns(url: str, conn: psycopg.Connection[Any]) -> None:
    """An enqueue that commits while a bounded claim runs must not keep that claim looping:
    a job that became visible above the bound during the claim's pass below it is taken by
    the claim or left to the next one (pgmq's claim loop once spun on such a job for good,
    seen as a 28-minute claim under a steady enqueue rate)."""
    import threading
    import time

    enqueue(conn, 1)
    assert claim(conn, 1)  # this connection now has a bound for the queue
    stop = threading.Event()

    def enqueue_steadily() -> None:
        with psycopg.connect(url, autocommit=True) as writer:
            while not stop.is_set():
                enqueue(writer, 1)

    writers = [threading.Thread(target=enqueue_steadily) for _ in range(3)]
    for writer in writers:
        writer.start()
    try:
        conn.execute("SET statement_timeout = '5s'")  # a claim that loops fails here
        until = time.monotonic() + 3
        claims = 0
        while time.monotonic() < until:
            claim(conn, 5)
            claims += 1
    finally:
        stop.set()
        for writer in writers:
            writer.join()
    assert claims > 10
