"""drainpipe next to hand-written SQL loops, side by side, in one run.

    python -m bench.run                 # full run (~3-5 minutes)
    python -m bench.run --quick         # smoke run (~30 s)
    python -m bench.run --modes cold    # one mode: throughput, latency, cold, scale

Five systems, on two fresh databases (the jobs module's functions differ per backend, so
one database per backend), all dropped at the end:

* ``raw-pgmq``  ``pgmq.send`` / ``pgmq.send_batch``, ``pgmq.read`` + ``pgmq.archive(ids[])``
* ``raw-table`` a plain table: INSERT, ``FOR UPDATE SKIP LOCKED`` claim, DELETE by ids
* ``skiplocked-archive`` the same loop keeping completed rows, as drainpipe's table backend
  does since jobs became records: the claim index covers unfinished rows only, completion
  sets ``done_at``, and an index on ``done_at`` lets the rows be purged by age
* ``dp-pgmq``   ``drainpipe.Jobs`` on the pgmq backend
* ``dp-table``  ``drainpipe.Jobs`` on the table backend

Rounds are interleaved (every system runs each phase once per round, in a rotating order),
so drift of the machine hits all systems alike; the tables show medians and, per round,
the ratio drainpipe / raw on the same storage. Round trips are counted client-side;
transactions come from ``pg_stat_database.xact_commit`` of the system's database; WAL bytes
from ``pg_current_wal_lsn()``, which is cluster-wide (other activity on the server inflates
it, so the smallest round is shown). CPU per job: this process's own (``process_time``) and,
when the server runs on this machine, its Postgres processes' (``/proc/<pid>/schedstat``),
which shows whether a gap is the client's or the server's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))

import drainpipe  # noqa: E402
from drainpipe import install  # noqa: E402

SERVER = os.environ.get("BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
QUEUE = "q"
RAW_QUEUE = "raw"
ARCHIVE = "skiplocked-archive"
SYSTEMS = ("raw-pgmq", "dp-pgmq", "raw-table", ARCHIVE, "dp-table")
PAIRS = (("dp-pgmq", "raw-pgmq"), ("dp-table", ARCHIVE), ("dp-table", "raw-table"))
#: processing goals per pair (the delete-based loop is reported, not a target: it keeps
#: nothing, drainpipe keeps every job as a record)
PROCESS_GOALS = {("dp-pgmq", "raw-pgmq"): 0.85, ("dp-table", ARCHIVE): 0.85}
RAW_TABLES = {"raw-table": "bench_raw", ARCHIVE: "bench_archive"}
LEASE = 30

ROUND_TRIPS = [0]


class CountingCursor(psycopg.AsyncCursor[Any]):
    """Counts every statement sent (each ``execute`` is one round trip)."""

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        ROUND_TRIPS[0] += 1
        return await super().execute(*args, **kwargs)


class CountingConnection(psycopg.AsyncConnection[Any]):
    """Its cursors count statements; ``connection.execute`` goes through a cursor too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cursor_factory = CountingCursor


def with_database(dsn: str, dbname: str) -> str:
    params = conninfo_to_dict(dsn)
    params["dbname"] = dbname
    return make_conninfo("", **params)


def payload(n: int) -> dict[str, Any]:
    """About 100 bytes of JSON."""
    return {"user_id": n, "email": f"user{n}@example.com", "template": "welcome", "locale": "en-GB"}


async def noop(payload: Any, job: Any = None) -> None:
    return None


# -- the systems -----------------------------------------------------------------------


