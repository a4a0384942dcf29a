"""Durable steps: what a step costs, and whether sleeping jobs slow the claim down.

    python -m bench.steps            # ~1-2 minutes
    python -m bench.steps --quick    # smoke run

Per storage backend (pgmq, table), on a fresh database dropped at the end:

* round trips: one job whose handler records 10 steps against one that records 1, drained
  alone (batch 1); every statement the client sends is counted. The issue's bar: the
  10-step job costs at most 10 round trips more.
* client CPU per step: ``--jobs`` jobs of 10 steps each, drained (4 lanes), against the
  same number of plain no-op jobs drained in the same round; CPU (``process_time``) per
  step over CPU per plain job. The issue's bar: <= 1.3x. And the floor under it: the same
  number of bare round trips of the step's statement, recording steps of claimed jobs (4
  lanes); CPU per step over CPU per bare round trip (1.0: a step costs nothing but its
  round trip). And against plain jobs settled alone (batch 1): each such job has a round
  trip of its own, as each step does, where a batch of 10 shares one among ten.
* claim p50 with a backlog of ``--waiting`` (100,000) suspended jobs (waiting for time or
  an event, stored as a suspension stores them) in the claimed queue, against a queue with
  none; rounds alternate the two queues. The issue's bar: <= 1.2x.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))

from drainpipe import Job, Jobs, install  # noqa: E402
from drainpipe.db import jsonb  # noqa: E402

from .results import Row, append_run  # noqa: E402

SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"
QUEUES: dict[str, Any] = {"steps": dict[str, Any], "plain": dict[str, Any],
                          "bare": dict[str, Any], "empty": dict[str, Any],
                          "backlog": dict[str, Any]}  # fmt: skip


def _url(name: str) -> str:
    return SERVER.rsplit("/", 1)[0] + "/" + name


async def noop(payload: Any, job: Job[Any]) -> None:
    return None


def one_step() -> int:
    return 1


def workflow(steps: int) -> Any:
    async def handler(payload: Any, job: Job[Any]) -> None:
        for n in range(steps):
            await job.step(f"s{n}", one_step)

    return handler


async def round_trips(jobs: Jobs, steps: int) -> int:
    db: Any = jobs.backend.db  # type: ignore[attr-defined]
    calls = 0
    fetch = db.fetch

    async def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return await fetch(*args, **kwargs)

    await jobs.enqueue("steps", {})
    db.fetch = counted
    try:
        await jobs.drain("steps", workflow(steps))
    finally:
        db.fetch = fetch
    return calls


async def bare_round_trips(jobs: Jobs, count: int, steps: int) -> float:
    """CPU µs per bare round trip of the step's own statement (record_job_step_v1 with a
    step's parameters, recording ``steps`` steps of ``count`` claimed jobs, on 4 lanes like
    the drain's): the floor under a step, since a step is recorded before the handler goes
    on, in a round trip of its own. Recorded for real: a statement that writes keeps the
    server longer than one refused at once, and the client's CPU for a round trip grows
    with that (psycopg finds no answer yet and waits through the event loop)."""
    from drainpipe.backends import step_statements as step_ops

    db: Any = jobs.backend.db  # type: ignore[attr-defined]
    await jobs.enqueue_many("bare", [{}] * count)
    claimed = await jobs.claim("bare", lease=600, batch=count)
    now = datetime.now(UTC)

    async def lane(mine: list[Job[Any]]) -> None:
        for job in mine:
            for number in range(1, steps + 1):
                params = ("bare", job.id, job.attempts, number, f"s{number}", "done", jsonb(1),
                          None, now)  # fmt: skip
                await db.fetch(step_ops.RECORD_STEP, params)

    started = time.process_time()
    await asyncio.gather(*(lane(claimed[n::4]) for n in range(4)))
    spent = time.process_time() - started
    for job in claimed:
        await jobs.complete(job)
    return spent / (len(claimed) * steps) * 1e6


async def cpu_round(jobs: Jobs, count: int, steps: int) -> tuple[float, float, float, float]:
    """(CPU µs per step of a workflow job, CPU µs per plain job, CPU µs per bare round
    trip of a step's statement, CPU µs per plain job settled alone: batch 1, so each job
    has a round trip of its own, as each step has)."""
    await jobs.enqueue_many("steps", [{}] * count)
    await jobs.enqueue_many("plain", [{}] * count)
    started = time.process_time()
    await jobs.drain("steps", workflow(steps), concurrency=4, batch=10)
    per_step = (time.process_time() - started) / (count * steps) * 1e6
    started = time.process_time()
    await jobs.drain("plain", noop, concurrency=4, batch=10)
    per_job = (time.process_time() - started) / count * 1e6
    await jobs.enqueue_many("plain", [{}] * count)
    started = time.process_time()
    await jobs.drain("plain", noop, concurrency=4, batch=1)
    per_job_alone = (time.process_time() - started) / count * 1e6
    return per_step, per_job, await bare_round_trips(jobs, count, steps), per_job_alone


async def fill_waiting(url: str, backend: str, count: int) -> None:
    """``count`` suspended jobs in queue ``backlog``, as suspend_job_v1 leaves them."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        if backend == "pgmq":
            await conn.execute(
                "INSERT INTO pgmq.q_backlog (vt, read_ct, message)"
                " SELECT clock_timestamp() + interval '3 days', 1, jsonb_build_object("
                "  'payload', jsonb_build_object('n', g), 'max_attempts', 6, 'failed', 1,"
                "  'suspended', 1, 'waiting_for', CASE WHEN g %% 2 = 0 THEN 'time' ELSE 'event:x' END)"
                " FROM generate_series(1, %s) g",
                (count,),
            )
            await conn.execute("VACUUM ANALYZE pgmq.q_backlog")
        else:
            await conn.execute(
                "INSERT INTO drainpipe.job_messages"
                " (queue, payload, attempts, max_attempts, state, visible_at)"
                " SELECT 'backlog', jsonb_build_object('n', g), 1, 6, 'waiting',"
                "  clock_timestamp() + interval '3 days' FROM generate_series(1, %s) g",
                (count,),
            )
            await conn.execute("VACUUM ANALYZE drainpipe.job_messages")


