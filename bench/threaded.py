"""drainpipe next to the loops people write by hand with *sync* psycopg, one thread each.

    python -m bench.threaded              # 20,000 jobs, 5 rounds (~2-3 minutes)
    python -m bench.threaded --quick      # smoke run (< 60 s)

Processing (``--consumers`` consumers, claim batch ``--batch``, a no-op handler):

* ``thr-pgmq``      a thread per consumer, its own connection: ``pgmq.read`` + ``pgmq.archive(ids[])``
* ``thr-skip-del``  a thread per consumer: ``FOR UPDATE SKIP LOCKED`` claim, ``DELETE`` by ids
* ``thr-skip-keep`` the same claim, the rows kept and marked done (``done_at``): the peer
  of a queue that keeps its records (#11)
* ``aio-pgmq`` / ``aio-skip-del`` the asyncio loops of :mod:`bench.run` (one task each)
* ``dp-pgmq`` / ``dp-table`` ``drainpipe.Jobs.drain`` (async) on each backend
* ``thr-dp-pgmq`` / ``thr-dp-table`` drainpipe's own turn (``complete_and_claim_jobs_v1``)
  sent from the hand-written thread loop: the same SQL as ``dp-*`` without drainpipe's
  client, so each run splits the gap to the raw loop into the SQL's part and the client's
* ``sync-pgmq`` / ``sync-table`` the sync twin's ``drainpipe.sync.Jobs.drain`` on a DSN
  (``concurrency`` threads), for Django/Flask and sync Lambda handlers

``thr-skip-keep`` has the index on ``done_at`` that :mod:`bench.run`'s
``skiplocked-archive`` has (finished rows found by age, to purge them): the peer of a
queue that keeps its records pays for finding them again, as drainpipe's table does.

Single enqueue, one job per call, one caller, sequential:

* ``raw-send`` / ``raw-insert`` ``pgmq.send`` / ``INSERT ... RETURNING id`` on one sync connection
* ``dp-<backend>-dsn``  the public ``Jobs.enqueue`` on a DSN (drainpipe's own pool)
* ``dp-<backend>-pool`` the public ``Jobs.enqueue`` on an ``AsyncConnectionPool`` of the caller's
* ``sync-<backend>-dsn`` the sync twin's ``Jobs.enqueue`` on a DSN (its own pool)

Rounds are interleaved (every system once per round, the order rotating); the tables show
medians of the rounds and the per-round ratios drainpipe / raw. Client CPU per job is this
process's ``process_time`` (all threads) over the jobs; round trips are statements sent,
counted client-side for every cursor (sync and async) of this process.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import itertools
import pstats
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

import drainpipe
from bench.results import Row, append_run, describe_machine
from bench.run import (
    LEASE,
    QUEUE,
    RAW_QUEUE,
    System,
    create_databases,
    drop_databases,
    payload,
    run_sql,
)
from drainpipe.sync import Jobs as SyncJobs

KEEP_TABLE = "bench_keep"

# -- round trips: every execute of every cursor of this process --------------------------

_STATEMENTS = itertools.count()  # next() is atomic under the GIL: safe from many threads
_counted = False


def statements_sent() -> int:
    """Statements sent so far (reading the counter advances it by one: subtract pairs)."""
    return next(_STATEMENTS)


def count_statements() -> None:
    """Wrap ``execute`` of psycopg's sync and async cursors (and their subclasses') once."""
    global _counted
    if _counted:
        return
    _counted = True
    sync_execute = psycopg.Cursor.execute
    async_execute = psycopg.AsyncCursor.execute

    def counted_sync(self: Any, *args: Any, **kwargs: Any) -> Any:
        next(_STATEMENTS)
        return sync_execute(self, *args, **kwargs)

    async def counted_async(self: Any, *args: Any, **kwargs: Any) -> Any:
        next(_STATEMENTS)
        return await async_execute(self, *args, **kwargs)

    psycopg.Cursor.execute = counted_sync  # type: ignore[method-assign]
    psycopg.AsyncCursor.execute = counted_async  # type: ignore[method-assign]


# -- the hand-written sync loops -----------------------------------------------------------

SKIP_CLAIM = """WITH c AS (
    SELECT id FROM {table} WHERE visible_at <= now(){open}
     ORDER BY visible_at, id LIMIT %s FOR UPDATE SKIP LOCKED)