@dataclass
class System:
    name: str
    url: str
    storage: str  # "pgmq" | "table"

    @property
    def drainpipe(self) -> bool:
        return self.name.startswith("dp-")

    def tables(self) -> list[str]:
        if self.name == "raw-pgmq":
            return [f"pgmq.q_{RAW_QUEUE}", f"pgmq.a_{RAW_QUEUE}"]
        if self.name == "dp-pgmq":
            return [f"pgmq.q_{QUEUE}", f"pgmq.a_{QUEUE}"]
        if self.name in RAW_TABLES:
            return [RAW_TABLES[self.name]]
        return ["drainpipe.job_messages", "drainpipe.job_dead_letters", "drainpipe.job_attempts"]

    def jobs(self, pool: AsyncConnectionPool[Any]) -> Any:
        jobs = drainpipe.Jobs(pool, {QUEUE: dict})
        jobs.validate(QUEUE, payload(0))  # builds the schema adapter outside the clock
        return jobs

    # enqueue ------------------------------------------------------------------------

    async def enqueue_batches(
        self, pool: AsyncConnectionPool[Any], batches: Sequence[list[dict[str, Any]]]
    ) -> None:
        if self.drainpipe:
            jobs = self.jobs(pool)
            for batch in batches:
                await jobs.enqueue_many(QUEUE, batch)
            return
        async with pool.connection() as conn:
            for batch in batches:
                values = [Jsonb(p) for p in batch]
                if self.name == "raw-pgmq":
                    await conn.execute(
                        "SELECT pgmq.send_batch(%s, %s::jsonb[])", (RAW_QUEUE, values)
                    )
                else:
                    await conn.execute(
                        f"INSERT INTO {RAW_TABLES[self.name]} (payload) SELECT unnest(%s::jsonb[])",
                        (values,),
                    )

    async def enqueue_singles(
        self, pool: AsyncConnectionPool[Any], payloads: Sequence[dict[str, Any]]
    ) -> None:
        if self.drainpipe:
            jobs = self.jobs(pool)
            for p in payloads:
                await jobs.enqueue(QUEUE, p)
            return
        async with pool.connection() as conn:
            await self._raw_send_each(conn, payloads)

    async def _raw_send_each(self, conn: Any, payloads: Sequence[dict[str, Any]]) -> None:
        for p in payloads:
            if self.name == "raw-pgmq":
                await conn.execute("SELECT pgmq.send(%s, %s)", (RAW_QUEUE, Jsonb(p)))
            else:
                await conn.execute(
                    f"INSERT INTO {RAW_TABLES[self.name]} (payload) VALUES (%s) RETURNING id",
                    (Jsonb(p),),
                )

    # processing ---------------------------------------------------------------------

    async def raw_claim(self, conn: Any, batch: int) -> list[tuple[Any, ...]]:
        if self.name == "raw-pgmq":
            cur = await conn.execute(
                "SELECT msg_id, message FROM pgmq.read(%s, %s, %s)", (RAW_QUEUE, LEASE, batch)
            )
        elif self.name == ARCHIVE:
            cur = await conn.execute(
                """WITH c AS (
                       SELECT id FROM bench_archive WHERE done_at IS NULL AND visible_at <= now()
                        ORDER BY visible_at, id LIMIT %s FOR UPDATE SKIP LOCKED)
                   UPDATE bench_archive b
                      SET visible_at = now() + make_interval(secs => %s), attempts = b.attempts + 1
                     FROM c WHERE b.id = c.id
                   RETURNING b.id, b.payload""",
                (batch, LEASE),
            )
        else:
            cur = await conn.execute(
                """WITH c AS (
                       SELECT id FROM bench_raw WHERE visible_at <= now()
                        ORDER BY visible_at, id LIMIT %s FOR UPDATE SKIP LOCKED)
                   UPDATE bench_raw b
                      SET visible_at = now() + make_interval(secs => %s), attempts = b.attempts + 1
                     FROM c WHERE b.id = c.id
                   RETURNING b.id, b.payload""",
                (batch, LEASE),
            )
        rows: list[tuple[Any, ...]] = await cur.fetchall()
        return rows

    async def raw_finish(self, conn: Any, ids: list[int]) -> None:
        if self.name == "raw-pgmq":
            await conn.execute("SELECT pgmq.archive(%s, %s::bigint[])", (RAW_QUEUE, ids))
        elif self.name == ARCHIVE:
            await conn.execute(
                "UPDATE bench_archive SET done_at = now() WHERE id = ANY(%s) AND done_at IS NULL",
                (ids,),
            )
        else:
            await conn.execute("DELETE FROM bench_raw WHERE id = ANY(%s)", (ids,))

    async def raw_consumer(
        self,
        pool: AsyncConnectionPool[Any],
        batch: int,
        handler: Callable[[Any], Awaitable[None]],
        *,
        poll: float | None = None,
        stop: asyncio.Event | None = None,
    ) -> int:
        """Claim, run, finish until empty (``poll`` None) or until ``stop`` (polling)."""
        done = 0
        async with pool.connection() as conn:
            while stop is None or not stop.is_set():
                rows = await self.raw_claim(conn, batch)
                if not rows:
                    if poll is None:
                        break
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), poll)  # type: ignore[union-attr]
                    continue
                for row in rows:
                    await handler(row[1])
                await self.raw_finish(conn, [row[0] for row in rows])
                done += len(rows)
        return done

    async def process(self, pool: AsyncConnectionPool[Any], consumers: int, batch: int) -> int:
        if self.drainpipe:
            report = await self.jobs(pool).drain(QUEUE, noop, concurrency=consumers, batch=batch)
            return int(report.succeeded)
        counts = await asyncio.gather(
            *(self.raw_consumer(pool, batch, noop) for _ in range(consumers))
        )
        return sum(counts)

    # latency ------------------------------------------------------------------------

    async def latency(
        self,
        pool: AsyncConnectionPool[Any],
        *,
        rate: float,
        duration: float,
        consumers: int,
        batch: int,
        poll: float,
    ) -> list[float]:
        """Enqueue ``rate`` jobs/s for ``duration`` s while polling workers run them;
        returns the enqueue-to-start delays in seconds (enqueue call start → handler start)."""
        total = int(rate * duration)
        delays: list[float] = []
        all_seen = asyncio.Event()

        async def handler(value: Any, job: Any = None) -> None:
            delays.append(time.time() - float(value["t"]))
            if len(delays) >= total:
                all_seen.set()

        stop = asyncio.Event()
        jobs = self.jobs(pool) if self.drainpipe else None
        if jobs is not None:
            worker: asyncio.Future[Any] = asyncio.ensure_future(
                jobs.work(
                    QUEUE,
                    handler,
                    concurrency=consumers,
                    batch=batch,
                    poll_interval=poll,
                    max_poll_interval=poll,
                    stop=stop,
                    lease=LEASE,
                )
            )
        else:
            worker = asyncio.gather(
                *(
                    self.raw_consumer(pool, batch, handler, poll=poll, stop=stop)
                    for _ in range(consumers)
                )
            )
        loop = asyncio.get_running_loop()
        async with pool.connection() as producer:
            start = loop.time()
            for i in range(total):
                delay = start + i / rate - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                item = {**payload(i), "t": time.time()}
                if jobs is not None:
                    await jobs.enqueue(QUEUE, item)
                else:
                    await self._raw_send_each(producer, [item])
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(all_seen.wait(), 10)
        stop.set()
        await worker
        return delays


