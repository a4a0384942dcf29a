"""The console's overview over a large history (issue 40; not part of bench.run).

    .venv/bin/python -m bench.console_overview [RECORDS] [QUEUES] [READS]

For each storage, a fresh database holding RECORDS (default 1,000,000) job records over
QUEUES (default 20) queues: 95% finished over the last 30 days (succeeded, 4% dead with a
failed attempt's code, 1% cancelled), 1% of them in the last hour, and 5% live (queued,
some leased). After ``VACUUM ANALYZE`` (what autovacuum leaves), the median of READS
(default 20) reads of ``GET /queues``'s statement (``job_queue_overview_v1`` over every
queue: counts per state, the oldest ready job's age, pause, the 60-minute series), and for
scale a search by a cause code and a plain list page.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
import uuid
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from drainpipe.sqlmodules import install

SERVER = os.environ.get("BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def database(backend: str) -> str:
    name = f"drainpipe_bench_console_{uuid.uuid4().hex[:8]}_{backend}"
    with psycopg.connect(SERVER, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    params = conninfo_to_dict(SERVER)
    params["dbname"] = name
    url = make_conninfo(**params)

    async def apply() -> None:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await install(conn, ["jobs"], backend=backend)  # type: ignore[arg-type]

    asyncio.run(apply())
    return url


def drop(url: str) -> None:
    name = conninfo_to_dict(url)["dbname"]
    with psycopg.connect(SERVER, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# One queue's history as rows of (n, enqueued_at, state): n numbers the records, the last
# 1% of them fall in the last hour, the rest over 30 days before it.
HISTORY = """
SELECT n,
       CASE WHEN n > %(finished)s * 99 / 100
            THEN now() - make_interval(secs => (%(finished)s - n) * 3500.0 / greatest(%(finished)s / 100, 1))
            ELSE now() - interval '1 hour' - make_interval(secs => (%(finished)s - n) * 2592000.0 / %(finished)s)
       END AS enqueued_at,
       CASE WHEN n %% 100 < 4 THEN 'dead' WHEN n %% 100 = 4 THEN 'cancelled' ELSE 'succeeded' END AS state
  FROM generate_series(1, %(finished)s) AS n
