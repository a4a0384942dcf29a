"""Queue policies and encrypted payloads: their cost next to the same queue without them.

    python -m bench.policies            # ~1-2 minutes
    python -m bench.policies --quick    # smoke run (~20 s)

Per storage backend (pgmq, table), three systems, each on a fresh database dropped at the
end (a policy's triggers are per database on the table backend, so the baseline gets a
database without any policy):

* ``none``     ``Jobs`` without a policy
* ``policy``   the same queue with ``QueuePolicy()`` stored by ``ensure_policies()`` (the
               client's checks plus the database's triggers and live counter)
* ``sealed``   ``QueuePolicy(encrypt=True)``: AES-256-GCM in the client as well

Rounds interleave the systems (rotating order). Each round enqueues ``--jobs`` jobs in
batches of 100 and ``--singles`` jobs one by one, then drains them (4 lanes, batches of
10, a no-op handler). Reported: medians of jobs/s and, per round, the ratio to ``none`` on
the same backend; client CPU per job (``process_time``) for enqueue and processing.
The issue's bar: ``policy`` processes at >= 0.8x ``none``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import AsyncConnectionPool

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))

import drainpipe  # noqa: E402
from drainpipe import Jobs, Keyring, QueuePolicy, install  # noqa: E402

SERVER = os.environ.get("BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
QUEUE = "q"
KINDS = ("none", "policy", "sealed")


def payload(n: int) -> dict[str, Any]:
    return {"n": n, "to": f"user{n}@example.com", "subject": "Your order has shipped"}


async def noop(payload: Any, job: Any) -> None:
    return None


@dataclass
class System:
    backend: str
    kind: str
    url: str
    pool: AsyncConnectionPool[Any] | None = None
    jobs: Jobs | None = None
    enqueue_rate: list[float] = field(default_factory=list)
    single_rate: list[float] = field(default_factory=list)
    process_rate: list[float] = field(default_factory=list)
    enqueue_cpu_us: list[float] = field(default_factory=list)
    process_cpu_us: list[float] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.backend}/{self.kind}"

    async def open(self, keyring: Keyring) -> None:
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
            await install(conn, ["jobs"], backend=self.backend)  # type: ignore[arg-type]
        self.pool = AsyncConnectionPool(
            self.url, min_size=4, max_size=8, kwargs={"autocommit": True}, open=False
        )
        await self.pool.open()
        policies = {
            "none": None,
            "policy": {QUEUE: QueuePolicy()},
            "sealed": {QUEUE: QueuePolicy(encrypt=True)},
        }[self.kind]
        self.jobs = Jobs(self.pool, {QUEUE: dict[str, Any]}, policies=policies, keyring=keyring)
        await self.jobs.ensure_policies()

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.close()

    async def round(self, jobs_count: int, singles: int, start: int) -> None:
        assert self.jobs is not None
        jobs = self.jobs
        cpu, wall = time.process_time(), time.perf_counter()
        for offset in range(0, jobs_count, 100):
            batch = [payload(start + offset + i) for i in range(min(100, jobs_count - offset))]
            await jobs.enqueue_many(QUEUE, batch)
        self.enqueue_rate.append(jobs_count / (time.perf_counter() - wall))
        self.enqueue_cpu_us.append((time.process_time() - cpu) / jobs_count * 1e6)
        wall = time.perf_counter()
        for i in range(singles):
            await jobs.enqueue(QUEUE, payload(i))
        self.single_rate.append(singles / (time.perf_counter() - wall))
        total = jobs_count + singles
        cpu, wall = time.process_time(), time.perf_counter()
        report = await jobs.drain(QUEUE, noop, concurrency=4, batch=10)
        self.process_rate.append(total / (time.perf_counter() - wall))
        self.process_cpu_us.append((time.process_time() - cpu) / total * 1e6)
        if report.succeeded != total:
            raise RuntimeError(f"{self.name}: drained {report.succeeded} of {total}")


def _database(dsn: str, name: str) -> str:
    params = conninfo_to_dict(dsn)
    params["dbname"] = name
    return make_conninfo(**params)


async def create(tag: str, names: list[str]) -> dict[str, str]:
    urls: dict[str, str] = {}
    async with await psycopg.AsyncConnection.connect(SERVER, autocommit=True) as admin:
        for name in names:
            db = f"bench_pol_{tag}_{name.replace('/', '_')}"
            await admin.execute(f'CREATE DATABASE "{db}"')
            urls[name] = _database(SERVER, db)
    return urls


async def drop(urls: dict[str, str]) -> None:
    async with await psycopg.AsyncConnection.connect(SERVER, autocommit=True) as admin:
        for url in urls.values():
            name = conninfo_to_dict(url)["dbname"]
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def ratios(system: System, base: System, metric: str) -> list[float]:
    mine, theirs = getattr(system, metric), getattr(base, metric)
    return [a / b for a, b in zip(mine, theirs, strict=True) if b]


async def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--jobs", type=int, default=None, help="batched enqueues per round")
    parser.add_argument("--singles", type=int, default=None, help="single enqueues per round")
    parser.add_argument("--backends", nargs="+", default=["pgmq", "table"])
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 7)
    jobs_count = args.jobs or (500 if args.quick else 2000)
    singles = args.singles or (100 if args.quick else 300)
    keyring = Keyring.parse(Keyring.new_entry("bench"))
    names = [f"{backend}/{kind}" for backend in args.backends for kind in KINDS]
    urls = await create(uuid.uuid4().hex[:8], names)
    systems = [System(n.split("/")[0], n.split("/")[1], urls[n]) for n in names]
    try:
        for system in systems:
            await system.open(keyring)
        for index in range(rounds):
            order = systems[index % len(systems) :] + systems[: index % len(systems)]
            for system in order:
                await system.round(jobs_count, singles, index * jobs_count)
    finally:
        for system in systems:
            await system.close()
        await drop(urls)
    by_name = {s.name: s for s in systems}
    result: dict[str, Any] = {
        "drainpipe": drainpipe.__version__,
        "rounds": rounds,
        "jobs": jobs_count,
        "singles": singles,
        "systems": {},
    }
    print(f"{rounds} rounds of {jobs_count} batched + {singles} single enqueues, then a drain")
    header = (
        f"{'system':<14}{'enqueue/s':>11}{'single/s':>10}{'process/s':>11}"
        f"{'x none (proc)':>15}{'x none (single)':>17}{'cpu enq µs':>12}{'cpu proc µs':>13}"
    )
    print(header)
    for system in systems:
        base = by_name[f"{system.backend}/none"]
        proc_ratio = med(ratios(system, base, "process_rate"))
        single_ratio = med(ratios(system, base, "single_rate"))
        row = {
            "enqueue_per_s": med(system.enqueue_rate),
            "single_per_s": med(system.single_rate),
            "process_per_s": med(system.process_rate),
            "process_ratio_to_none": proc_ratio,
            "single_ratio_to_none": single_ratio,
            "client_cpu_us_per_job_enqueue": med(system.enqueue_cpu_us),
            "client_cpu_us_per_job_process": med(system.process_cpu_us),
        }
        result["systems"][system.name] = row
        print(
            f"{system.name:<14}{row['enqueue_per_s']:>11.0f}{row['single_per_s']:>10.0f}"
            f"{row['process_per_s']:>11.0f}{proc_ratio:>15.2f}{single_ratio:>17.2f}"
            f"{row['client_cpu_us_per_job_enqueue']:>12.1f}"
            f"{row['client_cpu_us_per_job_process']:>13.1f}"
        )
    for backend in args.backends:
        sealed = result["systems"][f"{backend}/sealed"]
        plain = result["systems"][f"{backend}/none"]
        extra_enq = sealed["client_cpu_us_per_job_enqueue"] - plain["client_cpu_us_per_job_enqueue"]
        extra_proc = (
            sealed["client_cpu_us_per_job_process"] - plain["client_cpu_us_per_job_process"]
        )
        print(
            f"{backend}: encryption costs {extra_enq:.1f} µs client CPU per job to enqueue and"
            f" {extra_proc:.1f} µs to process; QueuePolicy() processes at"
            f" {result['systems'][f'{backend}/policy']['process_ratio_to_none']:.2f}x no policy"
        )
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    asyncio.run(main())