# -- databases and measurement -----------------------------------------------------------


async def admin_execute(sql: str, params: Sequence[Any] | None = None) -> list[Any]:
    async with await psycopg.AsyncConnection.connect(SERVER, autocommit=True) as conn:
        cur = await conn.execute(sql, params)
        return await cur.fetchall() if cur.description else []


async def create_databases(tag: str) -> dict[str, str]:
    urls = {}
    for storage in ("pgmq", "table"):
        name = f"drainpipe_bench_{tag}_{storage}"
        await admin_execute(f'CREATE DATABASE "{name}"')
        url = with_database(SERVER, name)
        urls[storage] = url
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await install(conn, ["jobs"], backend="pgmq" if storage == "pgmq" else "table")
            if storage == "pgmq":
                await conn.execute("SELECT pgmq.create(%s)", (RAW_QUEUE,))
                await conn.execute("SELECT drainpipe.ensure_job_queue_v1(%s)", (QUEUE,))
            else:
                await conn.execute(
                    """CREATE TABLE bench_raw (
                           id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                           payload jsonb NOT NULL,
                           attempts integer NOT NULL DEFAULT 0,
                           visible_at timestamptz NOT NULL DEFAULT now())"""
                )
                await conn.execute("CREATE INDEX bench_raw_ready_idx ON bench_raw (visible_at, id)")
                await conn.execute(
                    """CREATE TABLE bench_archive (
                           id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                           payload jsonb NOT NULL,
                           attempts integer NOT NULL DEFAULT 0,
                           visible_at timestamptz NOT NULL DEFAULT now(),
                           done_at timestamptz)"""
                )
                await conn.execute(
                    "CREATE INDEX bench_archive_ready_idx ON bench_archive (visible_at, id)"
                    " WHERE done_at IS NULL"
                )
                await conn.execute(
                    "CREATE INDEX bench_archive_done_idx ON bench_archive (done_at)"
                    " WHERE done_at IS NOT NULL"
                )
    return urls


async def drop_databases(urls: dict[str, str]) -> None:
    for url in urls.values():
        name = conninfo_to_dict(url)["dbname"]
        await admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def run_sql(url: str, *statements: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for sql in statements:
            await conn.execute(sql)


@dataclass
class Sample:
    seconds: float
    jobs: int
    round_trips: int
    xacts: int
    wal_bytes: int
    client_cpu: float = 0.0  # seconds of this process's CPU
    server_cpu: float | None = None  # seconds of the local Postgres processes' CPU
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds if self.seconds > 0 else 0.0


async def wal_position() -> int:
    """The server's WAL position in bytes (cluster-wide)."""
    rows = await admin_execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint")
    return int(rows[0][0])


async def xact_count(url: str) -> int:
    """Committed + rolled back transactions of the database, once every backend of it has
    exited (a backend flushes its statistics when it exits)."""
    name = conninfo_to_dict(url)["dbname"]
    async with await psycopg.AsyncConnection.connect(SERVER, autocommit=True) as conn:
        for _ in range(300):
            cur = await conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND backend_type = %s",
                (name, "client backend"),
            )
            row = await cur.fetchone()
            if row is None or row[0] == 0:
                break
            await asyncio.sleep(0.01)
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        cur = await conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
            (name,),
        )
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])


