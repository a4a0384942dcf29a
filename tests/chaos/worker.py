"""One chaos worker process: ``jobs.work`` on the chaos queue, writing what happens to a
log file the run reads afterwards (the process may be SIGKILLed at any instant, so every
line is one unbuffered ``write`` to an ``O_APPEND`` file: what was written survives).

Lines (space separated):

* ``S <job id> <attempt> <i>``: a handler started (the job was claimed),
* ``E <job id> <attempt> <i>``: a handler ran to its end,
* ``C <job id> <attempt> <1|0>``: the database accepted (1) or refused (0) a completion
  (the run's probe writes ``C`` for a refusal and ``P <job id> <attempt> <i>`` for an accepted one),
* ``L <job id> <attempt>``: ``on_error`` heard ``LEASE_LOST`` (a stale result dropped),
* ``X <kind> <code>``: any other error ``on_error`` heard (a retried claim, a failed settle),
* ``R <pid>``: connected, about to work,
* ``F <kind> <message>``: ``work`` raised: the worker gave up (a chaos run counts these).

``python -m tests.chaos.worker DSN QUEUE LOG [--concurrency N --batch N --lease S]``;
SIGTERM stops it cleanly.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from drainpipe import DrainpipeError, Job, Jobs, Retry


class Log:
    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, *lines: str) -> None:
        if lines:
            os.write(self.fd, ("\n".join(lines) + "\n").encode())


def record_completions(jobs: Jobs, log: Log) -> None:
    """Wrap the backend's completions so each accepted or refused one is logged (the
    engine settles through the backend directly)."""
    backend: Any = jobs.backend
    complete_one = backend.complete
    complete_many = getattr(backend, "complete_many", None)

    async def complete(job: Job[Any]) -> bool:
        ok = bool(await complete_one(job))
        log.write(f"C {job.id} {job.attempts} {int(ok)}")
        return ok

    async def complete_all(batch: Sequence[Job[Any]]) -> list[bool]:
        assert complete_many is not None
        done = [bool(ok) for ok in await complete_many(batch)]
        log.write(*(f"C {j.id} {j.attempts} {int(ok)}" for j, ok in zip(batch, done, strict=True)))
        return done

    backend.complete = complete
    if complete_many is not None:
        backend.complete_many = complete_all


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("dsn")
    parser.add_argument("queue")
    parser.add_argument("log")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--batch", type=int, default=5)
    parser.add_argument("--lease", type=float, default=2.0)
    parser.add_argument("--max-outage", type=float, default=180.0)
    args = parser.parse_args(argv)
    log = Log(args.log)
    jobs = Jobs(args.dsn, {args.queue: dict[str, Any]})
    record_completions(jobs, log)
    try:
        await jobs.stats([args.queue])  # connected: the run's clock may start
        log.write(f"R {os.getpid()}")
    except DrainpipeError:
        pass  # started while the database is away: work() rides it out
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)

    async def handle(payload: dict[str, Any], job: Job[Any]) -> None:
        log.write(f"S {job.id} {job.attempts} {payload['i']}")
        await asyncio.sleep(payload.get("ms", 0) / 1000)
        if payload.get("poison"):
            raise Retry(after=0.01)  # fails every attempt, quickly: a dead letter in the end
        log.write(f"E {job.id} {job.attempts} {payload['i']}")

    def on_error(error: BaseException, job: Job[Any] | None) -> None:
        if isinstance(error, DrainpipeError) and error.code == "LEASE_LOST" and job is not None:
            log.write(f"L {job.id} {job.attempts}")
        else:
            kind = error.kind if isinstance(error, DrainpipeError) else type(error).__name__
            code = error.code if isinstance(error, DrainpipeError) else None
            log.write(f"X {kind} {code}")

    try:
        await jobs.work(
            args.queue,
            handle,
            concurrency=args.concurrency,
            batch=args.batch,
            lease=args.lease,
            poll_interval=0.05,
            max_poll_interval=0.5,
            stop=stop,
            on_error=on_error,
            max_outage=args.max_outage,
        )
    except Exception as exc:
        kind = exc.kind if isinstance(exc, DrainpipeError) else type(exc).__name__
        log.write(f"F {kind} {str(exc).splitlines()[0] if str(exc) else ''}")
        return 3
    finally:
        await jobs.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