async def claim_latencies(jobs: Jobs, queue: str, count: int) -> list[float]:
    """Claim latency (ms) of ``count`` claims of a freshly enqueued job each."""
    out = []
    for _ in range(count):
        await jobs.enqueue(queue, {})
        started = time.perf_counter()
        [job] = await jobs.claim(queue, lease=60)
        out.append((time.perf_counter() - started) * 1000)
        await jobs.complete(job)
    return out


async def bench_backend(backend: str, args: argparse.Namespace) -> list[Row]:
    name = f"bench_steps_{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(SERVER, autocommit=True) as admin:
        await admin.execute(f'CREATE DATABASE "{name}"')
    url = _url(name)
    rows: list[Row] = []
    try:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await install(conn, ["jobs"], backend=backend)  # type: ignore[arg-type]
        async with Jobs(url, QUEUES) as jobs:
            await round_trips(jobs, 1)  # warm: queues made, statements prepared
            one, ten = await round_trips(jobs, 1), await round_trips(jobs, 10)
            print(f"{backend}: round trips 1 step {one}, 10 steps {ten}", flush=True)

            ratios, floors, steps_us, plain_us, bare_us = [], [], [], [], []
            alone_ratios, alone_us = [], []
            await cpu_round(jobs, 50, 10)  # warm
            for _ in range(args.rounds):
                per_step, per_job, bare, per_job_alone = await cpu_round(jobs, args.jobs, 10)
                ratios.append(per_step / per_job)
                alone_ratios.append(per_step / per_job_alone)
                alone_us.append(per_job_alone)
                floors.append(per_step / bare)
                steps_us.append(per_step)
                plain_us.append(per_job)
                bare_us.append(bare)
            bare, floor = statistics.median(bare_us), statistics.median(floors)
            rows.append(Row("client CPU per step / per plain job", f"dp-{backend}",
                            baseline=f"dp-{backend} plain", ratio=statistics.median(ratios),
                            ratio_range=(min(ratios), max(ratios)),
                            value=statistics.median(steps_us), unit="µs/step",
                            note=f"plain job {statistics.median(plain_us):.0f} µs; the floor, a"
                                 f" bare round trip of the step's statement: {bare:.0f} µs"
                                 f" (step / floor {floor:.2f}); round trips: 10-step job"
                                 f" +{ten - one} over a 1-step one (1 step: {one}, 10 steps:"
                                 f" {ten})"))  # fmt: skip
            rows.append(Row("client CPU per step / per plain job settled alone (batch 1)",
                            f"dp-{backend}", baseline=f"dp-{backend} plain, batch 1",
                            ratio=statistics.median(alone_ratios),
                            ratio_range=(min(alone_ratios), max(alone_ratios)),
                            value=statistics.median(steps_us), unit="µs/step",
                            note=f"plain job alone {statistics.median(alone_us):.0f} µs: one"
                                 " round trip per job, as a step has one of its own (a batch"
                                 " of 10 shares one among ten)"))  # fmt: skip
            print(f"{backend}: cpu/step {statistics.median(steps_us):.0f} µs, plain job"
                  f" {statistics.median(plain_us):.0f} µs, ratio {statistics.median(ratios):.2f};"
                  f" bare round trip {statistics.median(bare_us):.0f} µs, step/bare"
                  f" {statistics.median(floors):.2f}", flush=True)  # fmt: skip

            await claim_latencies(jobs, "empty", 20)
            await claim_latencies(jobs, "backlog", 20)  # creates the queue (pgmq)
            await fill_waiting(url, backend, args.waiting)
            empty: list[float] = []
            backlog: list[float] = []
            for _ in range(args.rounds):
                empty += await claim_latencies(jobs, "empty", args.claims)
                backlog += await claim_latencies(jobs, "backlog", args.claims)
            p_empty, p_backlog = statistics.median(empty), statistics.median(backlog)
            rows.append(Row(f"claim p50, {args.waiting:,} waiting jobs vs none", f"dp-{backend}",
                            baseline=f"dp-{backend} empty", ratio=p_backlog / p_empty,
                            value=p_backlog, unit="ms",
                            note=f"empty queue p50 {p_empty:.3f} ms; lower is better"))  # fmt: skip
            print(f"{backend}: claim p50 empty {p_empty:.3f} ms, {args.waiting} waiting"
                  f" {p_backlog:.3f} ms, ratio {p_backlog / p_empty:.2f}", flush=True)  # fmt: skip
    finally:
        async with await psycopg.AsyncConnection.connect(SERVER, autocommit=True) as admin:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return rows


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--claims", type=int, default=100)
    parser.add_argument("--waiting", type=int, default=100_000)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.rounds, args.claims, args.waiting = 50, 1, 20, 5_000
    rows: list[Row] = []
    for backend in ("pgmq", "table"):
        rows += await bench_backend(backend, args)
    if not args.quick and not args.no_record:
        print(append_run("bench.steps", rows))


if __name__ == "__main__":
    asyncio.run(main())