def postgres_cpu() -> dict[int, int]:
    """CPU nanoseconds of each Postgres process on this machine, from Linux's per-process
    scheduler statistics; empty where there is no /proc. Every local cluster counts, so
    keep other clusters idle while measuring."""
    spent: dict[int, int] = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if (proc / "comm").read_text().strip() == "postgres":
                spent[int(proc.name)] = int((proc / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return spent


def server_cpu_seconds() -> float | None:
    """CPU seconds of the Postgres processes on this machine (:func:`postgres_cpu`; the
    pool's backends live through the measured body); None where none is visible."""
    spent = postgres_cpu()
    return sum(spent.values()) / 1e9 if spent else None


async def measured(
    system: System,
    connections: int,
    body: Callable[[AsyncConnectionPool[Any]], Awaitable[int]],
    *,
    profile: cProfile.Profile | None = None,
) -> Sample:
    """Run ``body`` on a warm pool of its own; time it; count round trips, transactions, WAL."""
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        system.url,
        min_size=connections,
        max_size=connections,
        kwargs={"autocommit": True},
        connection_class=CountingConnection,
        open=False,
    )
    xacts_before = await xact_count(system.url)
    await pool.open(wait=True)
    try:
        wal_before = await wal_position()
        trips_before = ROUND_TRIPS[0]
        if profile is not None:
            profile.enable()
        server_before = server_cpu_seconds()
        client_before = time.process_time()
        started = time.perf_counter()
        jobs = await body(pool)
        seconds = time.perf_counter() - started
        client_cpu = time.process_time() - client_before
        server_after = server_cpu_seconds()
        if profile is not None:
            profile.disable()
        trips = ROUND_TRIPS[0] - trips_before
        wal_after = await wal_position()
    finally:
        await pool.close()
    xacts_after = await xact_count(system.url)
    server_cpu = (
        None if server_before is None or server_after is None else server_after - server_before
    )
    return Sample(
        seconds,
        jobs,
        trips,
        xacts_after - xacts_before,
        wal_after - wal_before,
        client_cpu,
        server_cpu,
    )


async def reset(system: System) -> None:
    await run_sql(system.url, "TRUNCATE " + ", ".join(system.tables()))


async def analyze(system: System) -> None:
    await run_sql(system.url, "ANALYZE " + ", ".join(system.tables()))


# -- throughput and latency rounds -----------------------------------------------------


@dataclass
class Config:
    n: int
    single: int
    consumers: int
    batch: int
    rounds: int
    rate: float
    duration: float
    poll: float
    cold_runs: int
    scale_backlog: int
    scale_claims: int
    modes: set[str]
    profile: str | None
    json_path: str | None


Results = dict[str, dict[str, list[Sample]]]  # phase -> system -> samples per round


def split(items: list[Any], parts: int) -> list[list[Any]]:
    return [items[i::parts] for i in range(parts)]


async def one_round(systems: list[System], cfg: Config, results: Results, index: int) -> None:
    order = systems[index % len(systems) :] + systems[: index % len(systems)]
    conns = cfg.consumers + 1
    for system in order:
        # batch enqueue: `consumers` enqueuers, `batch` payloads per call
        await reset(system)
        items = [payload(i) for i in range(cfg.n)]
        batches = [items[i : i + cfg.batch] for i in range(0, cfg.n, cfg.batch)]

        async def enqueue_batches(
            pool: AsyncConnectionPool[Any], s: System = system, b: list[Any] = batches
        ) -> int:
            parts = split(b, cfg.consumers)
            await asyncio.gather(*(s.enqueue_batches(pool, part) for part in parts))
            return cfg.n

        results["enqueue_many"][system.name].append(await measured(system, conns, enqueue_batches))
        await analyze(system)

        async def process(pool: AsyncConnectionPool[Any], s: System = system) -> int:
            return await s.process(pool, cfg.consumers, cfg.batch)

        sample = await measured(system, conns, process)
        if sample.jobs != cfg.n:
            raise RuntimeError(f"{system.name} processed {sample.jobs} of {cfg.n} jobs")
        results["process"][system.name].append(sample)

        # single enqueue: `consumers` concurrent enqueuers, one job per call
        await reset(system)
        singles = [payload(i) for i in range(cfg.single)]

        async def enqueue_singles(
            pool: AsyncConnectionPool[Any], s: System = system, b: list[Any] = singles
        ) -> int:
            parts = split(b, cfg.consumers)
            await asyncio.gather(*(s.enqueue_singles(pool, part) for part in parts))
            return cfg.single

        results["enqueue"][system.name].append(await measured(system, conns, enqueue_singles))
        await reset(system)
        if "latency" in cfg.modes:
            await latency_round(system, cfg, results)


async def latency_round(system: System, cfg: Config, results: Results) -> None:
    async def body(pool: AsyncConnectionPool[Any], s: System = system) -> int:
        delays = await s.latency(
            pool,
            rate=cfg.rate,
            duration=cfg.duration,
            consumers=cfg.consumers,
            batch=cfg.batch,
            poll=cfg.poll,
        )
        box.append(delays)
        return len(delays)

    box: list[list[float]] = []
    sample = await measured(system, cfg.consumers + 2, body)
    delays = sorted(box[0])
    sample.extra = {"p50": quantile(delays, 0.5), "p99": quantile(delays, 0.99)}
    results["latency"][system.name].append(sample)
    await reset(system)


def quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def empty_drain_round_trips(systems: list[System], cfg: Config) -> dict[str, int]:
    """Round trips of one drain over an empty queue (the drain route's floor)."""
    out = {}
    for system in systems:
        if not system.drainpipe:
            continue
        await reset(system)

        async def body(pool: AsyncConnectionPool[Any], s: System = system) -> int:
            await s.process(pool, cfg.consumers, cfg.batch)
            return 0

        out[system.name] = (await measured(system, cfg.consumers + 1, body)).round_trips
    return out


async def profile_processing(systems: list[System], cfg: Config) -> str:
    """cProfile one drainpipe processing phase (the client side of the gap)."""
    system = next(s for s in systems if s.name == f"dp-{cfg.profile}")
    raw = next(s for s in systems if s.name == f"raw-{cfg.profile}")
    out = io.StringIO()
    for target in (raw, system):
        await reset(target)
        items = [payload(i) for i in range(cfg.n)]
        batches = [items[i : i + cfg.batch] for i in range(0, cfg.n, cfg.batch)]

        async def fill(
            pool: AsyncConnectionPool[Any], s: System = target, b: list[Any] = batches
        ) -> int:
            await s.enqueue_batches(pool, b)
            return cfg.n

        await measured(target, 2, fill)
        await analyze(target)
        profile = cProfile.Profile()

        async def process(pool: AsyncConnectionPool[Any], s: System = target) -> int:
            return await s.process(pool, cfg.consumers, cfg.batch)

        sample = await measured(target, cfg.consumers + 1, process, profile=profile)
        stats = pstats.Stats(profile, stream=out)
        total = getattr(stats, "total_tt", 0.0)
        out.write(
            f"\n== cProfile {target.name}: {sample.rate:,.0f} jobs/s under the profiler,"
            f" {total:.3f} s of client CPU (profiled) for {sample.jobs} jobs ==\n"
        )
        stats.sort_stats("tottime").print_stats(18)
        await reset(target)
    return out.getvalue()


# -- cold start -------------------------------------------------------------------------

COLD_CODE = """
import json, time
t0 = time.perf_counter()
import drainpipe
t1 = time.perf_counter()
async def handler(payload, job):
    return None
jobs = drainpipe.Jobs({url!r}, {{"q": dict}})
route = jobs.drain_route(secret="x-0123456789abcdef0123456789abcdef", handlers={{"q": handler}})
t2 = time.perf_counter()
import sys
heavy = sorted(m for m in ("psycopg", "psycopg_pool", "pydantic", "starlette", "httpx",
                           "supabase", "standardwebhooks", "cronsim") if m in sys.modules)
print(json.dumps({{"import": t1 - t0, "total": t2 - t0, "heavy": heavy}}))
"""


def cold_start(runs: int, url: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib")}
    code = COLD_CODE.format(url=url)
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        proc = subprocess.run(  # noqa: S603 - our own interpreter and code
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
        )
        wall = time.perf_counter() - started
        samples.append({**json.loads(proc.stdout), "wall": wall})
    baseline = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True, env=env)
        baseline.append(time.perf_counter() - started)
    proc = subprocess.run(  # noqa: S603
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    entries = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cumulative, name = _parse_importtime(line)
        entries.append((int(self_us), int(cumulative), name))
    top_level = sorted((e for e in entries if not e[2].startswith(" ")), key=lambda e: -e[1])
    by_self = sorted(entries, key=lambda e: -e[0])
    return {
        "total_ms": statistics.median(s["total"] for s in samples) * 1000,
        "import_ms": statistics.median(s["import"] for s in samples) * 1000,
        "wall_ms": statistics.median(s["wall"] for s in samples) * 1000,
        "python_ms": statistics.median(baseline) * 1000,
        "heavy": samples[0]["heavy"],
        "top_cumulative": [(name.strip(), cum / 1000) for _, cum, name in top_level[:8]],
        "top_self": [(name.strip(), own / 1000) for own, _, name in by_self[:8]],
    }


FUNCTION_COLD_CODE = """
import json, sys, time
t0 = time.perf_counter()
import {module}
t1 = time.perf_counter()
heavy = sorted(m for m in ("psycopg", "psycopg_pool", "pydantic", "starlette", "httpx",
                           "supabase", "standardwebhooks", "cronsim") if m in sys.modules)
print(json.dumps({{"import": t1 - t0, "heavy": heavy}}))
"""


def function_cold_start(runs: int) -> dict[str, dict[str, Any]]:
    """Import time of each deployed function file (``api/*.py``, what Vercel loads on a
    cold start) in fresh processes: median ms and the heavy modules it loaded."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib")}
    env.pop("DATABASE_URL", None)  # importing a function needs no configuration
    out: dict[str, dict[str, Any]] = {}
    for path in sorted((ROOT / "api").glob("*.py")):
        if path.name.startswith("_"):
            continue
        code = FUNCTION_COLD_CODE.format(module=f"api.{path.stem}")
        samples = []
        for _ in range(runs):
            proc = subprocess.run(  # noqa: S603 - our own interpreter and code
                [sys.executable, "-c", code],
                capture_output=True,
                text=True,
                env=env,
                cwd=ROOT,
                check=True,
            )
            samples.append(json.loads(proc.stdout))
        out[f"api/{path.name}"] = {
            "import_ms": statistics.median(s["import"] for s in samples) * 1000,
            "heavy": samples[0]["heavy"],
        }
    return out


def _parse_importtime(line: str) -> tuple[str, str, str]:
    # "import time:       123 |        456 |   package.module"
    body = line.split(":", 1)[1]
    own, cumulative, name = body.split("|", 2)
    # one space after the bar at the top level, two more per nesting level
    return own.strip(), cumulative.strip(), name.rstrip()[1:]


# -- scale ------------------------------------------------------------------------------


async def scale(urls: dict[str, str], cfg: Config) -> dict[str, dict[int, dict[str, float]]]:
    """Claim latency (``drainpipe.claim_jobs``, batch ``cfg.batch``) with a small and a big
    backlog; the claimed jobs are completed (untimed) as a worker would."""
    out: dict[str, dict[int, dict[str, float]]] = {}
    payload = (
        "jsonb_build_object('user_id', g, 'email', 'user' || g || '@example.com',"
        " 'template', 'welcome')"
    )
    message = f"jsonb_build_object('payload', {payload}, 'max_attempts', 5)"
    for storage in ("table", "pgmq"):
        url = urls[storage]
        out[storage] = {}
        for backlog in (1_000, cfg.scale_backlog):
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                if storage == "table":
                    await conn.execute(
                        "TRUNCATE drainpipe.job_messages, drainpipe.job_dead_letters"
                    )
                    await conn.execute(
                        "INSERT INTO drainpipe.job_messages (queue, payload)"
                        f" SELECT %s, {payload} FROM generate_series(1, {backlog}) g",
                        (QUEUE,),
                    )
                    await conn.execute("VACUUM ANALYZE drainpipe.job_messages")
                else:
                    await conn.execute(f"TRUNCATE pgmq.q_{QUEUE}, pgmq.a_{QUEUE}")
                    await conn.execute(
                        f"INSERT INTO pgmq.q_{QUEUE} (vt, message)"
                        f" SELECT now(), {message} FROM generate_series(1, {backlog}) g"
                    )
                    await conn.execute(f"VACUUM ANALYZE pgmq.q_{QUEUE}")
                times = []
                for _ in range(min(cfg.scale_claims, backlog // cfg.batch)):
                    started = time.perf_counter()
                    cur = await conn.execute(
                        "SELECT id, attempts FROM drainpipe.claim_jobs_v1(%s, %s, %s)",
                        (QUEUE, LEASE, cfg.batch),
                    )
                    rows = await cur.fetchall()
                    times.append(time.perf_counter() - started)
                    assert len(rows) == cfg.batch, len(rows)
                    await conn.execute(
                        "SELECT drainpipe.complete_jobs_v1(%s, %s, %s)",
                        (QUEUE, [r[0] for r in rows], [r[1] for r in rows]),
                    )
                out[storage][backlog] = {
                    "p50_ms": quantile(times, 0.5) * 1000,
                    "p90_ms": quantile(times, 0.9) * 1000,
                }
                if storage == "table":
                    await conn.execute(
                        "TRUNCATE drainpipe.job_messages, drainpipe.job_dead_letters"
                    )
                else:
                    await conn.execute(f"TRUNCATE pgmq.q_{QUEUE}, pgmq.a_{QUEUE}")
    return out


# -- report -----------------------------------------------------------------------------


def fmt_rate(value: float) -> str:
    return f"{value:>9,.0f}"


def print_results(results: Results, cfg: Config) -> list[tuple[str, float, float]]:
    """Print the tables; returns (target, measured ratio, goal) rows."""
    checks: list[tuple[str, float, float]] = []
    titles = {
        "enqueue_many": (
            f"batch enqueue ({cfg.n:,} jobs, {cfg.consumers} enqueuers x {cfg.batch}/call)"
        ),
        "enqueue": f"single enqueue ({cfg.single:,} jobs, {cfg.consumers} enqueuers)",
        "process": (
            f"processing ({cfg.n:,} jobs, {cfg.consumers} consumers, batch {cfg.batch}, no-op)"
        ),
    }
    for phase, title in titles.items():
        per = results[phase]
        print(f"\n## {title}: jobs/s")
        head = "".join(f" {'r' + str(i + 1):>9}" for i in range(cfg.rounds))
        print(
            f"{'system':<18} {'median':>9}{head}   rt/job  xact/job  WAL B/job(min)"
            "  CPU us/job: client server"
        )
        for name in SYSTEMS:
            samples = per[name]
            rates = [s.rate for s in samples]
            rt = statistics.median(s.round_trips / s.jobs for s in samples)
            xa = statistics.median(s.xacts / s.jobs for s in samples)
            wal = min(s.wal_bytes / s.jobs for s in samples)
            cells = "".join(" " + fmt_rate(r) for r in rates)
            median = fmt_rate(statistics.median(rates))
            client = statistics.median(s.client_cpu / s.jobs for s in samples) * 1e6
            servers = [s.server_cpu / s.jobs for s in samples if s.server_cpu is not None]
            server = f"{statistics.median(servers) * 1e6:6.1f}" if servers else "     -"
            print(
                f"{name:<18} {median}{cells}   {rt:6.3f}  {xa:8.3f}  {wal:10.0f}"
                f"  {client:17.1f} {server}"
            )
        print("ratio drainpipe / raw (per round, median):")
        pairs = list(PAIRS)
        if phase != "process":
            # the enqueue targets compare with pgmq's own send / send_batch
            pairs.append(("dp-table", "raw-pgmq"))
        for dp, raw in pairs:
            ratios = [a.rate / b.rate for a, b in zip(per[dp], per[raw], strict=True)]
            med = statistics.median(ratios)
            cells = " ".join(f"{r:5.2f}" for r in ratios)
            print(f"  {dp:>8} / {raw:<18} median {med:5.2f}   rounds: {cells}")
            if phase == "process" and (dp, raw) in PROCESS_GOALS:
                checks.append((f"{phase}: {dp} / {raw}", med, PROCESS_GOALS[(dp, raw)]))
            elif phase != "process" and raw == "raw-pgmq":
                checks.append((f"{phase}: {dp} / {raw}", med, 0.8))
    if results["latency"]["raw-pgmq"]:
        print(
            f"\n## enqueue-to-start latency ({cfg.rate:.0f} jobs/s for {cfg.duration:.0f} s,"
            f" poll every {cfg.poll * 1000:.0f} ms, {cfg.consumers} lanes): ms"
        )
        print(f"{'system':<18} {'p50':>7} {'p99':>7}   p50/p99 per round")
        for name in SYSTEMS:
            samples = results["latency"][name]
            p50 = statistics.median(s.extra["p50"] for s in samples) * 1000
            p99 = statistics.median(s.extra["p99"] for s in samples) * 1000
            cells = "  ".join(
                f"{s.extra['p50'] * 1000:.1f}/{s.extra['p99'] * 1000:.1f}" for s in samples
            )
            rt = statistics.median(s.round_trips / max(s.jobs, 1) for s in samples)
            print(f"{name:<18} {p50:7.1f} {p99:7.1f}   {cells}   (rt/job {rt:.2f})")
    return checks


async def main_async(cfg: Config) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    report: dict[str, Any] = {"config": {k: v for k, v in vars(cfg).items() if k != "modes"}}
    checks: list[tuple[str, float, float]] = []
    urls: dict[str, str] = {}
    started = time.perf_counter()
    try:
        urls = await create_databases(tag)
        systems = [
            System("raw-pgmq", urls["pgmq"], "pgmq"),
            System("dp-pgmq", urls["pgmq"], "pgmq"),
            System("raw-table", urls["table"], "table"),
            System(ARCHIVE, urls["table"], "table"),
            System("dp-table", urls["table"], "table"),
        ]
        print(
            f"# drainpipe bench: databases drainpipe_bench_{tag}_{{pgmq,table}}, "
            f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs"
        )
        if "throughput" in cfg.modes or "latency" in cfg.modes:
            results: Results = {
                phase: {name: [] for name in SYSTEMS}
                for phase in ("enqueue_many", "enqueue", "process", "latency")
            }
            # warm-up: server caches, psycopg type loaders, pydantic, plpgsql plans
            warm = Config(
                **{
                    **vars(cfg),
                    "n": 500,
                    "single": 50,
                    "duration": 0.2,
                    "modes": cfg.modes - {"latency"},
                }
            )
            await one_round(systems, warm, {p: {n: [] for n in SYSTEMS} for p in results}, 0)
            for index in range(cfg.rounds):
                await one_round(systems, cfg, results, index)
                elapsed = time.perf_counter() - started
                print(f"  round {index + 1}/{cfg.rounds} done ({elapsed:.0f} s)", flush=True)
            checks += print_results(results, cfg)
            empty = await empty_drain_round_trips(systems, cfg)
            print(f"\nempty drain (concurrency {cfg.consumers}): round trips {empty}")
            report["results"] = {
                phase: {name: [vars(s) for s in samples] for name, samples in per.items()}
                for phase, per in results.items()
            }
            report["empty_drain_round_trips"] = empty
        if cfg.profile:
            print(await profile_processing(systems, cfg))
        if "cold" in cfg.modes:
            cold = cold_start(cfg.cold_runs, urls["pgmq"])
            report["cold"] = cold
            print(f"\n## cold start (median of {cfg.cold_runs} fresh processes)")
            print(
                f"import drainpipe: {cold['import_ms']:.1f} ms; + Jobs + drain_route:"
                f" {cold['total_ms']:.1f} ms; process wall {cold['wall_ms']:.0f} ms"
                f" (bare python {cold['python_ms']:.0f} ms)"
            )
            print(f"heavy modules loaded: {', '.join(cold['heavy']) or 'none'}")
            print(
                "top imports by cumulative ms: "
                + ", ".join(f"{name} {ms:.1f}" for name, ms in cold["top_cumulative"])
            )
            print(
                "top imports by self ms: "
                + ", ".join(f"{name} {ms:.1f}" for name, ms in cold["top_self"])
            )
            checks.append(("cold start ms (goal < 150)", cold["total_ms"], 150))
            functions = function_cold_start(cfg.cold_runs)
            report["cold"]["functions"] = functions
            print(
                "function files (import, median ms): "
                + ", ".join(
                    f"{name} {one['import_ms']:.1f} (heavy: {', '.join(one['heavy']) or 'none'})"
                    for name, one in functions.items()
                )
            )
            if functions:
                slowest = max(one["import_ms"] for one in functions.values())
                checks.append(
                    ("cold start of the slowest function file ms (goal < 150)", slowest, 150)
                )
            from bench.cold_entries import measure as measure_entries

            entries = measure_entries(cfg.cold_runs)
            report["cold"]["entries"] = {
                entry.name: {"import_ms": ms, "error": error} for entry, ms, error in entries
            }
            print(
                "platform entries (import, median ms): "
                + ", ".join(
                    f"{entry.name} {ms:.1f}" if ms is not None else f"{entry.name} error: {error}"
                    for entry, ms, error in entries
                )
            )
            for entry, ms, _ in entries:
                checks.append((f"cold start of {entry.name} ms (goal < 150)", ms or 1e9, 150))
        if "scale" in cfg.modes:
            scaled = await scale(urls, cfg)
            report["scale"] = scaled
            print(f"\n## scale: drainpipe.claim_jobs latency (batch {cfg.batch}), ms")
            for storage, by_size in scaled.items():
                small, big = by_size[1_000], by_size[cfg.scale_backlog]
                ratio = big["p50_ms"] / small["p50_ms"]
                print(
                    f"{storage:<6} backlog 1,000: p50 {small['p50_ms']:.2f}"
                    f" p90 {small['p90_ms']:.2f} | backlog {cfg.scale_backlog:,}:"
                    f" p50 {big['p50_ms']:.2f} p90 {big['p90_ms']:.2f} | ratio {ratio:.2f}"
                )
                checks.append((f"scale {storage}: big/small claim p50 (goal <= 2)", ratio, 2))
    finally:
        if urls:
            await drop_databases(urls)
    if checks:
        print("\n## targets")
        for label, value, goal in checks:
            ok = value <= goal if ("cold" in label or "scale" in label) else value >= goal
            print(f"  [{'ok' if ok else 'MISS'}] {label}: {value:.2f} (goal {goal})")
    report["checks"] = checks
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    return report


def parse_args(argv: Sequence[str] | None = None) -> Config:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=20_000, help="jobs per enqueue_many/processing")
    parser.add_argument("--single", type=int, default=4_000, help="jobs per single enqueue")
    parser.add_argument("--consumers", type=int, default=5, help="consumers and enqueuers")
    parser.add_argument("--batch", type=int, default=100, help="claim and enqueue_many batch size")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rate", type=float, default=200, help="latency phase: jobs/s")
    parser.add_argument("--duration", type=float, default=3, help="latency phase: seconds")
    parser.add_argument("--poll", type=float, default=0.02, help="latency phase: poll interval, s")
    parser.add_argument("--cold-runs", type=int, default=5)
    parser.add_argument("--scale-backlog", type=int, default=1_000_000)
    parser.add_argument("--scale-claims", type=int, default=30)
    parser.add_argument(
        "--modes",
        default="throughput,latency,cold,scale",
        help="comma-separated: throughput, latency, cold, scale",
    )
    parser.add_argument("--profile", choices=["pgmq", "table"], help="cProfile processing")
    parser.add_argument("--quick", action="store_true", help="small sizes, one round (~30 s)")
    parser.add_argument("--json", dest="json_path", help="also write the results as JSON here")
    args = parser.parse_args(argv)
    modes = {m.strip() for m in args.modes.split(",") if m.strip()}
    unknown = modes - {"throughput", "latency", "cold", "scale"}
    if unknown:
        parser.error(f"unknown modes: {', '.join(sorted(unknown))}")
    if "latency" in modes:
        modes.add("throughput")  # latency rounds run inside the interleaved rounds
    cfg = Config(
        n=args.n,
        single=args.single,
        consumers=args.consumers,
        batch=args.batch,
        rounds=args.rounds,
        rate=args.rate,
        duration=args.duration,
        poll=args.poll,
        cold_runs=args.cold_runs,
        scale_backlog=args.scale_backlog,
        scale_claims=args.scale_claims,
        modes=modes,
        profile=args.profile,
        json_path=args.json_path,
    )
    if args.quick:
        cfg.n, cfg.single, cfg.rounds, cfg.duration = 2_000, 400, 1, 1.0
        cfg.cold_runs, cfg.scale_backlog, cfg.scale_claims = 3, 100_000, 10
    return cfg


def main(argv: Sequence[str] | None = None) -> int:
    cfg = parse_args(argv)
    report = asyncio.run(main_async(cfg))
    if cfg.json_path:
        Path(cfg.json_path).write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
