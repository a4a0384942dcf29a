"""Steady processing with and without a session that holds an old snapshot.

    python -m bench.held_snapshot                        # 60 s per run, 5 systems x 2 runs
    python -m bench.held_snapshot --seconds 30 --systems dp-pgmq dp-table
    python -m bench.held_snapshot --quick                # ~10 s per run, 2.5 s windows

A long report query, a forgotten ``psql`` session or a lagging replication slot holds the
xmin horizon back: vacuum can then remove no row version that died after it, and a queue
whose claim walks its index from the oldest end reads more dead entries with every claim.
Each run here gets a fresh database (dropped at the end) and:

* keeps the backlog between ``--low`` and ``--high`` jobs (a producer tops it up in batches);
* runs ``--consumers`` loops that claim ``--batch`` jobs (the agent inbox: 10, its most),
  settle them, and claim again; each claim is timed;
* runs ``VACUUM`` on the database every ``--vacuum-every`` seconds (what autovacuum would do;
  this server runs without it);
* with ``held``: a second session in the same database runs
  ``BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT txid_current();`` before the clock starts
  and stays idle in that transaction until the end;
* the first consumer claims through a session with ``auto_explain`` loaded (ANALYZE,
  BUFFERS, nested statements) and explains one claim early (after ``--early`` s) and one
  late (in the last window): the buffers the whole claim touched (shared hit + read), and
  its plans with ``--plans FILE``. (A session of its own, claiming only then, would measure
  a claim whose connection has no recent bound: drainpipe's claims keep one per
  connection.)

Systems: ``dp-pgmq`` and ``dp-table`` (``Jobs.claim`` + the backend's batch complete, the
calls ``work`` makes), ``raw-pgmq`` (``pgmq.read`` + ``pgmq.archive(ids[])``),
``raw-skip-keep`` (a ``FOR UPDATE SKIP LOCKED`` claim on a table that keeps its rows: done
rows get ``done_at``, the claim index covers the others) and ``agents`` (the agent inbox:
``next(max=10)`` + ``ack`` of each event, fed through the webhook inbox).

The table gives, per system, the ratios the storage goal is stated in: held / unheld jobs/s,
the held run's last window / first window, claim p50 of the held run's last window / the
unheld run's p50, and the late claim's buffers held / unheld. ``--record`` appends them to
``bench/results/held_snapshot.jsonl``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))

import drainpipe  # noqa: E402
from bench.results import Row, append_run, describe_machine  # noqa: E402
from bench.run import SERVER, payload, with_database  # noqa: E402
from drainpipe.backends.capabilities import SupportsCompleteMany  # noqa: E402

SYSTEMS = ("dp-pgmq", "dp-table", "raw-pgmq", "raw-skip-keep", "agents")
#: storage shapes measured against raw-skip-keep, not drainpipe's (see the classes)
PROTOTYPES = ("raw-skip-bound", "raw-skip-split")
QUEUE = "held"
LEASE = 30
SECRET = "held-snapshot-bench-secret-0123456789"  # noqa: S105 - a throw-away database
EXPLAIN_SETTINGS = (
    "SET auto_explain.log_min_duration = -1; SET auto_explain.log_analyze = on;"
    " SET auto_explain.log_buffers = on; SET auto_explain.log_nested_statements = on;"
    " SET client_min_messages = log"
)
_BUFFERS = re.compile(r"Buffers: shared(?: hit=(\d+))?(?: read=(\d+))?")


@dataclass
class Config:
    seconds: float
    window: float
    consumers: int
    batch: int
    low: int
    high: int
    vacuum_every: float
    early: float
    systems: list[str]
    record: bool
    plans: Path | None


@dataclass
class Claim:
    at: float  # seconds since the clock started, at the claim's end
    took: float  # seconds
    jobs: int


@dataclass
class Probe:
    """One explained claim: the buffers it touched and the plans auto_explain logged."""

    at: float
    buffers: int
    plans: list[str]


@dataclass
class Run:
    system: str
    held: bool
    seconds: float
    claims: list[Claim] = field(default_factory=list)
    probes: list[Probe] = field(default_factory=list)

    @property
    def done(self) -> int:
        return sum(claim.jobs for claim in self.claims)

    def windows(self, width: float) -> list[tuple[float, float, float]]:
        """Per window: jobs/s, claim p50 and p99 in ms (of the claims that found jobs)."""
        count = max(1, int(self.seconds // width))
        out = []
        for index in range(count):
            inside = [c for c in self.claims if index * width <= c.at < (index + 1) * width]
            took = sorted(c.took * 1000 for c in inside if c.jobs) or [0.0]
            out.append(
                (
                    sum(c.jobs for c in inside) / width,
                    statistics.median(took),
                    took[min(len(took) - 1, int(len(took) * 0.99))],
                )
            )
        return out

    def p50(self) -> float:
        took = [c.took * 1000 for c in self.claims if c.jobs] or [0.0]
        return statistics.median(took)


# -- the systems ---------------------------------------------------------------------------


class System:
    """A queue to fill, claim from and settle; ``claim`` returns opaque items to ``settle``."""

    storage = "pgmq"
    modules: Sequence[str] = ("jobs",)

    def __init__(self, url: str, cfg: Config) -> None:
        self.url = url
        self.cfg = cfg

    async def setup(self, pool: AsyncConnectionPool[Any]) -> None:
        return None

    async def fill(self, conn: psycopg.AsyncConnection[Any], count: int) -> None:
        raise NotImplementedError

    async def claim(self, pool: AsyncConnectionPool[Any]) -> list[Any]:
        raise NotImplementedError

    async def settle(self, pool: AsyncConnectionPool[Any], items: list[Any]) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        return None


class Drainpipe(System):
    def __init__(self, url: str, cfg: Config, storage: str) -> None:
        super().__init__(url, cfg)
        self.storage = storage
        self._jobs: dict[int, drainpipe.Jobs] = {}

    def jobs(self, pool: AsyncConnectionPool[Any]) -> drainpipe.Jobs:
        if id(pool) not in self._jobs:
            self._jobs[id(pool)] = drainpipe.Jobs(pool, {QUEUE: dict})
        return self._jobs[id(pool)]

    async def setup(self, pool: AsyncConnectionPool[Any]) -> None:
        if self.storage == "pgmq":  # the table storage needs no queue made first
            async with pool.connection() as conn:
                await conn.execute("SELECT drainpipe.ensure_job_queue_v1(%s)", (QUEUE,))

    async def fill(self, conn: psycopg.AsyncConnection[Any], count: int) -> None:
        # the producer's own connection: its pool would compete with the consumers'
        pool = AsyncConnectionPool(self.url, min_size=1, max_size=1, open=False)
        await pool.open()
        try:
            await self.jobs(pool).enqueue_many(QUEUE, [payload(i) for i in range(count)])
        finally:
            self._jobs.pop(id(pool), None)
            await pool.close()

    async def claim(self, pool: AsyncConnectionPool[Any]) -> list[Any]:
        return await self.jobs(pool).claim(QUEUE, batch=self.cfg.batch, lease=LEASE)

    async def settle(self, pool: AsyncConnectionPool[Any], items: list[Any]) -> None:
        backend = self.jobs(pool).backend
        assert isinstance(backend, SupportsCompleteMany)
        assert all(await backend.complete_many(items))


class RawPgmq(System):
    async def setup(self, pool: AsyncConnectionPool[Any]) -> None:
        async with pool.connection() as conn:
            await conn.execute("SELECT pgmq.create(%s)", (QUEUE,))

    async def fill(self, conn: psycopg.AsyncConnection[Any], count: int) -> None:
        await conn.execute(
            "SELECT pgmq.send_batch(%s, %s::jsonb[])",
            (QUEUE, [Jsonb(payload(i)) for i in range(count)]),
        )

    async def claim(self, pool: AsyncConnectionPool[Any]) -> list[Any]:
        async with pool.connection() as conn:
            cur = await conn.execute(
                "SELECT msg_id, message FROM pgmq.read(%s, %s, %s)", (QUEUE, LEASE, self.cfg.batch)
            )
            return [row[0] for row in await cur.fetchall()]

    async def settle(self, pool: AsyncConnectionPool[Any], items: list[Any]) -> None:
        async with pool.connection() as conn:
            await conn.execute("SELECT pgmq.archive(%s, %s::bigint[])", (QUEUE, items))


class RawSkipKeep(System):
    storage = "table"
    modules = ()

    async def setup(self, pool: AsyncConnectionPool[Any]) -> None:
        async with pool.connection() as conn:
            await conn.execute(
                """CREATE TABLE bench_keep (
                       id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                       payload jsonb NOT NULL,
                       attempts integer NOT NULL DEFAULT 0,
                       visible_at timestamptz NOT NULL DEFAULT now(),
                       done_at timestamptz)"""
            )
            await conn.execute(
                "CREATE INDEX bench_keep_ready_idx ON bench_keep (visible_at, id)"
                " WHERE done_at IS NULL"
            )
            await conn.execute(
                "CREATE INDEX bench_keep_done_idx ON bench_keep (done_at) WHERE done_at IS NOT NULL"
            )

    async def fill(self, conn: psycopg.AsyncConnection[Any], count: int) -> None:
        await conn.execute(
            "INSERT INTO bench_keep (payload) SELECT unnest(%s::jsonb[])",
            ([Jsonb(payload(i)) for i in range(count)],),
        )

    async def claim(self, pool: AsyncConnectionPool[Any]) -> list[Any]:
        async with pool.connection() as conn:
            cur = await conn.execute(
                """WITH c AS (
                       SELECT id FROM bench_keep WHERE done_at IS NULL AND visible_at <= now()
                        ORDER BY visible_at, id LIMIT %s FOR UPDATE SKIP LOCKED)
                   UPDATE bench_keep b
                      SET visible_at = now() + make_interval(secs => %s), attempts = b.attempts + 1
                     FROM c WHERE b.id = c.id
                   RETURNING b.id, b.payload""",
                (self.cfg.batch, LEASE),
            )
            return [row[0] for row in await cur.fetchall()]

    async def settle(self, pool: AsyncConnectionPool[Any], items: list[Any]) -> None:
        async with pool.connection() as conn:
            await conn.execute(
                "UPDATE bench_keep SET done_at = now() WHERE id = ANY(%s) AND done_at IS NULL",
                (items,),
            )


class RawSkipBound(RawSkipKeep):
    """``raw-skip-keep`` whose claim starts at a bound: the oldest visibility time it last
    picked (kept by this process, shared by its consumers), with a pass from the index's start
    at most once a ``FULL_PASS`` seconds (it finds what a bound can hide: a job committed after
    a later one was claimed, a claim rolled back). Measures the bound alone: leases still
    move ``visible_at``, so every claim still adds an entry to the claimed index."""

    FULL_PASS = 1.0

    def __init__(self, url: str, cfg: Config) -> None:
        super().__init__(url, cfg)
        self.bound: Any = None
        self.full_at = 0.0

    def bounded(self) -> tuple[str, tuple[Any, ...]]:
        if self.bound is None or time.perf_counter() - self.full_at > self.FULL_PASS:
            self.full_at = time.perf_counter()
            return "", ()
        return " AND visible_at >= %s", (self.bound,)

    def picked(self, rows: list[Any]) -> list[Any]:
        if rows:
            self.bound = min(row[1] for row in rows)
        return [row[0] for row in rows]

    async def claim(self, pool: AsyncConnectionPool[Any]) -> list[Any]:
        where, args = self.bounded()
        async with pool.connection() as conn:
            cur = await conn.execute(
                f"""WITH c AS (
                       SELECT id, visible_at FROM bench_keep
                        WHERE done_at IS NULL AND visible_at <= now(){where}
                        ORDER BY visible_at, id LIMIT %s FOR UPDATE SKIP LOCKED)
                   UPDATE bench_keep b
                      SET visible_at = now() + make_interval(secs => %s), attempts = b.attempts + 1
                     FROM c WHERE b.id = c.id
                   RETURNING b.id, c.visible_at""",
                (*args, self.cfg.batch, LEASE),
            )
            return self.picked(await cur.fetchall())


class RawSkipSplit(RawSkipBound):
    """``raw-skip-bound`` with the lease out of the claimed index: a claim sets
    ``leased_until`` (the ready index covers rows without one) and leaves ``visible_at``; so
    the ready index only ever gets an entry when a job is enqueued or comes back. Lapsed
    leases come back through their own index, swept at most once a ``FULL_PASS`` seconds from
    the previous sweep's time less ``LEASE_SLACK`` (what a claim committing late could hide),
    each ``SWEEP_EVERY`` sweeps from the index's start."""

    LEASE_SLACK = 5.0
    SWEEP_EVERY = 30

    def __init__(self, url: str, cfg: Config) -> None:
        super().__init__(url, cfg)
        self.swept_at: Any = None
        self.sweeps = 0
        self.sweeping = False

    async def setup(self, pool: AsyncConnectionPool[Any]) -> None:
        async with pool.connection() as conn:
            await conn.execute(
                """CREATE TABLE bench_keep (
                       id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                       payload jsonb NOT NULL,
                       attempts integer NOT NULL DEFAULT 0,
                       visible_at timestamptz NOT NULL DEFAULT now(),
                       leased_until timestamptz,
                       done_at timestamptz)"""
            )
            await conn.execute(
                "CREATE INDEX bench_keep_ready_idx ON bench_keep (visible_at, id)"
                " WHERE done_at IS NULL AND leased_until IS NULL"
            )
            await conn.execute(
                "CREATE INDEX bench_keep_leased_idx ON bench_keep (leased_until)"
                " WHERE done_at IS NULL AND leased_until IS NOT NULL"
            )
            await conn.execute(
                "CREATE INDEX bench_keep_done_idx ON bench_keep (done_at) WHERE done_at IS NOT NULL"
            )

    async def sweep(self, pool: AsyncConnectionPool[Any]) -> None:
        self.sweeps += 1
        full = self.swept_at is None or self.sweeps % self.SWEEP_EVERY == 0
        where = "" if full else " AND leased_until > %s - make_interval(secs => %s)"
        args = () if full else (self.swept_at, self.LEASE_SLACK)
        async with pool.connection() as conn:
            cur = await conn.execute(
                f"""WITH l AS (
                       SELECT id FROM bench_keep
                        WHERE done_at IS NULL AND leased_until IS NOT NULL
                          AND leased_until <= now(){where}
                        FOR UPDATE SKIP LOCKED)
                   UPDATE bench_keep b SET visible_at = b.leased_until, leased_until = NULL
                     FROM l WHERE b.id = l.id
                   RETURNING now()""",
                args,
            )
            await cur.fetchall()
            cur = await conn.execute("SELECT now()")
            row = await cur.fetchone()
            self.swept_at = row[0] if row else None

    async def claim(self, pool: AsyncConnectionPool[Any]) -> list[Any]:
        where, args = self.bounded()
        if not args and not self.sweeping:  # the once-a-second pass also sweeps leases
            self.sweeping = True
            try:
                await self.sweep(pool)
            finally:
                self.sweeping = False
        async with pool.connection() as conn:
            cur = await conn.execute(
                f"""WITH c AS (
                       SELECT id, visible_at FROM bench_keep
                        WHERE done_at IS NULL AND leased_until IS NULL
                          AND visible_at <= now(){where}
                        ORDER BY visible_at, id LIMIT %s FOR UPDATE SKIP LOCKED)
                   UPDATE bench_keep b
                      SET leased_until = now() + make_interval(secs => %s),
                          attempts = b.attempts + 1
                     FROM c WHERE b.id = c.id
                   RETURNING b.id, c.visible_at""",
                (*args, self.cfg.batch, LEASE),
            )
            return self.picked(await cur.fetchall())


