"""The jobs half of a chaos run: workers in their own processes on a throw-away cluster,
jobs enqueued while the run's hostile events happen, then the figures (tests/chaos/ledger.py).

Events, each on its own schedule (:class:`JobsPlan`): SIGKILL a worker (a new one starts at
once), SIGSTOP one for longer than its lease then SIGCONT it (its results are stale by
then), ``pg_terminate_backend`` every session of the workers, crash the cluster and start
it again after an outage, and a probe that claims a job with a short lease, waits until the
lease has run out, then tries to complete it (the database must refuse when another worker
claimed it meanwhile).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

from drainpipe import DrainpipeError, Jobs, install
from drainpipe.errors import TRANSIENT_KINDS

from .cluster import ThrowawayCluster
from .ledger import Figures, Ledger, settle_figures

ROOT = Path(__file__).resolve().parents[2]
QUEUE = "chaos"
ROLES = ("anon", "authenticated", "service_role")
WORKER_APP = "chaos-worker"


@dataclasses.dataclass
class JobsPlan:
    """Sizes and the times (seconds from the start) of each event."""

    jobs: int = 2000
    produce_seconds: float = 8.0  # enqueues are spread over this long
    workers: int = 3
    concurrency: int = 4
    batch: int = 5
    lease: float = 1.5
    handler_ms: int = 8  # each handler sleeps 0..handler_ms
    poison_every: int = 400  # every n-th job fails each attempt (2 attempts): a dead letter
    kills: tuple[float, ...] = (1.5, 3.5, 7.0)
    kill_every: tuple[float, float] | None = None  # (low, high): kills all run long instead
    pauses: tuple[float, ...] = (2.5,)
    session_kills: tuple[float, ...] = (4.5,)
    outage_at: float | None = 5.5
    outage_seconds: float = 1.5
    probe_every: float = 1.0
    timeout: float = 120.0
    seed: int = 19


def long_plan() -> JobsPlan:
    """``scripts/chaos``: the issue's sizes. 20,000 jobs, a worker SIGKILLed every 1-2 s
    for the whole run, three pauses past the lease, every worker session terminated twice,
    and a 60 s outage of the cluster."""
    return JobsPlan(
        jobs=20_000,
        produce_seconds=100.0,
        workers=4,
        lease=2.0,
        kills=(),
        kill_every=(1.0, 2.0),
        pauses=(15.0, 110.0, 130.0),
        session_kills=(25.0, 120.0),
        outage_at=35.0,
        outage_seconds=60.0,
        timeout=900.0,
    )


class WorkerSlot:
    """One worker process at a time; a killed one is replaced by a new process."""

    def __init__(self, number: int, dsn: str, logs: Path, plan: JobsPlan) -> None:
        self.number, self.dsn, self.logs, self.plan = number, dsn, logs, plan
        self.generation = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.ours = False  # the current process was signalled by us

    def spawn(self) -> None:
        self.generation += 1
        log = self.logs / f"w{self.number}-{self.generation}.log"
        out = (self.logs / f"w{self.number}-{self.generation}.out").open("wb")
        command = [
            sys.executable, "-m", "tests.chaos.worker", self.dsn, QUEUE, str(log),
            "--concurrency", str(self.plan.concurrency), "--batch", str(self.plan.batch),
            "--lease", str(self.plan.lease),
        ]  # fmt: skip
        self.process = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=out)  # noqa: S603
        self.ours = False
        out.close()

    def exited_by_itself(self) -> bool:
        return self.process is not None and self.process.poll() is not None and not self.ours

    def kill(self) -> None:
        assert self.process is not None
        self.ours = True
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        self.spawn()

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.ours = True
        self.process.send_signal(signal.SIGCONT)
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class JobsChaos:
    def __init__(self, cluster: ThrowawayCluster, backend: str, plan: JobsPlan, logs: Path) -> None:
        self.cluster, self.backend, self.plan, self.logs = cluster, backend, plan, logs
        self.dbname = f"chaos_{backend}"
        self.dsn = cluster.dsn(self.dbname)
        self.figures = Figures(backend)
        self.random = random.Random(plan.seed)
        self.enqueued: set[int] = set()
        self.poison: set[int] = set()
        self.produced = asyncio.Event()
        self.finished = asyncio.Event()
        self.slots = [
            WorkerSlot(n, f"{self.dsn}?application_name={WORKER_APP}", logs, plan)
            for n in range(plan.workers)
        ]
        # the first worker is never killed or paused: it must live through the outage and
        # the session kills, and work after them
        self.survivor = self.slots[0]
        self.victims = self.slots[1:] or self.slots
        self.survivor_log_at_outage_end: int | None = None

    # -- set-up --------------------------------------------------------------------------

    async def prepare(self) -> None:
        admin = await psycopg.AsyncConnection.connect(self.cluster.dsn(), autocommit=True)
        try:
            for role in ROLES:
                with contextlib.suppress(psycopg.errors.DuplicateObject):
                    await admin.execute(f"CREATE ROLE {role} NOLOGIN")
            await admin.execute(f'DROP DATABASE IF EXISTS "{self.dbname}" WITH (FORCE)')
            await admin.execute(f'CREATE DATABASE "{self.dbname}"')
        finally:
            await admin.close()
        conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
        try:
            await install(conn, ["jobs"], backend=self.backend)  # type: ignore[arg-type]
        finally:
            await conn.close()

    # -- the run -------------------------------------------------------------------------

    async def run(self) -> Figures:
        await self.prepare()
        self.logs.mkdir(parents=True, exist_ok=True)
        for slot in self.slots:
            slot.spawn()
        await self.workers_ready()
        started = time.monotonic()
        jobs = Jobs(self.dsn, {QUEUE: dict[str, Any]})
        # the run ends once the queue is empty and every scheduled event has happened
        scheduled = [
            asyncio.create_task(self.pause_workers(started)),
            asyncio.create_task(self.kill_sessions(started)),
            asyncio.create_task(self.outage(started)),
        ]
        if self.plan.kill_every is None:
            scheduled.append(asyncio.create_task(self.kill_workers(started)))
        tasks = [
            *scheduled,
            asyncio.create_task(self.produce(jobs, started)),
            asyncio.create_task(self.watch(jobs, scheduled)),
            asyncio.create_task(self.probe(started)),
            asyncio.create_task(self.keep_workers_alive()),
        ]
        if self.plan.kill_every is not None:
            tasks.append(asyncio.create_task(self.kill_workers(started)))
        try:
            await asyncio.wait_for(self.finished.wait(), self.plan.timeout)
        except TimeoutError:
            self.figures.problems.append(f"not finished within {self.plan.timeout:.0f} s")
        finally:
            self.finished.set()
            for task in tasks:
                task.cancel()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            for slot in self.slots:
                slot.stop()
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
                self.figures.problems.append(f"the run itself failed: {result!r}")
        self.figures.seconds = time.monotonic() - started
        try:
            return await self.count(jobs)
        finally:
            await jobs.close()

    async def workers_ready(self, within: float = 60.0) -> None:
        """The clock starts once every worker has connected (a loaded machine may take
        seconds to start a Python process)."""
        until = time.monotonic() + within
        while time.monotonic() < until:
            ready = [
                slot
                for slot in self.slots
                if (self.logs / f"w{slot.number}-{slot.generation}.log").exists()
                and "R " in (self.logs / f"w{slot.number}-{slot.generation}.log").read_text()
            ]
            if len(ready) == len(self.slots):
                return
            await asyncio.sleep(0.1)
        self.figures.problems.append(f"the workers were not connected within {within:.0f} s")

    async def at(self, started: float, offset: float) -> None:
        await asyncio.sleep(max(0.0, started + offset - time.monotonic()))

    async def produce(self, jobs: Jobs, started: float) -> None:
        plan = self.plan
        pending = list(range(plan.jobs))
        spacing = plan.produce_seconds / max(1, plan.jobs)

        async def one_producer() -> None:
            while pending:
                i = pending.pop(0)
                await self.at(started, i * spacing)
                poison = plan.poison_every > 0 and i % plan.poison_every == plan.poison_every - 1
                payload = {"i": i, "ms": self.random.randint(0, plan.handler_ms)}
                if poison:
                    payload["poison"] = True
                    self.poison.add(i)
                while True:
                    try:
                        # a dedupe key makes a retry after an unanswered enqueue harmless
                        await jobs.enqueue(
                            QUEUE, payload, dedupe_key=f"job-{i}", max_attempts=2 if poison else 10
                        )
                        break
                    except DrainpipeError as exc:
                        if exc.kind not in TRANSIENT_KINDS:
                            raise
                        await asyncio.sleep(0.2)
                self.enqueued.add(i)

        await asyncio.gather(*(one_producer() for _ in range(8)))
        self.produced.set()

    async def watch(self, jobs: Jobs, scheduled: list[asyncio.Task[None]]) -> None:
        """Finished once everything was enqueued, every scheduled event has happened and
        nothing is left in the queue."""
        await self.produced.wait()
        await asyncio.wait(scheduled)
        while True:
            await asyncio.sleep(0.3)
            try:
                stats = (await jobs.stats([QUEUE]))[QUEUE]
            except DrainpipeError:
                continue
            if stats.ready + stats.in_flight + stats.delayed == 0:
                self.finished.set()
                return

    async def keep_workers_alive(self) -> None:
        while True:
            await asyncio.sleep(0.2)
            for slot in self.slots:
                if slot.exited_by_itself():
                    self.figures.worker_gave_up += 1
                    slot.spawn()

    async def kill_workers(self, started: float) -> None:
        if self.plan.kill_every is not None:
            while True:
                await asyncio.sleep(self.random.uniform(*self.plan.kill_every))
                self.random.choice(self.victims).kill()
                self.figures.worker_kills += 1
        for offset in self.plan.kills:
            await self.at(started, offset)
            self.random.choice(self.victims).kill()
            self.figures.worker_kills += 1

    async def pause_workers(self, started: float) -> None:
        for offset in self.plan.pauses:
            await self.at(started, offset)
            slot = self.random.choice(self.victims)
            assert slot.process is not None
            slot.process.send_signal(signal.SIGSTOP)
            try:
                await asyncio.sleep(self.plan.lease * 2 + 0.5)  # its leases run out meanwhile
            finally:
                slot.process.send_signal(signal.SIGCONT)
            self.figures.worker_pauses += 1

    async def kill_sessions(self, started: float) -> None:
        for offset in self.plan.session_kills:
            await self.at(started, offset)
            for _ in range(50):  # every worker may be starting again right now: try again
                async with await psycopg.AsyncConnection.connect(
                    self.cluster.dsn(), autocommit=True
                ) as admin:
                    cur = await admin.execute(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                        " WHERE datname = %s AND application_name = %s",
                        (self.dbname, WORKER_APP),
                    )
                    row = await cur.fetchone()
                terminated = int(row[0]) if row else 0
                self.figures.sessions_terminated += terminated
                if terminated:
                    break
                await asyncio.sleep(0.1)

    async def outage(self, started: float) -> None:
        if self.plan.outage_at is None:
            return
        await self.at(started, self.plan.outage_at)
        down = time.monotonic()
        await asyncio.to_thread(self.cluster.crash)
        try:
            await asyncio.sleep(self.plan.outage_seconds)
        finally:
            await asyncio.to_thread(self.cluster.start)
        self.figures.outages += 1
        self.figures.outage_seconds += time.monotonic() - down
        self.survivor_log_at_outage_end = self.survivor_log().stat().st_size

    def survivor_log(self) -> Path:
        return self.logs / f"w{self.survivor.number}-{self.survivor.generation}.log"

    async def probe(self, started: float) -> None:
        """Claim a job with a short lease, let it run out, then try to complete it."""
        log = (self.logs / "probe.log").open("a")
        prober = Jobs(self.dsn, {QUEUE: dict[str, Any]})
        try:
            while True:
                await asyncio.sleep(self.plan.probe_every)
                try:
                    claimed = await prober.claim(QUEUE, lease=0.2)
                    if not claimed:
                        continue
                    [job] = claimed
                    await asyncio.sleep(0.2 + self.plan.lease)  # a worker takes it meanwhile
                    accepted = await prober.complete(job)
                except DrainpipeError as exc:
                    if exc.kind not in TRANSIENT_KINDS:
                        raise
                    continue
                # accepted: nobody had claimed it since, so this completion was the real one
                tag = f"P {job.id} {job.attempts} {job.payload['i']}"
                log.write((tag if accepted else f"C {job.id} {job.attempts} 0") + "\n")
                log.flush()
        finally:
            log.close()
            await prober.close()

    # -- the figures ---------------------------------------------------------------------

    async def count(self, jobs: Jobs) -> Figures:
        dead: set[int] = set()
        cursor = None
        while page := await jobs.list_dead(QUEUE, limit=1000, cursor=cursor):
            dead |= {int(job.payload["i"]) for job in page}
            cursor = page[-1].id
        stats = (await jobs.stats([QUEUE]))[QUEUE]
        ledger = Ledger().read(sorted(self.logs.glob("*.log")))
        if len(self.slots) > 1:
            self.count_survivor()
        return settle_figures(
            self.figures,
            ledger,
            enqueued=self.enqueued,
            dead=dead,
            poison=self.poison,
            remaining=stats.ready + stats.in_flight + stats.delayed,
        )

    def count_survivor(self) -> None:
        """Did the one worker never killed live through everything, and work afterwards?"""
        figures = self.figures
        figures.survivor_processes = self.survivor.generation
        if self.survivor_log_at_outage_end is not None:
            with self.survivor_log().open("rb") as log:
                log.seek(self.survivor_log_at_outage_end)
                after = log.read().decode().splitlines()
            figures.survivor_jobs_after_outage = sum(1 for line in after if line.startswith("E "))
        if self.survivor.generation != 1:
            figures.problems.append("the worker never killed exited and was started again")


async def run_jobs_chaos(
    cluster: ThrowawayCluster, backend: str, plan: JobsPlan, logs: Path
) -> Figures:
    return await JobsChaos(cluster, backend, plan, logs).run()


if os.name != "posix":  # signals and pg_ctl as used here
    raise ImportError("the chaos run needs a POSIX system")
