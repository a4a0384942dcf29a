"""What server-side prepares are worth on a direct connection: single enqueues on one
connection with ``prepare=True``, ``False`` and the default (``None``: prepares once the
connection is found direct), interleaved rounds, medians. Run against a database with the
jobs module installed (table backend) and ``synchronous_commit = off``, so the commit's
flush does not drown the difference:

    python -m bench.prepares postgresql://postgres@127.0.0.1:5432/bench_db
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from typing import Any

from drainpipe import Jobs
from drainpipe.db import Database

QUEUES: dict[str, Any] = {"q": dict[str, Any]}


async def enqueue_rate(url: str, prepare: bool | None, count: int = 2000) -> float:
    db = Database(url, max_size=1, prepare=prepare)
    jobs = Jobs(db, QUEUES)
    try:
        for n in range(200):  # warm: past psycopg's prepare threshold
            await jobs.enqueue("q", {"n": n})
        started = time.perf_counter()
        for n in range(count):
            await jobs.enqueue("q", {"n": n})
        return count / (time.perf_counter() - started)
    finally:
        await db.close()


async def main(url: str, rounds: int = 7) -> None:
    rates: dict[bool | None, list[float]] = {None: [], True: [], False: []}
    for _ in range(rounds):
        for prepare in rates:
            rates[prepare].append(await enqueue_rate(url, prepare))
    medians = {prepare: statistics.median(values) for prepare, values in rates.items()}
    for prepare, values in rates.items():
        print(
            f"prepare={prepare!s:5}  median {medians[prepare]:7.0f}/s  {[round(v) for v in values]}"
        )
    print(
        f"False/True {medians[False] / medians[True]:.3f}  None/True {medians[None] / medians[True]:.3f}"
    )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