UPDATE {table} b
   SET visible_at = now() + make_interval(secs => %s), attempts = b.attempts + 1
  FROM c WHERE b.id = c.id
RETURNING b.id, b.payload"""


def thread_consumer(conn: psycopg.Connection[Any], system: str, batch: int) -> int:
    """One consumer thread's loop on its own autocommit connection, until the queue is empty."""
    if system.startswith("thr-dp-"):
        return thread_turns(conn, batch)
    done = 0
    claim_params: tuple[Any, ...]
    if system == "thr-pgmq":
        claim = "SELECT msg_id, message FROM pgmq.read(%s, %s, %s)"
        claim_params = (RAW_QUEUE, LEASE, batch)
        finish = "SELECT pgmq.archive(%s, %s::bigint[])"
    elif system == "thr-skip-del":
        claim, claim_params = SKIP_CLAIM.format(table="bench_raw", open=""), (batch, LEASE)
        finish = "DELETE FROM bench_raw WHERE id = ANY(%s)"
    else:
        claim = SKIP_CLAIM.format(table=KEEP_TABLE, open=" AND done_at IS NULL")
        claim_params = (batch, LEASE)
        finish = f"UPDATE {KEEP_TABLE} SET done_at = now() WHERE id = ANY(%s)"
    while True:
        rows = conn.execute(claim, claim_params).fetchall()
        if not rows:
            return done
        for row in rows:
            _handle(row[1])
        ids = [row[0] for row in rows]
        if system == "thr-pgmq":
            conn.execute(finish, (RAW_QUEUE, ids))
        else:
            conn.execute(finish, (ids,))
        done += len(rows)


TURN = "SELECT id, attempts, payload FROM drainpipe.complete_and_claim_jobs_v1(%s, %s, %s, %s, %s)"


def thread_turns(conn: psycopg.Connection[Any], batch: int) -> int:
    """drainpipe's turn by hand: each call completes the batch before and claims the next."""
    done = 0
    ids: list[int] = []
    attempts: list[int] = []
    while True:
        rows = conn.execute(TURN, (QUEUE, ids, attempts, LEASE, batch)).fetchall()
        done += len(ids)
        if not rows:
            return done
        for row in rows:
            _handle(row[2])
        ids = [row[0] for row in rows]
        attempts = [row[1] for row in rows]


def _handle(value: Any) -> None:
    """The no-op handler of the sync loops (a call, as the async ones make)."""
    return None


def run_threads(conns: Sequence[psycopg.Connection[Any]], system: str, batch: int) -> int:
    counts = [0] * len(conns)

    def one(index: int) -> None:
        counts[index] = thread_consumer(conns[index], system, batch)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(conns))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts)


def raw_singles(
    conn: psycopg.Connection[Any], system: str, payloads: Sequence[dict[str, Any]]
) -> int:
    for p in payloads:
        if system == "raw-send":
            conn.execute("SELECT pgmq.send(%s, %s)", (RAW_QUEUE, Jsonb(p))).fetchone()
        else:
            conn.execute(
                "INSERT INTO bench_raw (payload) VALUES (%s) RETURNING id", (Jsonb(p),)
            ).fetchone()
    return len(payloads)


# -- drainpipe and the asyncio loops ---------------------------------------------------------


async def open_pool(url: str, size: int) -> AsyncConnectionPool[Any]:
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        url, min_size=size, max_size=size, kwargs={"autocommit": True}, open=False
    )
    await pool.open(wait=True)
    return pool


async def async_process(
    pool: AsyncConnectionPool[Any], url: str, system: str, consumers: int, batch: int
) -> int:
    storage = "pgmq" if system.endswith("pgmq") else "table"
    name = {"aio-pgmq": "raw-pgmq", "aio-skip-del": "raw-table"}.get(system, system)
    return await System(name, url, storage).process(pool, consumers, batch)


