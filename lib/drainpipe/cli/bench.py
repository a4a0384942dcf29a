"""``drainpipe bench``: measure drainpipe on your own Postgres, in a database it makes and drops.

The command connects with ``--database-url``, creates ``drainpipe_bench_<random>`` on that
server (it needs ``CREATEDB``), installs the jobs module there with the chosen storage and
runs four phases, each timed and with a progress bar on stderr:

* ``enqueue (batch)``: ``--jobs`` jobs through ``enqueue_many``, ``--batch`` at a call;
* ``enqueue (single)``: ``--jobs`` jobs, one ``enqueue`` call each;
* ``processing``: ``drain`` of everything enqueued, ``--workers`` lanes, ``--batch`` a claim;
* ``latency``: ``work`` runs while ``--latency-jobs`` jobs are enqueued at ``--rate`` a
  second; each job's delay is from its enqueue call to its handler's start.

Then it prints a table (jobs/s, p50/p99 of the phase's calls or delays in ms, and this
process's CPU per job) and drops the database, also after an error or Ctrl-C. With
``--hold-snapshot`` a second session holds an old snapshot in that database through every
phase (what a long report query or a forgotten ``psql`` session does to vacuum).

A database that holds drainpipe's tables is refused unless ``--force``: a bench loads the
server it runs on, and that one serves an application. Nothing is ever written to it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar, TextIO

from ..errors import DrainpipeError
from .ops import UsageError

QUEUE = "bench"
INVALID_OPTION = "INVALID_OPTION"
DATABASE_HOLDS_DRAINPIPE = "DATABASE_HOLDS_DRAINPIPE"
CREATEDB_DENIED = "CREATEDB_DENIED"
_BAR_WIDTH = 30


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    """The options; values are checked by :func:`options` (one line with a code, exit 2)."""
    parser.add_argument(
        "--database-url", default=None, metavar="URL", help="the server (default $DATABASE_URL)"
    )
    parser.add_argument("--backend", default="pgmq", metavar="pgmq|table", help="default pgmq")
    parser.add_argument("--jobs", default="10000", metavar="N", help="jobs a phase (10000)")
    parser.add_argument("--workers", default="4", metavar="C", help="lanes processing (4)")
    parser.add_argument("--batch", default="100", metavar="N", help="jobs a call (100)")
    parser.add_argument(
        "--latency-jobs",
        default="200",
        metavar="N",
        help="jobs in the latency phase (200; 0: skip)",
    )
    parser.add_argument("--rate", default="50", metavar="R", help="latency jobs a second (50)")
    parser.add_argument(
        "--poll-interval",
        default="1",
        metavar="S",
        help="work's poll_interval in the latency phase (1, as work's default)",
    )
    parser.add_argument(
        "--hold-snapshot", action="store_true", help="hold an old snapshot through every phase"
    )
    parser.add_argument(
        "--force", action="store_true", help="run even when the database holds drainpipe's tables"
    )


@dataclass(frozen=True)
class Options:
    database_url: str
    backend: str
    jobs: int
    workers: int
    batch: int
    latency_jobs: int
    rate: float
    poll_interval: float
    hold_snapshot: bool
    force: bool


def _bad(option: str, rule: str, text: str) -> UsageError:
    return UsageError(f"invalid_request {INVALID_OPTION}: {option} {rule} (got {text!r})")


def _whole(option: str, text: str, low: int, high: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise _bad(option, f"takes a whole number from {low:,} to {high:,}", text)
    return value


def _number(option: str, text: str, low: float, high: float) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and low < value <= high):
        raise _bad(option, f"takes a number above {low:g}, at most {high:g}", text)
    return value


def options(args: argparse.Namespace, database_url: str) -> Options:
    """The checked options: a bad value is a :class:`UsageError` naming it, with a code."""
    if args.backend not in ("pgmq", "table"):
        raise _bad("--backend", "is pgmq or table", args.backend)
    return Options(
        database_url=database_url,
        backend=args.backend,
        jobs=_whole("--jobs", args.jobs, 1, 1_000_000),
        workers=_whole("--workers", args.workers, 1, 64),
        batch=_whole("--batch", args.batch, 1, 1000),
        latency_jobs=_whole("--latency-jobs", args.latency_jobs, 0, 100_000),
        rate=_number("--rate", args.rate, 0, 10_000),
        poll_interval=_number("--poll-interval", args.poll_interval, 0, 30),
        hold_snapshot=args.hold_snapshot,
        force=args.force,
    )


# -- measuring --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Phase:
    """One row of the table: jobs, their rate, p50/p99 in ms (None: not measured per call)
    and this process's CPU a job in microseconds."""

    name: str
    jobs: int
    rate: float
    p50: float | None
    p99: float | None
    cpu_us: float


