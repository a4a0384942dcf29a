"""Durable workflows through a drain route under SIGKILL (issue 39): the route is served by
a real uvicorn in its own process (tests/chaos/workflow_app.py), a "cron" calls it every
``call_every`` seconds (``POST`` with the secret), and the server is SIGKILLed at random
moments and started again at once, until every workflow has completed. Then the ledger
(tests/chaos/workflow_ledger.py) proves that each step's function ran to its end once per
record, and counts what the kills cost.

    python -m tests.chaos.workflow            # the long run: steps of 1-5 s, a call every
                                              # 60 s with budget=50, 20-25 minutes
    python -m tests.chaos.workflow --short    # the CI sizes (tests/chaos/test_workflow_chaos.py)

Both storages run at once, each with its own database on a throw-away cluster
(tests/chaos/cluster.py), its own server, cron and killer. Results: docs/chaos.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psycopg

from drainpipe import Jobs, install

from .cluster import ThrowawayCluster, free_port
from .jobs_run import ROLES, ROOT
from .workflow_app import CHILD_STEPS, FLOWS, PARTS, QUEUES, StepLog, shape
from .workflow_ledger import WorkflowFigures, settle

SECRET = "workflow-chaos-cron-secret-0123456789abcdef"


@dataclasses.dataclass
class WorkflowPlan:
    """The CI sizes by default; :func:`long_plan` for the issue's."""

    workflows: int = 3  # per storage, all in flight at once
    steps: int = 60  # per workflow, plus two sleeps and a fan-out of `children`
    low: float = 0.1  # seconds a step takes: uniform in low..high
    high: float = 0.3
    sleep: float = 1.0  # each of the two durable sleeps
    children: int = 2
    fanout_at: float = 0.0  # where the fan-out is, as a fraction of the steps
    call_every: float = 2.5  # the cron
    budget: float = 2.0
    step_margin: float = 0.4  # more than a step: none is cut by the end of a call
    lease_margin: float = 1.0
    concurrency: int = 4  # the route's: every workflow and a child at once
    kill_every: tuple[float, float] = (6.0, 12.0)
    pauses: tuple[float, ...] = (12.0,)  # seconds from the start: a SIGSTOP past the lease
    timeout: float = 240.0
    seed: int = 19


def long_plan() -> WorkflowPlan:
    """Steps of 1-5 s (200 a workflow: ~10 minutes of steps, 20-25 minutes through
    the route), a call every 60 s with the default budget of 50 s and step margin of 5 s, a kill
    every 1-3 minutes."""
    return WorkflowPlan(
        steps=200,
        low=1.0,
        high=5.0,
        sleep=20.0,
        fanout_at=0.5,
        call_every=60.0,
        budget=50.0,
        step_margin=5.0,
        # a killed call's jobs are free again 8 s after its budget ended, before the next
        # call (the default 30 s would make each kill cost a second minute)
        lease_margin=8.0,
        kill_every=(60.0, 180.0),
        pauses=(420.0,),
        timeout=3000.0,
    )


def _popen(command: list[str], env: dict[str, str], out: Path) -> subprocess.Popen[bytes]:
    with out.open("wb") as sink:
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=sink, stderr=sink)  # noqa: S603


