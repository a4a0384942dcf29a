"""Claim latency under a leased head (issue 19, item 5; not part of bench.run).

    .venv/bin/python -m bench.leased_head [HEAD] [CLAIMS]

For each backend, a fresh database: READY (1,000) ready jobs, and the median latency of
CLAIMS claims of one job (each completed again, so the ready set stays the same size); then
HEAD (default 53,000) jobs leased for 10 minutes ahead of the ready ones, and the same
measurement. The ratio is what a leased head costs a claim (1.0 is flat). Raw
``pgmq.read`` is measured too on the pgmq database, for scale: it walks its own order.
"""

from __future__ import annotations

import asyncio
import json
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
QUEUE = "headq"
READY = 1_000


def database(backend: str) -> str:
    name = f"drainpipe_bench_head_{uuid.uuid4().hex[:8]}_{backend}"
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


def enqueue(conn: psycopg.Connection[Any], count: int) -> None:
    payloads = json.dumps([{"n": n} for n in range(count)])
    conn.execute("SELECT count(*) FROM drainpipe.enqueue_jobs_v1(%s, %s::jsonb)", (QUEUE, payloads))


def lease_head(conn: psycopg.Connection[Any], count: int) -> None:
    enqueue(conn, count)
    left = count
    while left > 0:
        row = conn.execute(
            "SELECT count(*) FROM drainpipe.claim_jobs_v1(%s, 600, %s)", (QUEUE, min(left, 1000))
        ).fetchone()
        assert row is not None and row[0]
        left -= int(row[0])


def claim_latency(conn: psycopg.Connection[Any], claims: int) -> float:
    """Median ms of one claim (batch 1); each claimed job is completed outside the timing."""
    timings = []
    for _ in range(claims):
        started = time.perf_counter()
        rows = conn.execute(
            "SELECT id, attempts FROM drainpipe.claim_jobs_v1(%s, 30, 1)", (QUEUE,)
        ).fetchall()
        timings.append((time.perf_counter() - started) * 1000)
        assert rows, "the ready jobs ran out"
        conn.execute(
            "SELECT drainpipe.complete_jobs_v1(%s, %s, %s)",
            (QUEUE, [r[0] for r in rows], [r[1] for r in rows]),
        )
        enqueue(conn, 1)  # keep the ready set the same size
    return statistics.median(timings)


def raw_read_latency(conn: psycopg.Connection[Any], claims: int) -> float:
    timings = []
    for _ in range(claims):
        started = time.perf_counter()
        conn.execute(
            "SELECT * FROM pgmq.read(%s, 0, 1)", (QUEUE,)
        ).fetchall()  # vt 0: stays visible
        timings.append((time.perf_counter() - started) * 1000)
    return statistics.median(timings)


def measure(backend: str, head: int, claims: int) -> dict[str, float]:
    url = database(backend)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            enqueue(conn, READY)
            conn.execute("VACUUM ANALYZE")
            result = {"flat_ms": claim_latency(conn, claims)}
            if backend == "pgmq":
                result["raw_flat_ms"] = raw_read_latency(conn, claims)
            lease_head(conn, head)
            enqueue(conn, READY)  # behind the head, as in the finding
            conn.execute("VACUUM ANALYZE")
            result["head_ms"] = claim_latency(conn, claims)
            if backend == "pgmq":
                result["raw_head_ms"] = raw_read_latency(conn, claims)
        return result
    finally:
        drop(url)


def main(argv: list[str]) -> int:
    head = int(argv[0]) if argv else 53_000
    claims = int(argv[1]) if len(argv) > 1 else 200
    print(f"claim latency, batch 1, median of {claims}; {READY} ready; head: {head} leased ahead")
    print(f"{'backend':<8} {'no head':>9} {'leased head':>12} {'ratio':>7}")
    for backend in ("pgmq", "table"):
        result = measure(backend, head, claims)
        ratio = result["head_ms"] / result["flat_ms"]
        print(
            f"{backend:<8} {result['flat_ms']:>7.2f}ms {result['head_ms']:>10.2f}ms {ratio:>6.2f}x"
        )
        if "raw_flat_ms" in result:
            raw = result["raw_head_ms"] / result["raw_flat_ms"]
            print(
                f"{'pgmq.read':<8} {result['raw_flat_ms']:>7.2f}ms {result['raw_head_ms']:>10.2f}ms {raw:>6.2f}x"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