class Progress:
    """A plain-text bar on ``out``, redrawn at most every 0.1 s and once at the end."""

    #: the bar being drawn, ended by whatever prints next after an error or Ctrl-C
    drawing: ClassVar[Progress | None] = None

    def __init__(self, name: str, total: int, out: TextIO) -> None:
        self.name, self.total, self.out = name, max(total, 1), out
        self.done = 0
        self._drawn = 0.0
        Progress.drawing = self
        self.add(0)

    def add(self, count: int) -> None:
        self.done += count
        now = time.monotonic()
        if now - self._drawn >= 0.1 or self.done >= self.total:
            self._drawn = now
            filled = min(_BAR_WIDTH, _BAR_WIDTH * self.done // self.total)
            bar = "#" * filled + "." * (_BAR_WIDTH - filled)
            self.out.write(f"\r{self.name:<18} [{bar}] {self.done:,}/{self.total:,}")
            self.out.flush()

    def end(self) -> None:
        Progress.drawing = None
        self.out.write("\n")
        self.out.flush()


def quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _timed_calls(
    name: str,
    calls: list[Callable[[], Awaitable[Any]]],
    sizes: list[int],
    out: TextIO,
) -> Phase:
    """Run ``calls`` one after another, each timed; ``sizes`` are the jobs each covers."""
    progress = Progress(name, sum(sizes), out)
    took: list[float] = []
    cpu, started = time.process_time(), time.perf_counter()
    for call, size in zip(calls, sizes, strict=True):
        t0 = time.perf_counter()
        await call()
        took.append((time.perf_counter() - t0) * 1000)
        progress.add(size)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    progress.end()
    total = sum(sizes)
    return Phase(
        name, total, total / elapsed, quantile(took, 0.5), quantile(took, 0.99), cpu / total * 1e6
    )


def _payload(n: int) -> dict[str, Any]:
    """About 100 bytes of JSON, a typical small job."""
    return {"user_id": n, "email": f"user{n}@example.com", "template": "welcome", "locale": "en"}


async def _noop(payload: Any, job: Any) -> None:
    return None


async def _processing(jobs: Any, total: int, opts: Options, out: TextIO) -> Phase:
    progress = Progress("processing", total, out)

    async def handler(payload: Any, job: Any) -> None:
        progress.add(1)

    cpu, started = time.process_time(), time.perf_counter()
    report = await jobs.drain(QUEUE, handler, concurrency=opts.workers, batch=opts.batch)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    progress.end()
    done = max(int(report.succeeded), 1)
    return Phase("processing", done, done / elapsed, None, None, cpu / done * 1e6)


async def _latency(jobs: Any, opts: Options, out: TextIO) -> Phase:
    total = opts.latency_jobs
    progress = Progress("latency", total, out)
    delays: list[float] = []
    sent: dict[int, float] = {}
    every = asyncio.Event()

    async def handler(payload: Any, job: Any) -> None:
        delays.append((time.perf_counter() - sent[int(payload["user_id"])]) * 1000)
        progress.add(1)
        if len(delays) >= total:
            every.set()

    stop = asyncio.Event()
    cpu, started = time.process_time(), time.perf_counter()
    worker = asyncio.ensure_future(
        jobs.work(
            QUEUE,
            handler,
            concurrency=opts.workers,
            poll_interval=opts.poll_interval,
            max_poll_interval=opts.poll_interval,
            stop=stop,
        )
    )
    try:
        loop = asyncio.get_running_loop()
        first = loop.time()
        for n in range(total):
            await asyncio.sleep(max(0.0, first + n / opts.rate - loop.time()))
            sent[n] = time.perf_counter()
            await jobs.enqueue(QUEUE, _payload(n))
        # every job is enqueued; the last ones need at most a poll and a claim
        await asyncio.wait_for(every.wait(), opts.poll_interval * 2 + 30)
    finally:
        stop.set()
        await worker
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    progress.end()
    return Phase(
        f"latency ({opts.rate:g}/s)",
        total,
        total / elapsed,
        quantile(delays, 0.5),
        quantile(delays, 0.99),
        cpu / total * 1e6,
    )


async def run_phases(url: str, opts: Options, out: TextIO) -> list[Phase]:
    """The four phases against an installed database at ``url``."""
    from psycopg_pool import AsyncConnectionPool

    from ..jobs.client import Jobs

    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        url, min_size=1, max_size=opts.workers + 2, kwargs={"autocommit": True}, open=False
    )
    await pool.open()
    try:
        jobs = Jobs(pool, {QUEUE: dict[str, Any]})
        if opts.backend == "pgmq":
            async with pool.connection() as conn:
                await conn.execute("SELECT drainpipe.ensure_job_queue_v1(%s)", (QUEUE,))
        # first calls build the payload adapter and the server's plans: not what is measured
        await jobs.enqueue_many(QUEUE, [_payload(0)])
        await jobs.enqueue(QUEUE, _payload(0))
        await jobs.drain(QUEUE, _noop, batch=opts.batch)
        payloads = [_payload(n) for n in range(opts.jobs)]
        chunks = [payloads[i : i + opts.batch] for i in range(0, opts.jobs, opts.batch)]
        phases = [
            await _timed_calls(
                f"enqueue (batch {opts.batch})",
                [partial(jobs.enqueue_many, QUEUE, chunk) for chunk in chunks],
                [len(chunk) for chunk in chunks],
                out,
            ),
            await _timed_calls(
                "enqueue (single)",
                [partial(jobs.enqueue, QUEUE, p) for p in payloads],
                [1] * opts.jobs,
                out,
            ),
        ]
        phases.append(await _processing(jobs, 2 * opts.jobs, opts, out))
        if opts.latency_jobs:
            phases.append(await _latency(jobs, opts, out))
        return phases
    finally:
        await pool.close()