class Agents(System):
    modules = ("jobs", "agent-inbox")

    def __init__(self, url: str, cfg: Config) -> None:
        super().__init__(url, cfg)
        self.inbox_id = ""
        self._agents: dict[int, drainpipe.AgentInboxes] = {}

    def agents(self, pool: AsyncConnectionPool[Any]) -> drainpipe.AgentInboxes:
        if id(pool) not in self._agents:
            self._agents[id(pool)] = drainpipe.AgentInboxes(pool, lease_secret=SECRET)
        return self._agents[id(pool)]

    async def setup(self, pool: AsyncConnectionPool[Any]) -> None:
        agents = self.agents(pool)
        self.inbox_id = await agents.create("bench", lease_seconds=LEASE)
        await agents.subscribe(self.inbox_id, "bench")

    async def fill(self, conn: psycopg.AsyncConnection[Any], count: int) -> None:
        # stored webhooks of the subscribed source: the trigger fans each out to the inbox
        await conn.execute(
            "SELECT drainpipe.receive_webhook_v3('bench', %s || g, 'bench.event',"
            " jsonb_build_object('n', g), '{}', NULL, NULL, 'bench', true)"
            " FROM generate_series(1, %s) g",
            (uuid.uuid4().hex[:8], count),
        )

    async def claim(self, pool: AsyncConnectionPool[Any]) -> list[Any]:
        return list(await self.agents(pool).inbox(self.inbox_id).next(max=10))

    async def settle(self, pool: AsyncConnectionPool[Any], items: list[Any]) -> None:
        agents = self.agents(pool)
        done = await asyncio.gather(*(agents.ack(e.id, e.lease_id or "") for e in items))
        assert all(done)

    async def close(self) -> None:
        for agents in self._agents.values():
            await agents.close()


