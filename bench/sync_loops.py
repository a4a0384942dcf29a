"""The sync twin next to hand-written synchronous psycopg loops.

    python -m bench.sync_loops            # 3 rounds of 2000 jobs (~1 minute)
    python -m bench.sync_loops --quick    # 2 rounds of 300 jobs

On each storage (pgmq and table, each on its own fresh database, dropped at the end):

* enqueue: ``sync.Jobs.enqueue`` one job per call against ``pgmq.send`` / an INSERT;
* drain: ``sync.Jobs.drain(batch=50)`` (claim, run a no-op handler, complete the batch in
  one fenced call, heartbeat thread started per batch) against a loop of ``pgmq.read`` +
  ``pgmq.archive(ids[])`` / a ``SKIP LOCKED`` claim + ``DELETE``.

Both sides use one autocommit connection from a pool of the same size, in one thread.
Rounds alternate the order of the two sides; the table shows the median jobs per second
and the median ratio drainpipe / raw, and, for reference, the async ``drainpipe.Jobs``
doing the same on the same database (its own pool; an event loop). The set-up
(databases, SQL) uses asyncio; the measured sync code does not.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, ConnectionPool

import drainpipe
from bench.run import LEASE, QUEUE, RAW_QUEUE, create_databases, drop_databases
from drainpipe import sync

BATCH = 50


def raw_enqueue(pool: ConnectionPool[Any], storage: str, n: int) -> None:
    with pool.connection() as conn:
        for i in range(n):
            if storage == "pgmq":
                conn.execute("SELECT pgmq.send(%s, %s)", (RAW_QUEUE, Jsonb({"n": i})))
            else:
                conn.execute(
                    "INSERT INTO bench_raw (payload) VALUES (%s) RETURNING id", (Jsonb({"n": i}),)
                )


def raw_drain(pool: ConnectionPool[Any], storage: str) -> int:
    done = 0
    with pool.connection() as conn:
        while True:
            if storage == "pgmq":
                rows = conn.execute(
                    "SELECT msg_id, message FROM pgmq.read(%s, %s, %s)", (RAW_QUEUE, LEASE, BATCH)
                ).fetchall()
            else:
                rows = conn.execute(
                    """WITH c AS (
                           SELECT id FROM bench_raw WHERE visible_at <= now()
                            ORDER BY visible_at, id LIMIT %s FOR UPDATE SKIP LOCKED)
                       UPDATE bench_raw b
                          SET visible_at = now() + make_interval(secs => %s),
                              attempts = b.attempts + 1
                         FROM c WHERE b.id = c.id
                       RETURNING b.id, b.payload""",
                    (BATCH, LEASE),
                ).fetchall()
            if not rows:
                return done
            ids = [row[0] for row in rows]
            if storage == "pgmq":
                conn.execute("SELECT pgmq.archive(%s, %s::bigint[])", (RAW_QUEUE, ids))
            else:
                conn.execute("DELETE FROM bench_raw WHERE id = ANY(%s)", (ids,))
            done += len(rows)


def timed(fn: Callable[[], Any], jobs: int) -> float:
    start = time.perf_counter()
    fn()
    return jobs / (time.perf_counter() - start)


async def measure_async(url: str, n: int) -> tuple[float, float]:
    """The async twin's enqueue and drain rates on the same database."""
    pool = AsyncConnectionPool(url, min_size=1, max_size=2, kwargs={"autocommit": True}, open=False)
    await pool.open()
    jobs = drainpipe.Jobs(pool, {QUEUE: dict})
    try:
        start = time.perf_counter()
        for i in range(n):
            await jobs.enqueue(QUEUE, {"n": i})
        enqueue = n / (time.perf_counter() - start)

        async def noop(payload: Any, job: Any) -> None:
            return None

        start = time.perf_counter()
        await jobs.drain(QUEUE, noop, batch=BATCH)
        return enqueue, n / (time.perf_counter() - start)
    finally:
        await pool.close()


def measure(url: str, storage: str, n: int, rounds: int) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {
        key: []
        for key in (
            "dp-enqueue",
            "raw-enqueue",
            "dp-drain",
            "raw-drain",
            "async-enqueue",
            "async-drain",
        )
    }
    pool: ConnectionPool[Any] = ConnectionPool(
        url, min_size=1, max_size=2, kwargs={"autocommit": True}, open=True
    )
    jobs = sync.Jobs(pool, {QUEUE: dict})
    try:
        for round_number in range(rounds):
            sides = [("dp", True), ("raw", False)]
            if round_number % 2:
                sides.reverse()
            for name, ours in sides:
                if ours:
                    rate = timed(lambda: [jobs.enqueue(QUEUE, {"n": i}) for i in range(n)], n)
                else:
                    rate = timed(lambda: raw_enqueue(pool, storage, n), n)
                results[f"{name}-enqueue"].append(rate)
            for name, ours in sides:
                if ours:
                    rate = timed(lambda: jobs.drain(QUEUE, lambda p, j: None, batch=BATCH), n)
                else:
                    rate = timed(lambda: raw_drain(pool, storage), n)
                results[f"{name}-drain"].append(rate)
            enqueue, drain = asyncio.run(measure_async(url, n))
            results["async-enqueue"].append(enqueue)
            results["async-drain"].append(drain)
    finally:
        pool.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n, rounds = (300, 2) if args.quick else (2000, 3)
    urls = asyncio.run(create_databases(f"sync{int(time.time())}"))
    try:
        print(f"{n} jobs x {rounds} rounds, one connection, batch {BATCH} for drains")
        print(
            "| storage | phase | drainpipe.sync jobs/s | raw psycopg jobs/s | ratio"
            " | async drainpipe.Jobs jobs/s |"
        )
        print("| --- | --- | ---: | ---: | ---: | ---: |")
        for storage, url in urls.items():
            results = measure(url, storage, n, rounds)
            for phase in ("enqueue", "drain"):
                ours, raw = results[f"dp-{phase}"], results[f"raw-{phase}"]
                ratio = statistics.median(a / b for a, b in zip(ours, raw, strict=True))
                print(
                    f"| {storage} | {phase} | {statistics.median(ours):,.0f} |"
                    f" {statistics.median(raw):,.0f} | {ratio:.2f} |"
                    f" {statistics.median(results[f'async-{phase}']):,.0f} |"
                )
    finally:
        asyncio.run(drop_databases(urls))


if __name__ == "__main__":
    main()
