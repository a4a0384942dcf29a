"""Single enqueue against the raw loop of the same kind, and the wake-up latency of ``work``.

    python -m bench.enqueue_latency            # 3 rounds of 2000 enqueues, 6 s of latency
    python -m bench.enqueue_latency --quick    # smoke run
    python -m bench.enqueue_latency --record   # append the figures to bench/results/

On each storage (a fresh database each, dropped at the end):

* single enqueue, async: ``Jobs.enqueue`` on an ``AsyncConnectionPool`` of one connection
  against a loop of ``pgmq.send`` / ``INSERT`` on a bare psycopg ``AsyncConnection`` (the
  ceiling of any async enqueue: no pool, no validation);
* single enqueue, sync: ``drainpipe.sync.Jobs.enqueue`` on a ``ConnectionPool`` of one
  against the same loop on a bare psycopg ``Connection``; and the raw async loop over the
  raw sync one (what asyncio costs psycopg alone);
* wake-up latency: ``Jobs.work`` (2 lanes, batch 1) runs while jobs are enqueued at
  ``--rate`` a second; each delay is from the enqueue call's start to the handler's start.
  ``work`` has no LISTEN wake-up: an idle lane polls, so the delay follows
  ``poll_interval``; it is measured at ``work``'s defaults (1 s, doubling up to 30 s while
  idle) and at a fixed 0.05 s.

Rounds alternate the order of the sides; ratios are medians of the per-round ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, ConnectionPool

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))

import drainpipe  # noqa: E402
from bench.results import Row, append_run, describe_machine  # noqa: E402
from bench.run import QUEUE, RAW_QUEUE, create_databases, drop_databases, payload  # noqa: E402
from drainpipe import sync  # noqa: E402

DEFAULT_POLL = 1.0
POLLS = (DEFAULT_POLL, 0.05)


def raw_statement(storage: str) -> str:
    if storage == "pgmq":
        return f"SELECT pgmq.send('{RAW_QUEUE}', %s)"
    return "INSERT INTO bench_raw (payload) VALUES (%s) RETURNING id"


async def raw_async(url: str, storage: str, n: int) -> float:
    sql = raw_statement(storage)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        start = time.perf_counter()
        for i in range(n):
            await conn.execute(sql, (Jsonb(payload(i)),))
        return n / (time.perf_counter() - start)


def raw_sync(url: str, storage: str, n: int) -> float:
    sql = raw_statement(storage)
    with psycopg.connect(url, autocommit=True) as conn:
        start = time.perf_counter()
        for i in range(n):
            conn.execute(sql, (Jsonb(payload(i)),))
        return n / (time.perf_counter() - start)


async def dp_async(url: str, n: int) -> float:
    pool = AsyncConnectionPool(url, min_size=1, max_size=1, kwargs={"autocommit": True}, open=False)
    await pool.open()
    try:
        jobs = drainpipe.Jobs(pool, {QUEUE: dict})
        await jobs.enqueue(QUEUE, payload(0))  # builds the adapter outside the clock
        start = time.perf_counter()
        for i in range(n):
            await jobs.enqueue(QUEUE, payload(i))
        return n / (time.perf_counter() - start)
    finally:
        await pool.close()


def dp_sync(url: str, n: int) -> float:
    pool: ConnectionPool[Any] = ConnectionPool(
        url, min_size=1, max_size=1, kwargs={"autocommit": True}, open=True
    )
    try:
        jobs = sync.Jobs(pool, {QUEUE: dict})
        jobs.enqueue(QUEUE, payload(0))
        start = time.perf_counter()
        for i in range(n):
            jobs.enqueue(QUEUE, payload(i))
        return n / (time.perf_counter() - start)
    finally:
        pool.close()


async def enqueue_rounds(url: str, storage: str, n: int, rounds: int) -> dict[str, list[float]]:
    sides: dict[str, Callable[[], Awaitable[float]]] = {
        "dp-async": lambda: dp_async(url, n),
        "raw-async": lambda: raw_async(url, storage, n),
        "dp-sync": lambda: asyncio.to_thread(dp_sync, url, n),
        "raw-sync": lambda: asyncio.to_thread(raw_sync, url, storage, n),
    }
    rates: dict[str, list[float]] = {name: [] for name in sides}
    order = list(sides)
    for round_number in range(rounds):
        for name in order if round_number % 2 == 0 else order[::-1]:
            rates[name].append(await sides[name]())
    return rates


async def wake_latency(
    url: str, storage: str, rate: float, seconds: float, poll: float
) -> list[float]:
    """Delays in ms from each enqueue call's start to its handler's start under ``work``,
    on a queue of its own (the enqueue rounds left theirs full)."""
    queue = f"wake_{str(poll).replace('.', '_')}"
    pool = AsyncConnectionPool(url, min_size=3, max_size=3, kwargs={"autocommit": True}, open=False)
    await pool.open()
    if storage == "pgmq":
        async with pool.connection() as conn:
            await conn.execute("SELECT drainpipe.ensure_job_queue_v1(%s)", (queue,))
    jobs = drainpipe.Jobs(pool, {queue: dict})
    total = int(rate * seconds)
    sent: dict[int, float] = {}
    delays: list[float] = []
    seen = asyncio.Event()

    async def handler(value: Any, job: Any) -> None:
        delays.append((time.perf_counter() - sent[int(value["user_id"])]) * 1000)
        if len(delays) >= total:
            seen.set()

    stop = asyncio.Event()
    worker = asyncio.ensure_future(
        jobs.work(
            queue,
            handler,
            concurrency=2,
            poll_interval=poll,
            # work's defaults (1 s, doubling to 30 s), or a fixed short poll
            max_poll_interval=30.0 if poll == DEFAULT_POLL else poll,
            stop=stop,
        )
    )
    try:
        await asyncio.sleep(poll * 2)  # the lanes idle, as a server between jobs
        loop = asyncio.get_running_loop()
        first = loop.time()
        for n in range(total):
            await asyncio.sleep(max(0.0, first + n / rate - loop.time()))
            sent[n] = time.perf_counter()
            await jobs.enqueue(queue, payload(n))
        await asyncio.wait_for(seen.wait(), 60)
    finally:
        stop.set()
        await worker
        await pool.close()
    return delays


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def median_ratio(ours: list[float], theirs: list[float]) -> float:
    return statistics.median(a / b for a, b in zip(ours, theirs, strict=True))


async def main_async(n: int, rounds: int, rate: float, seconds: float, record: bool) -> None:
    urls = await create_databases(f"enq{int(time.time())}")
    out: list[Row] = []
    try:
        print(f"{n} single enqueues x {rounds} rounds; latency {rate:g} jobs/s for {seconds:g} s")
        print(f"{describe_machine()}\n")
        print("| storage | async API / raw async | sync twin / raw sync | raw async / raw sync |")
        print("| --- | ---: | ---: | ---: |")
        for storage, url in urls.items():
            r = await enqueue_rounds(url, storage, n, rounds)
            a = median_ratio(r["dp-async"], r["raw-async"])
            s = median_ratio(r["dp-sync"], r["raw-sync"])
            ceiling = median_ratio(r["raw-async"], r["raw-sync"])
            print(
                f"| {storage} | {a:.2f} ({statistics.median(r['dp-async']):,.0f}/s)"
                f" | {s:.2f} ({statistics.median(r['dp-sync']):,.0f}/s)"
                f" | {ceiling:.2f} ({statistics.median(r['raw-sync']):,.0f}/s sync) |"
            )
            lows = [x / y for x, y in zip(r["dp-async"], r["raw-async"], strict=True)]
            out.append(
                Row(
                    "single enqueue",
                    f"dp-{storage}",
                    "raw AsyncConnection loop",
                    ratio=round(a, 2),
                    ratio_range=(round(min(lows), 2), round(max(lows), 2)),
                    note=f"the sync twin / a raw sync loop: {s:.2f};"
                    f" raw async / raw sync {ceiling:.2f}",
                )
            )
        print("\n| storage | work poll_interval | enqueue → handler start p50 | p99 |")
        print("| --- | ---: | ---: | ---: |")
        for storage, url in urls.items():
            found = {}
            for poll in POLLS:
                delays = await wake_latency(url, storage, rate, seconds, poll)
                found[poll] = pct(delays, 0.5), pct(delays, 0.99)
                print(
                    f"| {storage} | {poll:g} s | {found[poll][0]:.1f} ms | {found[poll][1]:.1f} ms |"
                )
            (p50, p99), (fast50, fast99) = found[DEFAULT_POLL], found[POLLS[1]]
            out.append(
                Row(
                    f"wake-up p50 under `work`, {rate:g} jobs/s",
                    f"dp-{storage}",
                    value=round(p50, 1),
                    unit="ms",
                    note=f"p99 {p99:.1f} ms; `work`'s default polling (no LISTEN);"
                    f" a fixed 50 ms poll: p50 {fast50:.1f} ms, p99 {fast99:.1f} ms",
                )
            )
    finally:
        await drop_databases(urls)
    if record:
        print(f"\nrecorded: {append_run('bench.enqueue_latency', out)}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--jobs", type=int, default=2000, help="enqueues a side a round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=float, default=50.0, help="latency jobs a second")
    parser.add_argument("--seconds", type=float, default=6.0, help="latency run length")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--record", action="store_true", help="append to bench/results/")
    args = parser.parse_args(argv)
    if args.quick:
        args.jobs, args.rounds, args.seconds = 200, 2, 1.0
    asyncio.run(
        main_async(args.jobs, args.rounds, args.rate, args.seconds, args.record and not args.quick)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