def make_system(name: str, url: str, cfg: Config) -> System:
    if name == "dp-pgmq":
        return Drainpipe(url, cfg, "pgmq")
    if name == "dp-table":
        return Drainpipe(url, cfg, "table")
    if name == "raw-pgmq":
        return RawPgmq(url, cfg)
    if name == "raw-skip-keep":
        return RawSkipKeep(url, cfg)
    if name == "raw-skip-bound":
        return RawSkipBound(url, cfg)
    if name == "raw-skip-split":
        return RawSkipSplit(url, cfg)
    return Agents(url, cfg)


# -- one run --------------------------------------------------------------------------------


async def admin(sql: str) -> None:
    async with await psycopg.AsyncConnection.connect(SERVER, autocommit=True) as conn:
        await conn.execute(sql)


async def explained_claim(
    system: System, pool: AsyncConnectionPool[Any], notes: list[str]
) -> tuple[list[Any], Probe]:
    """A claim through the auto_explain session (one of the consumers' sessions, so its claim
    is one of theirs, bound and all): every plan it ran, the last the whole call."""
    async with pool.connection() as conn:
        await conn.execute("SET auto_explain.log_min_duration = 0")
    notes.clear()
    try:
        items = await system.claim(pool)
    finally:
        async with pool.connection() as conn:
            await conn.execute("SET auto_explain.log_min_duration = -1")
    plans = list(notes)
    buffers = 0
    if plans:
        match = _BUFFERS.search(plans[-1])
        if match:
            buffers = int(match.group(1) or 0) + int(match.group(2) or 0)
    return items, Probe(at=0.0, buffers=buffers, plans=plans)


