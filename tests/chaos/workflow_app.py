"""The server of the workflow chaos run: a drain route (``jobs.drain_route``) whose handler is
a long durable workflow, served by uvicorn in a process the run SIGKILLs at random moments.

Each step function writes two lines to the run's log, each one ``write(2)`` to an
``O_APPEND`` file shared by every process of the run (so the lines of all processes are in
one order, and a SIGKILL loses nothing written):

* ``B <queue> <job id> <step> <pid> <nonce> <time>``: the step function began,
* ``D <queue> <job id> <step> <pid> <nonce> <time>``: it ran to its end (returned).

The nonce names one execution of one step function (``<pid>-<counter>``); the function
returns it, so the recorded value of a step says which execution was recorded, and the
handler returns every step's value as the job's kept result (``jobs.result``): what the
ledger compares with the lines (tests/chaos/workflow_ledger.py). A handler run also writes
``H <queue> <job id> <attempt> <pid> <time>`` when it (re)starts.

The workflow's shape comes from its payload alone, the same on every run (replay):
``steps`` steps of ``low``..``high`` seconds (seeded by ``seed``), a durable ``job.sleep``
of ``sleep`` seconds after a quarter and after three quarters of them, and before the
step at ``fanout_at`` (a fraction of them) a ``spawn_many`` of ``children`` jobs on the
``parts`` queue (three steps each) and a ``join``.

``python -m tests.chaos.workflow_app PORT``; the settings come from the environment
(``WF_DSN``, ``WF_SECRET``, ``WF_LOG``, ``WF_BUDGET``, ``WF_STEP_MARGIN``,
``WF_LEASE_MARGIN``, ``WF_CONCURRENCY``).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import sys
import time
from typing import Any

from drainpipe import Job, Jobs

FLOWS = "flows"
PARTS = "parts"
QUEUES: dict[str, Any] = {FLOWS: dict[str, Any], PARTS: dict[str, Any]}
CHILD_STEPS = 3


class StepLog:
    """One ``O_APPEND`` file; each line is one ``write(2)``."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, line: str) -> None:
        os.write(self.fd, f"{line} {time.time():.3f}\n".encode())


def shape(payload: dict[str, Any]) -> list[tuple[str, str, float]]:
    """The workflow's items in order: ``("step", name, seconds)``, ``("sleep", "", seconds)``,
    ``("fanout", "", 0)``; the same for the same payload, on every run."""
    rng = random.Random(payload["seed"])
    count = int(payload["steps"])
    items: list[tuple[str, str, float]] = []
    for k in range(count):
        if k in (count // 4, 3 * count // 4):
            items.append(("sleep", "", float(payload["sleep"])))
        if k == int(count * payload["fanout_at"]):
            items.append(("fanout", "", 0.0))
        items.append(("step", f"s{k:04d}", rng.uniform(payload["low"], payload["high"])))
    return items


class Workflow:
    """The handlers of both queues, writing to one log."""

    def __init__(self, log: StepLog) -> None:
        self.log = log
        self.pid = os.getpid()
        self.counter = itertools.count(1)

    async def _step(self, job: Job[Any], name: str, duration: float) -> str:
        async def body() -> str:
            nonce = f"{self.pid}-{next(self.counter)}"
            where = f"{job.queue} {job.id} {name} {self.pid} {nonce}"
            self.log.write(f"B {where}")
            await asyncio.sleep(duration)  # the step's work: it only waits, CPU stays low
            self.log.write(f"D {where}")
            return nonce

        value: str = await job.step(name, body)
        return value

    async def flow(self, payload: dict[str, Any], job: Job[Any]) -> dict[str, Any]:
        self.log.write(f"H {job.queue} {job.id} {job.attempts} {self.pid}")
        done: dict[str, Any] = {}
        for kind, name, seconds in shape(payload):
            if kind == "step":
                done[name] = await self._step(job, name, seconds)
            elif kind == "sleep":
                await job.sleep(seconds)
            else:
                parts = [
                    {"seed": payload["seed"] * 100 + c, "low": payload["low"],
                     "high": payload["high"]}
                    for c in range(int(payload["children"]))
                ]  # fmt: skip
                ids = await job.spawn_many(PARTS, parts)
                outcomes = await job.join(ids)
                done["children"] = {str(o.id): o.state for o in outcomes}
        return done

    async def part(self, payload: dict[str, Any], job: Job[Any]) -> dict[str, Any]:
        self.log.write(f"H {job.queue} {job.id} {job.attempts} {self.pid}")
        rng = random.Random(payload["seed"])
        done: dict[str, Any] = {}
        for k in range(CHILD_STEPS):
            name = f"c{k}"
            done[name] = await self._step(job, name, rng.uniform(payload["low"], payload["high"]))
        return done


def build_app() -> Any:
    env = os.environ
    jobs = Jobs(env["WF_DSN"], QUEUES)
    workflow = Workflow(StepLog(env["WF_LOG"]))
    return jobs.drain_route(
        secret=env["WF_SECRET"],
        handlers={FLOWS: workflow.flow, PARTS: workflow.part},
        budget=float(env["WF_BUDGET"]),
        step_margin=float(env["WF_STEP_MARGIN"]),
        lease_margin=float(env["WF_LEASE_MARGIN"]),
        concurrency=int(env["WF_CONCURRENCY"]),
        schedules=False,
    )


def main(argv: list[str]) -> None:
    import uvicorn

    uvicorn.run(build_app(), host="127.0.0.1", port=int(argv[0]), log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1:])