@dataclass
class Enqueuer:
    """A ``Jobs`` on a DSN or on a pool of the caller's, opened and warmed outside the clock."""

    jobs: Any
    pool: AsyncConnectionPool[Any] | None

    @classmethod
    async def open(cls, url: str, on_pool: bool) -> Enqueuer:
        pool: AsyncConnectionPool[Any] | None = None
        if on_pool:
            pool = await open_pool(url, 1)
        jobs = drainpipe.Jobs(pool if pool is not None else url, {QUEUE: dict})
        await jobs.enqueue(QUEUE, payload(-1))  # opens drainpipe's pool, builds the adapter
        return cls(jobs, pool)

    async def close(self) -> None:
        await self.jobs.close()
        if self.pool is not None:
            await self.pool.close()


async def dp_singles(enqueuer: Enqueuer, payloads: Sequence[dict[str, Any]]) -> int:
    for p in payloads:
        await enqueuer.jobs.enqueue(QUEUE, p)
    return len(payloads)


def sync_singles(jobs: Any, payloads: Sequence[dict[str, Any]]) -> int:
    for p in payloads:
        jobs.enqueue(QUEUE, p)
    return len(payloads)


def sync_process(jobs: Any, consumers: int, batch: int) -> int:
    report = jobs.drain(QUEUE, _sync_noop, concurrency=consumers, batch=batch)
    return int(report.succeeded)


def _sync_noop(payload: Any, job: Any) -> None:
    return None


# -- measurement ---------------------------------------------------------------------------


@dataclass
class Sample:
    seconds: float
    jobs: int
    statements: int
    client_cpu: float

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds


def timed(body: Callable[..., int], *args: Any) -> Sample:
    trips = statements_sent()
    cpu = time.process_time()
    started = time.perf_counter()
    jobs = body(*args)
    seconds = time.perf_counter() - started
    client_cpu = time.process_time() - cpu
    return Sample(seconds, jobs, statements_sent() - trips - 1, client_cpu)


PROCESSING = (
    "thr-pgmq",
    "aio-pgmq",
    "dp-pgmq",
    "thr-dp-pgmq",
    "thr-skip-del",
    "thr-skip-keep",
    "aio-skip-del",
    "dp-table",
    "thr-dp-table",
    "sync-pgmq",
    "sync-table",
)
SINGLES = (
    "raw-send",
    "dp-pgmq-dsn",
    "dp-pgmq-pool",
    "sync-pgmq-dsn",
    "raw-insert",
    "dp-table-dsn",
    "dp-table-pool",
    "sync-table-dsn",
)
PROCESS_PAIRS = (
    ("dp-pgmq", "thr-pgmq"),
    ("dp-pgmq", "aio-pgmq"),
    ("sync-pgmq", "thr-pgmq"),
    ("dp-table", "thr-skip-keep"),
    ("dp-table", "thr-skip-del"),
    ("dp-table", "aio-skip-del"),
    ("sync-table", "thr-skip-keep"),
    ("thr-dp-pgmq", "thr-pgmq"),
    ("dp-pgmq", "thr-dp-pgmq"),
    ("thr-dp-table", "thr-skip-keep"),
    ("dp-table", "thr-dp-table"),
)
SINGLE_PAIRS = (
    ("dp-pgmq-dsn", "raw-send"),
    ("dp-pgmq-pool", "raw-send"),
    ("sync-pgmq-dsn", "raw-send"),
    ("dp-table-dsn", "raw-insert"),
    ("dp-table-pool", "raw-insert"),
    ("sync-table-dsn", "raw-insert"),
)


def storage_of(system: str) -> str:
    return "pgmq" if "pgmq" in system or system == "raw-send" else "table"


def tables_of(system: str) -> str:
    if system in ("thr-pgmq", "aio-pgmq", "raw-send"):
        return f"pgmq.q_{RAW_QUEUE}, pgmq.a_{RAW_QUEUE}"
    if system.startswith(("dp-pgmq", "sync-pgmq", "thr-dp-pgmq")):
        return f"pgmq.q_{QUEUE}, pgmq.a_{QUEUE}"
    if system == "thr-skip-keep":
        return KEEP_TABLE
    if system.startswith(("dp-table", "sync-table", "thr-dp-table")):
        return "drainpipe.job_messages, drainpipe.job_dead_letters"
    return "bench_raw"


