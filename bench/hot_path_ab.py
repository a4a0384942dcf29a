"""The SQL hot path of two checkouts, side by side (issue 40: what pause and the console's
totals cost a claim and a completion).

    .venv/bin/python -m bench.hot_path_ab BEFORE_CHECKOUT [JOBS] [ROUNDS]

BEFORE_CHECKOUT is a checkout of the earlier commit (``git worktree add`` or ``git archive
| tar -x``). For each storage, one database is installed from that checkout's SQL and one
from this one's; each round fills both with JOBS jobs and drains them with drainpipe's own
turn (``complete_and_claim_jobs_v1``, batch 100) from 5 threads on their own connections,
the two databases one after the other, the order alternating. Rounds interleave, so both
sides see the same machine; the ratio is after / before per round (jobs/s), and the median.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

SERVER = os.environ.get("BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
QUEUE = "hot"
CONSUMERS = 5
BATCH = 100
INSTALL = (
    "import asyncio, sys, psycopg\n"
    "from drainpipe.sqlmodules import install\n"
    "async def main():\n"
    "    async with await psycopg.AsyncConnection.connect(sys.argv[1], autocommit=True) as c:\n"
    "        await install(c, ['jobs'], backend=sys.argv[2])\n"
    "asyncio.run(main())\n"
)


def database(backend: str, checkout: str) -> str:
    name = f"drainpipe_bench_ab_{uuid.uuid4().hex[:8]}_{backend}"
    with psycopg.connect(SERVER, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    params = conninfo_to_dict(SERVER)
    params["dbname"] = name
    url = make_conninfo(**params)
    env = dict(os.environ, PYTHONPATH=os.path.join(checkout, "lib"))
    # our own interpreter running our own install snippet on a database we just made
    subprocess.run([sys.executable, "-c", INSTALL, url, backend], env=env, check=True)  # noqa: S603
    return url


def drop(url: str) -> None:
    name = conninfo_to_dict(url)["dbname"]
    with psycopg.connect(SERVER, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def fill(url: str, jobs: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        payloads = json.dumps([{"n": n, "body": "x" * 40} for n in range(jobs)])
        conn.execute(
            "SELECT count(*) FROM drainpipe.enqueue_jobs_v1(%s, %s::jsonb)", (QUEUE, payloads)
        )
        conn.execute("VACUUM ANALYZE")


TURN = "SELECT id, attempts FROM drainpipe.complete_and_claim_jobs_v1(%s, %s, %s, 30, %s)"


def drain(url: str) -> float:
    """Jobs per second of CONSUMERS threads turning until the queue is empty."""
    done = [0] * CONSUMERS
    conns = [psycopg.connect(url, autocommit=True) for _ in range(CONSUMERS)]

    def one(index: int) -> None:
        conn = conns[index]
        ids: list[int] = []
        attempts: list[int] = []
        while True:
            rows = conn.execute(TURN, (QUEUE, ids, attempts, BATCH)).fetchall()
            done[index] += len(ids)
            if not rows:
                return
            ids = [row[0] for row in rows]
            attempts = [row[1] for row in rows]

    started = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(CONSUMERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    for conn in conns:
        conn.close()
    return sum(done) / elapsed


def main(argv: list[str]) -> int:
    before = argv[0]
    jobs = int(argv[1]) if len(argv) > 1 else 20_000
    rounds = int(argv[2]) if len(argv) > 2 else 7
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    print(f"# hot path A/B: {jobs:,} jobs, {CONSUMERS} threads, batch {BATCH}, {rounds} rounds")
    for backend in ("pgmq", "table"):
        urls = {"before": database(backend, before), "after": database(backend, here)}
        try:
            ratios: list[float] = []
            rates: dict[str, list[float]] = {"before": [], "after": []}
            for index in range(rounds + 1):  # the first round warms up
                order = ["before", "after"] if index % 2 else ["after", "before"]
                got: dict[str, float] = {}
                for side in order:
                    fill(urls[side], jobs)
                    got[side] = drain(urls[side])
                if index:
                    ratios.append(got["after"] / got["before"])
                    for side in got:
                        rates[side].append(got[side])
            print(
                f"{backend:<6} before {statistics.median(rates['before']):>8,.0f}/s"
                f"  after {statistics.median(rates['after']):>8,.0f}/s"
                f"  ratio median {statistics.median(ratios):.3f}"
                f"  rounds {' '.join(f'{r:.2f}' for r in ratios)}"
            )
        finally:
            for url in urls.values():
                drop(url)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