class Server:
    """One serving uvicorn process at a time, the one the cron calls. A killed one is
    replaced at once on the same port. A paused one (SIGSTOP) is replaced by a new process
    on a new port (a second instance, as a platform scales out), and resumed (SIGCONT) once
    its leases ran out: its step functions then end, and their records must be refused."""

    def __init__(self, dsn: str, plan: WorkflowPlan, logs: Path, log: StepLog) -> None:
        self.plan, self.logs, self.log = plan, logs, log
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.killed: set[int] = set()
        self.paused: set[int] = set()
        self.held: list[subprocess.Popen[bytes]] = []  # paused ones, stopped at the end
        self.lock = asyncio.Lock()  # a kill and a pause never cross
        self.env = {
            **os.environ,
            "WF_DSN": dsn,
            "WF_SECRET": SECRET,
            "WF_LOG": str(logs / "steps.log"),
            "WF_BUDGET": str(plan.budget),
            "WF_STEP_MARGIN": str(plan.step_margin),
            "WF_LEASE_MARGIN": str(plan.lease_margin),
            "WF_CONCURRENCY": str(plan.concurrency),
        }

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    async def start(self) -> None:
        self.starts += 1
        out = self.logs / f"server-{self.starts}.out"
        command = [sys.executable, "-m", "tests.chaos.workflow_app", str(self.port)]
        process = self.process = _popen(command, self.env, out)
        self.log.write(f"U {process.pid}")
        async with httpx.AsyncClient(timeout=2.0) as client:
            for _ in range(600):  # a busy machine may take seconds to start Python
                with contextlib.suppress(httpx.TransportError):
                    await client.get(self.url)  # 401 without the secret: it serves
                    return
                if process.poll() is not None:
                    raise RuntimeError(f"the server exited: see {out}")
                await asyncio.sleep(0.1)
        raise RuntimeError("the server did not serve within 60 s")

    async def kill(self) -> None:
        async with self.lock:
            process = self.process
            assert process is not None
            self.killed.add(process.pid)
            process.send_signal(signal.SIGKILL)
            await asyncio.to_thread(process.wait)
            self.log.write(f"K {process.pid}")
            await self.start()

    async def pause(self) -> None:
        """SIGSTOP the serving process in the middle of a step, serve from a new process
        meanwhile, and SIGCONT the old one (a stale holder) the moment the new one begins
        that same step again: the old one's step then ends while the new one runs it, and
        its record must be refused (the attempt's fence). No kill happens meanwhile."""
        plan = self.plan
        async with self.lock:
            process = self.process
            assert process is not None
            held = await self._open_steps(lambda pid: pid == process.pid)
            self.paused.add(process.pid)
            self.held.append(process)
            process.send_signal(signal.SIGSTOP)
            self.log.write(f"P {process.pid}")
            self.port = free_port()
            await self.start()
            # its leases (at most the budget plus the margin) run out, then a cron call to
            # the new process takes a job over and runs the held step again
            await self._open_steps(
                lambda pid: pid != process.pid,
                among=held,
                within=plan.budget + plan.lease_margin + 4 * plan.call_every + 10.0,
            )
            process.send_signal(signal.SIGCONT)
            self.log.write(f"C {process.pid}")
            # its handlers wake up stale: let them try to record, then stop it
            await asyncio.sleep(plan.high * 2 + 1.0)
        await asyncio.to_thread(self._end, process)

    async def _open_steps(
        self, whose: Callable[[int], bool], among: set[str] | None = None, within: float = 60.0
    ) -> set[str]:
        """Wait (up to ``within`` seconds) until a process ``whose`` pid is in the middle of
        a step (one of ``among``: ``<queue> <job> <step>``); those steps."""
        until = time.monotonic() + within
        while time.monotonic() < until:
            open_steps: set[str] = set()
            for line in (self.logs / "steps.log").read_text().splitlines():
                fields = line.split()
                if len(fields) == 7 and fields[0] in "BD" and whose(int(fields[4])):
                    step = " ".join(fields[1:4])
                    (open_steps.add if fields[0] == "B" else open_steps.discard)(step)
            if among is not None:
                open_steps &= among
            if open_steps:
                return open_steps
            await asyncio.sleep(0.05)
        return set()

    @staticmethod
    def _end(process: subprocess.Popen[bytes]) -> None:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def stop(self) -> None:
        for process in [*self.held, *([self.process] if self.process else [])]:
            self._end(process)