def fill(url: str, system: str, n: int) -> None:
    """Enqueue ``n`` jobs for a processing run (untimed), in batches of 1,000."""
    values = [Jsonb(payload(i)) for i in range(n)]
    with psycopg.connect(url, autocommit=True) as conn:
        for start in range(0, n, 1000):
            chunk = values[start : start + 1000]
            if system in ("thr-pgmq", "aio-pgmq"):
                conn.execute("SELECT pgmq.send_batch(%s, %s::jsonb[])", (RAW_QUEUE, chunk))
            elif system.startswith(("dp-", "sync-", "thr-dp-")):
                conn.execute(
                    "SELECT drainpipe.enqueue_jobs_v1(%s, %s, %s, %s)",
                    (QUEUE, Jsonb([payload(start + i) for i in range(len(chunk))]), 0.0, 5),
                )
            else:
                table = KEEP_TABLE if system == "thr-skip-keep" else "bench_raw"
                conn.execute(f"INSERT INTO {table} (payload) SELECT unnest(%s::jsonb[])", (chunk,))
        conn.execute(f"ANALYZE {tables_of(system)}")


@dataclass
class Config:
    n: int
    single: int
    consumers: int
    batch: int
    rounds: int
    profile: str | None = None
    record: bool = True  # append the run to bench/results/threaded.jsonl


def one_round(
    urls: dict[str, str], cfg: Config, index: int, results: dict[str, list[Sample]]
) -> None:
    order = list(PROCESSING)
    shift = index % len(order)
    for system in order[shift:] + order[:shift]:
        url = urls[storage_of(system)]
        asyncio.run(run_sql(url, f"TRUNCATE {tables_of(system)}"))
        fill(url, system, cfg.n)
        if system.startswith("thr-"):
            conns = [psycopg.connect(url, autocommit=True) for _ in range(cfg.consumers)]
            try:
                sample = timed(run_threads, conns, system, cfg.batch)
            finally:
                for conn in conns:
                    conn.close()
        elif system.startswith("sync-"):
            with SyncJobs(url, {QUEUE: dict}) as jobs:
                jobs.stats([QUEUE])  # opens its pool outside the clock
                sample = timed(sync_process, jobs, cfg.consumers, cfg.batch)
        else:
            loop = asyncio.new_event_loop()
            try:
                pool = loop.run_until_complete(open_pool(url, cfg.consumers + 1))
                sample = timed(
                    loop.run_until_complete,
                    async_process(pool, url, system, cfg.consumers, cfg.batch),
                )
                loop.run_until_complete(pool.close())
            finally:
                loop.close()
        if sample.jobs != cfg.n:
            raise RuntimeError(f"{system} processed {sample.jobs} of {cfg.n} jobs")
        results[system].append(sample)
    order = list(SINGLES)
    shift = index % len(order)
    singles = [payload(i) for i in range(cfg.single)]
    for system in order[shift:] + order[:shift]:
        url = urls[storage_of(system)]
        asyncio.run(run_sql(url, f"TRUNCATE {tables_of(system)}"))
        if system.startswith("raw-"):
            with psycopg.connect(url, autocommit=True) as conn:
                raw_singles(conn, system, singles[:50])  # warmed like ours
                results[system].append(timed(raw_singles, conn, system, singles))
            continue
        if system.startswith("sync-"):
            with SyncJobs(url, {QUEUE: dict}) as jobs:
                sync_singles(jobs, singles[:50])
                results[system].append(timed(sync_singles, jobs, singles))
            continue
        loop = asyncio.new_event_loop()
        try:
            enqueuer = loop.run_until_complete(Enqueuer.open(url, system.endswith("-pool")))
            loop.run_until_complete(dp_singles(enqueuer, singles[:50]))
            results[system].append(timed(loop.run_until_complete, dp_singles(enqueuer, singles)))
            loop.run_until_complete(enqueuer.close())
        finally:
            loop.close()