"""


def fill_pgmq(conn: psycopg.Connection[Any], queue: str, finished: int, live: int) -> None:
    conn.execute("SELECT drainpipe.ensure_job_queue_v1(%s)", (queue,))
    conn.execute(
        f"""INSERT INTO pgmq.a_{queue} (msg_id, read_ct, enqueued_at, vt, message, archived_at)
            SELECT h.n, 1, h.enqueued_at, h.enqueued_at + interval '2 seconds',
                   jsonb_build_object('payload', jsonb_build_object('n', h.n), 'max_attempts', 1)
                   || CASE h.state WHEN 'dead' THEN '{{"dead": true, "last_code": "MAX_ATTEMPTS"}}'::jsonb
                                   WHEN 'cancelled' THEN '{{"cancelled": true, "last_code": "CANCELLED"}}'::jsonb
                                   ELSE '{{}}'::jsonb END,
                   h.enqueued_at + interval '1 second'
              FROM ({HISTORY}) h""",
        {"finished": finished},
    )
    conn.execute(
        f"""INSERT INTO drainpipe.job_attempts (queue, job_id, number, started_at, ended_at, outcome, code)
            SELECT %(queue)s, a.msg_id, 1, a.enqueued_at, a.archived_at, 'failed', 'HANDLER_ERROR'
              FROM pgmq.a_{queue} a WHERE a.message ? 'dead'""",
        {"queue": queue},
    )
    conn.execute(
        "SELECT setval(pg_get_serial_sequence(%s, 'msg_id'), %s)", (f"pgmq.q_{queue}", finished + 1)
    )
    conn.execute(
        "SELECT count(*) FROM drainpipe.enqueue_jobs_v1(%s,"
        " (SELECT jsonb_agg(jsonb_build_object('n', n)) FROM generate_series(1, %s) n))",
        (queue, live),
    )
    conn.execute("SELECT count(*) FROM drainpipe.claim_jobs_v1(%s, 600, %s)", (queue, live // 10))


def fill_table(conn: psycopg.Connection[Any], queue: str, finished: int, live: int) -> None:
    conn.execute(
        f"""INSERT INTO drainpipe.job_messages
                (queue, payload, attempts, max_attempts, enqueued_at, visible_at, state,
                 started_at, finished_at, last_code)
            SELECT %(queue)s, jsonb_build_object('n', h.n), 1, 1, h.enqueued_at,
                   h.enqueued_at + interval '2 seconds', h.state, h.enqueued_at,
                   h.enqueued_at + interval '1 second',
                   CASE h.state WHEN 'dead' THEN 'MAX_ATTEMPTS' WHEN 'cancelled' THEN 'CANCELLED' END
              FROM ({HISTORY}) h""",
        {"finished": finished, "queue": queue},
    )
    conn.execute(
        """INSERT INTO drainpipe.job_attempts (queue, job_id, number, started_at, ended_at, outcome, code)
           SELECT m.queue, m.id, 1, m.started_at, m.finished_at, 'failed', 'HANDLER_ERROR'
             FROM drainpipe.job_messages m WHERE m.queue = %s AND m.state = 'dead'""",
        (queue,),
    )
    conn.execute(
        "SELECT count(*) FROM drainpipe.enqueue_jobs_v1(%s,"
        " (SELECT jsonb_agg(jsonb_build_object('n', n)) FROM generate_series(1, %s) n))",
        (queue, live),
    )
    conn.execute("SELECT count(*) FROM drainpipe.claim_jobs_v1(%s, 600, %s)", (queue, live // 10))


def median_ms(conn: psycopg.Connection[Any], statement: str, params: Any, reads: int) -> float:
    conn.execute(statement, params).fetchall()  # warm: plans and the buffer cache
    timings = []
    for _ in range(reads):
        started = time.perf_counter()
        conn.execute(statement, params).fetchall()
        timings.append((time.perf_counter() - started) * 1000)
    return statistics.median(timings)


def measure(backend: str, records: int, queue_count: int, reads: int) -> dict[str, float]:
    url = database(backend)
    queues = [f"q{n:02d}" for n in range(queue_count)]
    per_queue = records // queue_count
    live = per_queue // 20
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            started = time.perf_counter()
            for queue in queues:
                (fill_pgmq if backend == "pgmq" else fill_table)(
                    conn, queue, per_queue - live, live
                )
            conn.execute("VACUUM ANALYZE")
            # the totals: counted once from the records (filled around the triggers)
            conn.execute("SELECT drainpipe.recount_job_totals_v1(%s)", (queues,))
            filled = time.perf_counter() - started
            rows = conn.execute(
                "SELECT queue, counts FROM drainpipe.job_queue_overview_v1(%s)", (queues,)
            ).fetchall()
            total = sum(sum(counts.values()) for _, counts in rows)
            assert total == per_queue * queue_count, (total, rows[0])
            return {
                "fill_s": filled,
                "overview_ms": median_ms(
                    conn, "SELECT * FROM drainpipe.job_queue_overview_v1(%s)", (queues,), reads
                ),
                "search_ms": median_ms(
                    conn,
                    "SELECT * FROM drainpipe.search_jobs_v1(NULL, NULL, NULL, 'HANDLER_ERROR',"
                    " NULL, NULL, NULL, NULL, 101)",
                    None,
                    reads,
                ),
                "list_ms": median_ms(
                    conn, "SELECT * FROM drainpipe.list_jobs_v2(NULL, NULL, NULL, 101)", None, reads
                ),
            }
    finally:
        drop(url)


def main(argv: list[str]) -> int:
    records = int(argv[0]) if argv else 1_000_000
    queue_count = int(argv[1]) if len(argv) > 1 else 20
    reads = int(argv[2]) if len(argv) > 2 else 20
    print(f"# console overview: {records:,} records over {queue_count} queues, median of {reads}")
    print(f"{'storage':<8} {'overview':>10} {'search':>10} {'list':>10} {'fill':>8}")
    for backend in ("pgmq", "table"):
        r = measure(backend, records, queue_count, reads)
        print(
            f"{backend:<8} {r['overview_ms']:>8.1f}ms {r['search_ms']:>8.1f}ms"
            f" {r['list_ms']:>8.1f}ms {r['fill_s']:>7.0f}s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