class WorkflowChaos:
    def __init__(self, cluster: ThrowawayCluster, storage: str, plan: WorkflowPlan, logs: Path):
        self.cluster, self.storage, self.plan = cluster, storage, plan
        self.logs = logs / storage
        self.dbname = f"chaos_workflow_{storage}"
        self.dsn = cluster.dsn(self.dbname)
        self.figures = WorkflowFigures(storage)
        self.random = random.Random(f"{plan.seed}-{storage}")
        self.calls: list[asyncio.Task[None]] = []

    async def prepare(self) -> None:
        async with await psycopg.AsyncConnection.connect(self.cluster.dsn(), autocommit=True) as a:
            for role in ROLES:
                # both storages' runs start at once: the other one may be creating it too
                with contextlib.suppress(
                    psycopg.errors.DuplicateObject, psycopg.errors.UniqueViolation
                ):
                    await a.execute(f"CREATE ROLE {role} NOLOGIN")
            await a.execute(f'DROP DATABASE IF EXISTS "{self.dbname}" WITH (FORCE)')
            await a.execute(f'CREATE DATABASE "{self.dbname}"')
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
            await install(conn, ["jobs"], backend=self.storage)  # type: ignore[arg-type]

    def payload(self, w: int) -> dict[str, Any]:
        p = self.plan
        return {"seed": p.seed * 1000 + w, "steps": p.steps, "low": p.low, "high": p.high,
                "sleep": p.sleep, "children": p.children, "fanout_at": p.fanout_at}  # fmt: skip

    async def run(self) -> WorkflowFigures:
        await self.prepare()
        self.logs.mkdir(parents=True, exist_ok=True)
        log = StepLog(str(self.logs / "steps.log"))
        server = Server(self.dsn, self.plan, self.logs, log)
        jobs = Jobs(self.dsn, QUEUES)
        started = time.monotonic()
        try:
            await server.start()
            flows = {}
            for w in range(self.plan.workflows):
                payload = self.payload(w)
                [job_id] = await jobs.enqueue_many(FLOWS, [payload], max_attempts=100)
                flows[int(job_id)] = payload
            tasks = [
                asyncio.create_task(self.cron(server)),
                asyncio.create_task(self.killer(server)),
                asyncio.create_task(self.pauser(server, started)),
            ]
            try:
                await asyncio.wait_for(self.until_done(jobs, list(flows)), self.plan.timeout)
            except TimeoutError:
                self.figures.problems.append(f"not finished within {self.plan.timeout:.0f} s")
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                for call in self.calls:
                    call.cancel()
                await asyncio.gather(*self.calls, return_exceptions=True)
                server.stop()
            self.figures.seconds = time.monotonic() - started
            self.figures.server_starts = server.starts
            self.figures.kills = len(server.killed)
            self.figures.pauses = len(server.paused)
            return await self.count(jobs, flows, server.killed, server.paused)
        finally:
            server.stop()
            await jobs.close()

    async def until_done(self, jobs: Jobs, flows: list[int]) -> None:
        while True:
            await asyncio.sleep(min(5.0, self.plan.call_every))
            states = [(await jobs.get(FLOWS, job_id)) for job_id in flows]
            if all(r is not None and r.state in ("succeeded", "dead", "cancelled") for r in states):
                return

    async def cron(self, server: Server) -> None:
        """A call every ``call_every`` seconds, whether or not the last one answered."""
        tick = time.monotonic()
        async with httpx.AsyncClient(timeout=self.plan.budget + 60.0) as client:
            while True:
                self.calls.append(asyncio.create_task(self.call(client, server)))
                tick += self.plan.call_every
                await asyncio.sleep(max(0.0, tick - time.monotonic()))

    async def call(self, client: httpx.AsyncClient, server: Server) -> None:
        figures = self.figures
        figures.calls += 1
        try:
            answer = await client.post(server.url, headers={"Authorization": f"Bearer {SECRET}"})
        except httpx.TransportError:
            figures.calls_failed += 1
            return
        if answer.status_code >= 500:
            figures.calls_5xx += 1
        elif answer.status_code == 200:
            figures.calls_ok += 1
            figures.calls_more += bool(answer.json().get("more"))
        else:
            figures.problems.append(f"the route answered {answer.status_code}: {answer.text}")

    async def killer(self, server: Server) -> None:
        while True:
            await asyncio.sleep(self.random.uniform(*self.plan.kill_every))
            await server.kill()

    async def pauser(self, server: Server, started: float) -> None:
        for offset in self.plan.pauses:
            await asyncio.sleep(max(0.0, started + offset - time.monotonic()))
            await server.pause()

    async def count(
        self,
        jobs: Jobs,
        flows: dict[int, dict[str, Any]],
        killed: set[int],
        paused: set[int],
    ) -> WorkflowFigures:
        expected: dict[tuple[str, int], list[str]] = {}
        results: dict[tuple[str, int], tuple[str, Any]] = {}
        child_names = [f"c{k}" for k in range(CHILD_STEPS)]
        for job_id, payload in flows.items():
            expected[(FLOWS, job_id)] = [name for kind, name, _ in shape(payload) if kind == "step"]
            record = await jobs.get(FLOWS, job_id)
            result = await jobs.result(FLOWS, job_id)
            results[(FLOWS, job_id)] = (record.state if record else "missing", result)
            children = result.get("children", {}) if isinstance(result, dict) else {}
            if len(children) != self.plan.children:
                self.figures.problems.append(f"flow {job_id} joined {len(children)} children")
            for child in children:
                child_record = await jobs.get(PARTS, int(child))
                expected[(PARTS, int(child))] = child_names
                results[(PARTS, int(child))] = (
                    child_record.state if child_record else "missing",
                    await jobs.result(PARTS, int(child)),
                )
        lines = (self.logs / "steps.log").read_text().splitlines()
        return settle(self.figures, lines, expected, results, killed, paused)


async def run_workflow_chaos(
    cluster: ThrowawayCluster, storages: list[str], plan: WorkflowPlan, logs: Path
) -> list[WorkflowFigures]:
    """Every storage at once, each with its own server, cron and killer."""
    return list(
        await asyncio.gather(*(WorkflowChaos(cluster, s, plan, logs).run() for s in storages))
    )


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.workflow", description=__doc__)
    parser.add_argument("--short", action="store_true", help="the CI sizes")
    parser.add_argument("--storages", nargs="+", default=["pgmq", "table"])
    parser.add_argument("--steps", type=int, help="steps per workflow (default: the plan's)")
    parser.add_argument("--seed", type=int, default=19)
    parser.add_argument("--logs", type=Path, help="keep the logs here (default: a temp dir)")
    return parser.parse_args(argv)


async def _main(argv: list[str]) -> int:
    args = _arguments(argv)
    plan = WorkflowPlan() if args.short else long_plan()
    plan.seed = args.seed
    if args.steps:
        plan.steps = args.steps
    logs = args.logs or Path(tempfile.mkdtemp(prefix="drainpipe-workflow-chaos-"))
    cluster = ThrowawayCluster().init()
    cluster.start()
    try:
        print(f"logs: {logs}; plan: {plan}", flush=True)
        all_figures = await run_workflow_chaos(cluster, args.storages, plan, logs)
    finally:
        cluster.remove()
    failed = False
    for figures in all_figures:
        print("\n".join(figures.lines()))
        for failure in figures.failures():
            print(f"  FAILED: {failure}")
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    import logging

    logging.getLogger("psycopg.pool").setLevel(logging.CRITICAL)
    sys.exit(asyncio.run(_main(sys.argv[1:])))