# -- the throw-away database ------------------------------------------------------------------


async def _holds_drainpipe(conn: Any) -> bool:
    cur = await conn.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = 'drainpipe')"
    )
    row = await cur.fetchone()
    return bool(row and row[0])


async def bench(opts: Options, out: TextIO | None = None) -> tuple[str, list[Phase]]:
    """Make the database, install, run the phases, drop it; its name and the phases.
    Progress goes to ``out`` (default: stderr)."""
    out = sys.stderr if out is None else out
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from ..sqlmodules import install
    from . import connect

    admin = await connect(opts.database_url)
    name = f"drainpipe_bench_{uuid.uuid4().hex[:10]}"
    made = False
    holder: Any = None
    try:
        if await _holds_drainpipe(admin) and not opts.force:
            raise DrainpipeError(
                "conflict",
                "this database holds drainpipe's tables: a bench would load the server that"
                " serves them; pass --force to run anyway (it makes its own database)",
                code=DATABASE_HOLDS_DRAINPIPE,
            )
        try:
            await admin.execute(f'CREATE DATABASE "{name}"')
        except psycopg.errors.InsufficientPrivilege as exc:
            raise DrainpipeError(
                "forbidden",
                f"cannot create a database on this server ({exc.diag.message_primary});"
                " drainpipe bench needs a role with CREATEDB",
                code=CREATEDB_DENIED,
            ) from None
        made = True
        out.write(f"drainpipe bench: made database {name}\n")
        params = conninfo_to_dict(opts.database_url)
        params["dbname"] = name
        url = make_conninfo("", **params)
        await install(url, ["jobs"], backend="pgmq" if opts.backend == "pgmq" else "table")
        if opts.hold_snapshot:
            holder = await psycopg.AsyncConnection.connect(url)
            await holder.execute("SET idle_in_transaction_session_timeout = 0")
            await holder.commit()
            await holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            await holder.execute("SELECT txid_current()")
        return name, await run_phases(url, opts, out)
    finally:
        if holder is not None:
            await holder.close()
        if Progress.drawing is not None:
            Progress.drawing.end()
        if made:
            # a Ctrl-C cancels the run: the drop below is still awaited once
            with contextlib.suppress(asyncio.CancelledError):
                await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            out.write(f"drainpipe bench: dropped database {name}\n")
        await admin.close()


def table(opts: Options, phases: list[Phase]) -> str:
    """The result as a Markdown table, with what was run above it."""

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    held = ", snapshot held" if opts.hold_snapshot else ""
    lines = [
        f"backend {opts.backend}, {opts.jobs:,} jobs, {opts.workers} workers,"
        f" batch {opts.batch}{held}",
        "| phase | jobs | jobs/s | p50 ms | p99 ms | client CPU µs/job |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for p in phases:
        lines.append(
            f"| {p.name} | {p.jobs:,} | {p.rate:,.0f} | {ms(p.p50)} | {ms(p.p99)}"
            f" | {p.cpu_us:,.0f} |"
        )
    return "\n".join(lines)


def bench_command(args: argparse.Namespace) -> int:
    from .ops import database_url

    opts = options(args, database_url(args))
    _, phases = asyncio.run(bench(opts))
    print(table(opts, phases))
    return 0