async def one_run(name: str, held: bool, cfg: Config) -> Run:
    database = f"drainpipe_held_{uuid.uuid4().hex[:10]}"
    await admin(f'CREATE DATABASE "{database}"')
    url = with_database(SERVER, database)
    system = make_system(name, url, cfg)
    run = Run(name, held, cfg.seconds)
    pools: list[AsyncConnectionPool[Any]] = []
    holder: psycopg.AsyncConnection[Any] | None = None
    try:
        if system.modules:
            await drainpipe.install(url, list(system.modules), backend=system.storage)  # type: ignore[arg-type]
        notes: list[str] = []

        async def configure_explain(conn: psycopg.AsyncConnection[Any]) -> None:
            conn.add_notice_handler(
                lambda diag: (
                    notes.append(diag.message_primary or "")
                    if diag.severity_nonlocalized == "LOG"
                    else None
                )
            )
            await conn.execute("LOAD 'auto_explain'")
            await conn.execute(EXPLAIN_SETTINGS)

        pool = AsyncConnectionPool(
            url,
            min_size=cfg.consumers * 2,
            max_size=cfg.consumers * 2 + 2,
            kwargs={"autocommit": True},
            open=False,
        )
        probe_pool = AsyncConnectionPool(
            url,
            min_size=1,
            max_size=1,
            kwargs={"autocommit": True},
            configure=configure_explain,
            open=False,
        )
        pools += [pool, probe_pool]
        for each in pools:
            await each.open()
        await system.setup(pool)
        producer = await psycopg.AsyncConnection.connect(url, autocommit=True)
        await system.fill(producer, cfg.high)
        async with producer.cursor() as cur:
            await cur.execute("VACUUM ANALYZE")
        if held:
            holder = await psycopg.AsyncConnection.connect(url)
            await holder.execute("SET idle_in_transaction_session_timeout = 0")
            await holder.commit()
            await holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            await holder.execute("SELECT txid_current()")
        backlog = [cfg.high]
        stop = asyncio.Event()
        started = time.perf_counter()

        def now() -> float:
            return time.perf_counter() - started

        probes = [cfg.early, cfg.seconds - min(cfg.window, cfg.seconds) / 2]

        async def consumer(index: int) -> None:
            # the first consumer claims through the auto_explain session and explains its
            # claims at the probe times (early, and in the last window)
            through = probe_pool if index == 0 else pool
            while not stop.is_set():
                if index == 0 and probes and now() >= probes[0]:
                    probes.pop(0)
                    t0 = time.perf_counter()
                    items, found = await explained_claim(system, probe_pool, notes)
                    found.at = now()
                    run.probes.append(found)
                else:
                    t0 = time.perf_counter()
                    items = await system.claim(through)
                run.claims.append(Claim(now(), time.perf_counter() - t0, len(items)))
                if not items:
                    await asyncio.sleep(0.01)
                    continue
                await system.settle(pool, items)
                backlog[0] -= len(items)

        async def produce() -> None:
            while not stop.is_set():
                if backlog[0] < cfg.low:
                    count = cfg.high - backlog[0]
                    await system.fill(producer, count)
                    backlog[0] += count
                else:
                    await asyncio.sleep(0.05)

        async def vacuum() -> None:
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                while not stop.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), cfg.vacuum_every)
                    if not stop.is_set():
                        await conn.execute("VACUUM")

        async def clock() -> None:
            await asyncio.sleep(cfg.seconds)
            stop.set()

        await asyncio.gather(
            clock(), produce(), vacuum(), *(consumer(i) for i in range(cfg.consumers))
        )
        await producer.close()
        return run
    finally:
        if holder is not None:
            with contextlib.suppress(psycopg.Error):
                await holder.rollback()
            await holder.close()
        await system.close()
        for each in pools:
            await each.close()
        await admin(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


# -- report ---------------------------------------------------------------------------------


@dataclass
class Summary:
    system: str
    unheld: float
    held: float
    last_over_first: float
    unheld_p50: float
    held_last_p50: float
    unheld_buffers: int
    held_buffers: int

    @property
    def ratio(self) -> float:
        return self.held / self.unheld if self.unheld else 0.0

    @property
    def p50_ratio(self) -> float:
        return self.held_last_p50 / self.unheld_p50 if self.unheld_p50 else 0.0

    @property
    def buffer_ratio(self) -> float:
        return self.held_buffers / self.unheld_buffers if self.unheld_buffers else 0.0


def summarise(unheld: Run, held: Run, window: float) -> Summary:
    windows = held.windows(window)
    first, last = windows[0][0], windows[-1][0]
    return Summary(
        system=held.system,
        unheld=unheld.done / unheld.seconds,
        held=held.done / held.seconds,
        last_over_first=last / first if first else 0.0,
        unheld_p50=unheld.p50(),
        held_last_p50=windows[-1][1],
        unheld_buffers=unheld.probes[-1].buffers if unheld.probes else 0,
        held_buffers=held.probes[-1].buffers if held.probes else 0,
    )


def print_windows(run: Run, window: float) -> None:
    label = "held" if run.held else "unheld"
    cells = ", ".join(
        f"{rate:,.0f}/s p50 {p50:.1f} p99 {p99:.1f}" for rate, p50, p99 in run.windows(window)
    )
    probes = ", ".join(f"{p.buffers:,} buffers at {p.at:.0f} s" for p in run.probes)
    print(f"  {run.system} {label}: {run.done / run.seconds:,.0f} jobs/s; windows: {cells}")
    print(f"    explained claims: {probes or 'none'}")


def print_table(summaries: Sequence[Summary]) -> None:
    print(
        "\n| system | unheld jobs/s | held jobs/s | held / unheld | held: last / first window"
        " | claim p50 unheld → held last window, ms | p50 ratio"
        " | late claim buffers unheld → held | buffers ratio |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for s in summaries:
        print(
            f"| {s.system} | {s.unheld:,.0f} | {s.held:,.0f} | {s.ratio:.2f}"
            f" | {s.last_over_first:.2f} | {s.unheld_p50:.1f} → {s.held_last_p50:.1f}"
            f" | {s.p50_ratio:.1f} | {s.unheld_buffers:,} → {s.held_buffers:,}"
            f" | {s.buffer_ratio:.1f} |"
        )
    print(
        "goal for drainpipe's storages: held / unheld ≥ 0.6, last / first ≥ 0.7,"
        " p50 ratio ≤ 3, buffers ratio < 10"
    )


def rows(summaries: Sequence[Summary], cfg: Config) -> list[Row]:
    return [
        Row(
            metric=f"jobs/s with a snapshot held {cfg.seconds:g} s",
            system=s.system,
            baseline="unheld",
            ratio=round(s.ratio, 2),
            value=round(s.held),
            unit="jobs/s",
            note=(
                f"unheld {s.unheld:,.0f}/s; last/first window {s.last_over_first:.2f};"
                f" claim p50 {s.unheld_p50:.1f} → {s.held_last_p50:.1f} ms;"
                f" late claim {s.unheld_buffers:,} → {s.held_buffers:,} buffers"
            ),
        )
        for s in summaries
    ]


def write_plans(path: Path, runs: Sequence[Run]) -> None:
    with path.open("w", encoding="utf-8") as out:
        for run in runs:
            for probe in run.probes:
                label = "held" if run.held else "unheld"
                out.write(f"=== {run.system} {label}: claim at {probe.at:.1f} s, ")
                out.write(f"{probe.buffers} buffers ===\n")
                out.write("\n---\n".join(probe.plans) + "\n\n")


async def main_async(cfg: Config) -> list[Summary]:
    print(
        f"{cfg.seconds:g} s a run, {cfg.consumers} consumers, batch {cfg.batch},"
        f" backlog {cfg.low:,}-{cfg.high:,}, VACUUM every {cfg.vacuum_every:g} s;"
        f" {describe_machine()}"
    )
    summaries, runs = [], []
    for name in cfg.systems:
        pair = {}
        for held in (False, True):
            run = await one_run(name, held, cfg)
            print_windows(run, cfg.window)
            pair[held] = run
            runs.append(run)
        summaries.append(summarise(pair[False], pair[True], cfg.window))
    print_table(summaries)
    if cfg.plans is not None:
        write_plans(cfg.plans, runs)
        print(f"plans: {cfg.plans}")
    if cfg.record:
        print(f"recorded: {append_run('bench.held_snapshot', rows(summaries, cfg))}")
    return summaries


def parse_args(argv: Sequence[str] | None = None) -> Config:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seconds", type=float, default=60.0, help="each run (default 60)")
    parser.add_argument("--window", type=float, default=10.0, help="seconds a window (10)")
    parser.add_argument("--consumers", type=int, default=5)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--low", type=int, default=10_000, help="top the backlog up below")
    parser.add_argument("--high", type=int, default=20_000, help="top the backlog up to")
    parser.add_argument("--vacuum-every", type=float, default=5.0)
    parser.add_argument("--early", type=float, default=3.0, help="the early explained claim")
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS + PROTOTYPES, default=list(SYSTEMS))
    parser.add_argument("--quick", action="store_true", help="10 s runs, 2.5 s windows")
    parser.add_argument("--record", action="store_true", help="append to bench/results/")
    parser.add_argument("--plans", type=Path, default=None, help="write the claims' plans")
    args = parser.parse_args(argv)
    seconds, window = (10.0, 2.5) if args.quick else (args.seconds, args.window)
    return Config(
        seconds=seconds,
        window=min(window, seconds),
        consumers=args.consumers,
        batch=args.batch,
        low=args.low,
        high=args.high,
        vacuum_every=args.vacuum_every,
        early=min(args.early, seconds / 3),
        systems=args.systems,
        record=args.record and not args.quick,
        plans=args.plans,
    )


def main(argv: Sequence[str] | None = None) -> int:
    asyncio.run(main_async(parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
