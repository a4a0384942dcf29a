"""What the finished-job totals cost a drain: ``drainpipe.add_job_totals`` timed by the server.

    python -m bench.job_totals [--jobs 6000] [--rounds 5] [--backends pgmq,table]

Each round drains ``--jobs`` no-op jobs with 4 lanes (batches of 10, as ``bench.flow``'s
``processing``) on a fresh database whose ``track_functions`` is ``all`` (set on that
database only), and prints the drain's jobs/s and the time the lanes spent in
``add_job_totals`` (``pg_stat_user_functions``, every lane summed; it includes waiting on
another lane's row lock), and how many shard rows the round's lanes wrote (fewer than the
lanes: two lanes shared one). On pgmq the totals are kept once the queue's overview is set up
(``ensure_queue_overview_v1``), which this does before each drain. Nothing is recorded.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Sequence
from typing import Any

import psycopg

from bench.flow import LANES, drop, fresh, noop
from drainpipe import Jobs

STAT = (
    "SELECT coalesce(sum(total_time), 0), coalesce(sum(calls), 0) FROM pg_stat_user_functions"
    " WHERE schemaname = 'drainpipe' AND funcname = 'add_job_totals'"
)


async def spent(url: str) -> tuple[float, int]:
    """add_job_totals' total ms and calls so far, as flushed by the backends that exited."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        row = await (await conn.execute(STAT)).fetchone()
        assert row is not None
        return float(row[0]), int(row[1])


async def shards(url: str) -> dict[int, int]:
    """The finished total each shard row of queue ``q`` holds (every state summed)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT shard, sum(n) FROM drainpipe.job_totals WHERE queue = 'q' GROUP BY shard"
        )
        return {int(shard): int(n) for shard, n in await cur.fetchall()}


async def run(backend: str, jobs_count: int, rounds: int) -> None:
    name, url = await fresh(backend)
    try:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await conn.execute(f"ALTER DATABASE \"{name}\" SET track_functions = 'all'")
        rates, times, written = [], [], []
        for _ in range(rounds):
            before, _calls = await spent(url)
            rows_before = await shards(url)
            async with Jobs(url, {"q": dict[str, Any]}) as j:
                for start in range(0, jobs_count, 100):
                    await j.enqueue_many("q", [{"n": n} for n in range(start, start + 100)])
                async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                    await conn.execute("SELECT drainpipe.ensure_queue_overview_v1(ARRAY['q'])")
                started = time.perf_counter()
                report = await j.drain("q", noop, concurrency=LANES, batch=10, lease=30)
                rates.append(report.succeeded / (time.perf_counter() - started))
                assert report.succeeded == jobs_count
            await asyncio.sleep(1.5)  # the pool's backends flush their statistics as they exit
            after, _calls = await spent(url)
            times.append(after - before)
            rows_after = await shards(url)
            written.append(sum(rows_after[k] != rows_before.get(k, 0) for k in rows_after))
        print(
            f"{backend:6} {LANES} lanes, {jobs_count:,} jobs: jobs/s "
            + " ".join(f"{r:,.0f}" for r in rates)
            + f" (median {statistics.median(rates):,.0f});"
            + " add_job_totals ms "
            + " ".join(f"{t:.0f}" for t in times)
            + f" (median {statistics.median(times):.0f});"
            + " shard rows written "
            + " ".join(str(w) for w in written)
        )
    finally:
        await drop(name)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=6_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backends", default="pgmq,table")
    args = parser.parse_args(argv)
    for backend in args.backends.split(","):
        asyncio.run(run(backend, args.jobs, args.rounds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
