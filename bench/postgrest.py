"""Processing over PostgREST: drainpipe's own API (``PostgrestBackend``, schema
``drainpipe_api``) next to raw ``pgmq_public`` calls, through the same emulation, in one run.

    python -m bench.postgrest              # 5 rounds of 400 jobs
    python -m bench.postgrest --quick      # 2 rounds of 100 jobs
    python -m bench.postgrest --jobs 1000 --rounds 7
    python -m bench.postgrest --round-trip-ms 20   # each request waits 20 ms first

The emulation is the tests' (``tests/jobs/postgrest_emulation.py``): respx answers each
``POST /rest/v1/rpc/<fn>`` by running the function on real Postgres with named arguments
in a transaction as the service role, as PostgREST does. What it leaves out is the network
and PostgREST's own process, the same for every system, so the numbers compare requests
and the SQL behind them, not absolute HTTPS latency (add your round-trip time times the
requests per job for that).

Systems, each on the same database and storage (pgmq), one queue each:

* ``raw-pgmq_public``  ``send_batch``, then ``read`` n jobs and ``archive`` each (no
  batch archive in pgmq_public): what a hand-written loop over Supabase's RPCs does;
* ``dp-pgmq_public``   ``Jobs.drain`` over ``PgmqPublicBackend`` (the fallback);
* ``dp-postgrest``     ``Jobs.drain`` over ``PostgrestBackend``: fenced, one
  ``complete_and_claim_v1`` request per batch (the completions and the next claim).

Rounds are interleaved (each system once per round, rotating order); medians are shown,
with the ratio to ``raw-pgmq_public`` of the same round.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))
sys.path.insert(0, str(ROOT))

from tests.jobs.postgrest_emulation import (  # noqa: E402
    BASE,
    SERVICE_KEY,
    PostgrestEmulation,
    postgrest_emulation,
)
from tests.jobs.test_pgmq_public import PGMQ_PUBLIC_SQL  # noqa: E402

from drainpipe import Jobs, install  # noqa: E402
from drainpipe.backends.pgmq_public import PgmqPublicBackend  # noqa: E402
from drainpipe.backends.postgrest import PostgrestBackend  # noqa: E402

SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"
SYSTEMS = ("raw-pgmq_public", "dp-pgmq_public", "dp-postgrest")
BATCH = 10


async def _noop(payload: Any, job: Any) -> None:
    return None


async def raw_pgmq_public(backend: PgmqPublicBackend, queue: str, jobs: int) -> None:
    """The loop a user writes over pgmq_public's RPCs: read a batch, archive each."""
    await backend.rpc(
        "send_batch",
        {"queue_name": queue, "messages": [{"n": i} for i in range(jobs)], "sleep_seconds": 0},
    )
    done = 0
    while done < jobs:
        rows = await backend.rpc("read", {"queue_name": queue, "sleep_seconds": 30, "n": BATCH})
        for row in rows:
            await backend.rpc("archive", {"queue_name": queue, "message_id": row["msg_id"]})
        done += len(rows)


async def drainpipe_drain(backend: Any, queue: str, jobs: int) -> None:
    client = Jobs(backend, {queue: dict})
    await client.enqueue_many(queue, [{"n": i} for i in range(jobs)])
    report = await client.drain(queue, _noop, batch=BATCH, lease=60)
    assert report.succeeded == jobs, report


async def measure(
    run: Callable[[], Awaitable[None]], emulation: PostgrestEmulation
) -> tuple[float, int]:
    before = len(emulation.requests)
    started = time.perf_counter()
    await run()
    return time.perf_counter() - started, len(emulation.requests) - before


async def bench(
    jobs: int, rounds: int, server: str, round_trip_ms: float
) -> dict[str, list[tuple[float, int]]]:
    name = f"drainpipe_bench_rest_{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(server, autocommit=True) as admin:
        for role in ("anon", "authenticated", "service_role"):
            exists = await (
                await admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,))
            ).fetchone()
            if exists is None:
                await admin.execute(f"CREATE ROLE {role} NOLOGIN")
        await admin.execute(f'CREATE DATABASE "{name}"')
    url = make_conninfo(server, dbname=name)
    results: dict[str, list[tuple[float, int]]] = {system: [] for system in SYSTEMS}
    try:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await install(conn, ["jobs", "rest-api"])
            await conn.execute(PGMQ_PUBLIC_SQL)
            for system in SYSTEMS:
                await conn.execute("SELECT pgmq.create(%s)", (system.replace("-", "_"),))
            await conn.execute("GRANT ALL ON ALL TABLES IN SCHEMA pgmq TO service_role")
            await conn.execute("GRANT ALL ON ALL SEQUENCES IN SCHEMA pgmq TO service_role")
        async with (
            postgrest_emulation(url) as (emulation, _),
            PgmqPublicBackend.from_url(BASE, SERVICE_KEY) as public,
            PostgrestBackend(BASE, SERVICE_KEY) as rest,
        ):
            emulation.round_trip = round_trip_ms / 1000
            runs: dict[str, Callable[[], Awaitable[None]]] = {
                "raw-pgmq_public": lambda: raw_pgmq_public(public, "raw_pgmq_public", jobs),
                "dp-pgmq_public": lambda: drainpipe_drain(public, "dp_pgmq_public", jobs),
                "dp-postgrest": lambda: drainpipe_drain(rest, "dp_postgrest", jobs),
            }
            for system in SYSTEMS:  # warm: schema cache, pools, first imports
                await runs[system]()
            for round_ in range(rounds):
                order = SYSTEMS[round_ % 3 :] + SYSTEMS[: round_ % 3]
                for system in order:
                    results[system].append(await measure(runs[system], emulation))
    finally:
        async with await psycopg.AsyncConnection.connect(server, autocommit=True) as admin:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return results


def report(results: dict[str, list[tuple[float, int]]], jobs: int, round_trip_ms: float) -> None:
    raw = results["raw-pgmq_public"]
    print(
        f"\n## processing over PostgREST ({jobs} jobs per round, batch {BATCH},"
        f" {round_trip_ms:g} ms per request added, median)"
    )
    print("| system | jobs/s | requests/job | vs raw-pgmq_public (same round) |")
    print("| --- | --- | --- | --- |")
    for system in SYSTEMS:
        samples = results[system]
        rate = statistics.median(jobs / seconds for seconds, _ in samples)
        per_job = statistics.median(requests / jobs for _, requests in samples)
        ratio = statistics.median(
            (jobs / s) / (jobs / r) for (s, _), (r, _) in zip(samples, raw, strict=True)
        )
        print(f"| {system} | {rate:.0f} | {per_job:.2f} | {ratio:.2f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--database-url", default=SERVER)
    parser.add_argument(
        "--round-trip-ms", type=float, default=0.0, help="a network round trip per request"
    )
    args = parser.parse_args()
    jobs, rounds = (100, 2) if args.quick else (args.jobs, args.rounds)
    print(f"server: {conninfo_to_dict(args.database_url).get('host', 'local')}")
    results = asyncio.run(bench(jobs, rounds, args.database_url, args.round_trip_ms))
    report(results, jobs, args.round_trip_ms)


if __name__ == "__main__":
    main()