def report(results: dict[str, list[Sample]], cfg: Config) -> None:
    head = "".join(f" {'r' + str(i + 1):>8}" for i in range(cfg.rounds))
    for title, systems, pairs in (
        (
            f"processing ({cfg.n:,} jobs, {cfg.consumers} consumers, batch {cfg.batch}, no-op)",
            PROCESSING,
            PROCESS_PAIRS,
        ),
        (f"single enqueue ({cfg.single:,} jobs, one caller)", SINGLES, SINGLE_PAIRS),
    ):
        print(f"\n## {title}: jobs/s")
        print(f"{'system':<14} {'median':>8}{head}   rt/job  client CPU us/job")
        for name in systems:
            samples = results[name]
            rates = "".join(f" {s.rate:8,.0f}" for s in samples)
            median = statistics.median(s.rate for s in samples)
            rt = statistics.median(s.statements / s.jobs for s in samples)
            cpu = statistics.median(s.client_cpu / s.jobs for s in samples) * 1e6
            print(f"{name:<14} {median:8,.0f}{rates}   {rt:6.3f}  {cpu:17.1f}")
        print("ratio (per round, median):")
        for ours, theirs in pairs:
            ratios = [a.rate / b.rate for a, b in zip(results[ours], results[theirs], strict=True)]
            cells = " ".join(f"{r:5.2f}" for r in ratios)
            print(f"  {ours:>13} / {theirs:<13} {statistics.median(ratios):5.2f}   rounds: {cells}")


def recorded_rows(results: dict[str, list[Sample]]) -> list[Row]:
    """Each pair's median ratio (and its rounds' range), with drainpipe's side's median rate
    and client CPU: what ``bench.results`` keeps of a run."""
    rows: list[Row] = []
    for metric, pairs in (("processing", PROCESS_PAIRS), ("single enqueue", SINGLE_PAIRS)):
        for ours, theirs in pairs:
            ratios = [a.rate / b.rate for a, b in zip(results[ours], results[theirs], strict=True)]
            cpu = statistics.median(s.client_cpu / s.jobs for s in results[ours]) * 1e6
            rows.append(
                Row(
                    metric,
                    ours,
                    theirs,
                    ratio=round(statistics.median(ratios), 3),
                    ratio_range=(round(min(ratios), 3), round(max(ratios), 3)),
                    value=round(statistics.median(s.rate for s in results[ours])),
                    unit="jobs/s",
                    note=f"client CPU {cpu:.1f} µs a job",
                )
            )
    return rows


def server_version(url: str) -> str:
    with psycopg.connect(url) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return str(row[0]).split()[0] if row else "?"


def profile(urls: dict[str, str], cfg: Config, storage: str) -> None:
    """cProfile drainpipe's single enqueue (DSN) and its drain on one backend, and the raw
    sync loops beside them: where the client CPU per job goes."""
    url = urls[storage]
    singles = [payload(i) for i in range(cfg.single)]
    raw = "raw-send" if storage == "pgmq" else "raw-insert"
    for system in (raw, f"dp-{storage}-dsn", f"dp-{storage}"):
        asyncio.run(run_sql(url, f"TRUNCATE {tables_of(system)}"))
        profiler = cProfile.Profile()
        loop = asyncio.new_event_loop()
        try:
            if system == raw:
                with psycopg.connect(url, autocommit=True) as conn:
                    raw_singles(conn, system, singles[:50])
                    profiler.enable()
                    sample = timed(raw_singles, conn, system, singles)
                    profiler.disable()
            elif system.endswith("-dsn"):
                enqueuer = loop.run_until_complete(Enqueuer.open(url, on_pool=False))
                loop.run_until_complete(dp_singles(enqueuer, singles[:50]))
                profiler.enable()
                sample = timed(loop.run_until_complete, dp_singles(enqueuer, singles))
                profiler.disable()
                loop.run_until_complete(enqueuer.close())
            else:
                fill(url, system, cfg.n)
                pool = loop.run_until_complete(open_pool(url, cfg.consumers + 1))
                profiler.enable()
                sample = timed(
                    loop.run_until_complete,
                    async_process(pool, url, system, cfg.consumers, cfg.batch),
                )
                profiler.disable()
                loop.run_until_complete(pool.close())
        finally:
            loop.close()
        print(
            f"\n== cProfile {system}: {sample.jobs} jobs, {sample.rate:,.0f} jobs/s and"
            f" {sample.client_cpu / sample.jobs * 1e6:.1f} us client CPU/job under the profiler =="
        )
        stats = pstats.Stats(profiler)
        print_by_package(stats, sample.jobs)
        stats.sort_stats("tottime").print_stats(16)


PACKAGES = ("drainpipe", "psycopg_pool", "psycopg", "pydantic", "asyncio", "bench")


def print_by_package(stats: pstats.Stats, jobs: int) -> None:
    """Function calls and profiled seconds per job, by the package the function lives in:
    call counts do not move with the machine's load, seconds do."""
    calls: dict[str, int] = dict.fromkeys((*PACKAGES, "other"), 0)
    seconds: dict[str, float] = dict.fromkeys((*PACKAGES, "other"), 0.0)
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    for (filename, _line, _name), (_cc, ncalls, tottime, _ct, _callers) in table.items():
        package = next((p for p in PACKAGES if f"/{p}/" in filename), "other")
        calls[package] += ncalls
        seconds[package] += tottime
    print(
        "per job: "
        + ", ".join(
            f"{p} {calls[p] / jobs:.0f} calls {seconds[p] / jobs * 1e6:.0f} us"
            for p in calls
            if calls[p]
        )
    )


def parse_args(argv: Sequence[str] | None) -> Config:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=20_000, help="jobs per processing run")
    parser.add_argument("--single", type=int, default=2_000, help="jobs per single-enqueue run")
    parser.add_argument("--consumers", type=int, default=5)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="2,000 jobs, 200 singles, 2 rounds")
    parser.add_argument(
        "--profile", choices=["pgmq", "table"], help="cProfile enqueue and drain instead"
    )
    parser.add_argument(
        "--no-record", action="store_true", help="do not append the run to bench/results/"
    )
    args = parser.parse_args(argv)
    record = not (args.no_record or args.quick)
    cfg = Config(args.n, args.single, args.consumers, args.batch, args.rounds, args.profile, record)
    if args.quick:
        cfg.n, cfg.single, cfg.rounds = 2_000, 200, 2
    return cfg


def main(argv: Sequence[str] | None = None) -> int:
    cfg = parse_args(argv)
    count_statements()
    tag = uuid.uuid4().hex[:8]
    started = time.perf_counter()
    urls = asyncio.run(create_databases(f"thr_{tag}"))
    try:
        for url in (urls["table"],):
            asyncio.run(
                run_sql(
                    url,
                    f"""CREATE TABLE {KEEP_TABLE} (
                        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                        payload jsonb NOT NULL,
                        attempts integer NOT NULL DEFAULT 0,
                        visible_at timestamptz NOT NULL DEFAULT now(),
                        done_at timestamptz)""",
                    f"CREATE INDEX {KEEP_TABLE}_ready_idx ON {KEEP_TABLE} (visible_at, id)"
                    " WHERE done_at IS NULL",
                    f"CREATE INDEX {KEEP_TABLE}_done_idx ON {KEEP_TABLE} (done_at)"
                    " WHERE done_at IS NOT NULL",
                )
            )
        print(
            f"# bench.threaded: {cfg.n:,} jobs, {cfg.consumers} consumers, batch {cfg.batch},"
            f" {cfg.rounds} rounds, python {sys.version.split()[0]}"
        )
        if cfg.profile is not None:
            profile(urls, cfg, cfg.profile)
            return 0
        results: dict[str, list[Sample]] = {name: [] for name in PROCESSING + SINGLES}
        warm = Config(500, 50, cfg.consumers, cfg.batch, 1)
        one_round(urls, warm, 0, {name: [] for name in results})
        for index in range(cfg.rounds):
            one_round(urls, cfg, index, results)
            print(f"  round {index + 1}/{cfg.rounds} ({time.perf_counter() - started:.0f} s)")
        report(results, cfg)
        if cfg.record:
            machine = describe_machine(server_version(urls["table"]))
            path = append_run("bench.threaded", recorded_rows(results), machine=machine)
            print(
                f"\nrecorded in {path}; refresh the page: python -m bench.results --write docs/benchmarks.md"
            )
    finally:
        asyncio.run(drop_databases(urls))
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
