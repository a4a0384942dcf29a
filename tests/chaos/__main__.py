"""``python -m tests.chaos`` (what ``scripts/chaos`` runs): the long chaos run, or the
CI-sized one with ``--short``, on a throw-away cluster made for the run. Prints the
figures of each backend and of the HTTP fuzz; exits 1 when anything was lost, a stale
completion was accepted, a worker gave up or an entry answered a 5xx."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from drainpipe import install

from .cluster import ThrowawayCluster
from .http_entries import ENTRIES, entry_env
from .http_fuzz import FuzzFigures, fuzz_entry
from .jobs_run import ROLES, JobsPlan, long_plan, run_jobs_chaos
from .ledger import Figures


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/chaos", description=__doc__)
    parser.add_argument("--short", action="store_true", help="the CI sizes (tests/chaos)")
    parser.add_argument("--backends", nargs="+", default=["pgmq", "table"])
    parser.add_argument("--jobs", type=int, help="jobs per backend (default: the plan's)")
    parser.add_argument("--requests", type=int, help="fuzzed requests per HTTP entry")
    parser.add_argument("--entries", nargs="+", help="HTTP entries to fuzz (default: all)")
    parser.add_argument("--seed", type=int, default=19)
    parser.add_argument("--no-jobs", action="store_true", help="the HTTP fuzz only")
    parser.add_argument("--no-http", action="store_true", help="the jobs run only")
    return parser.parse_args(argv)


async def _fuzz_database(cluster: ThrowawayCluster) -> str:
    async with await psycopg.AsyncConnection.connect(cluster.dsn(), autocommit=True) as admin:
        for role in ROLES:
            with contextlib.suppress(psycopg.errors.DuplicateObject):
                await admin.execute(f"CREATE ROLE {role} NOLOGIN")
        await admin.execute("DROP DATABASE IF EXISTS chaos_http WITH (FORCE)")
        await admin.execute("CREATE DATABASE chaos_http")
    url = cluster.dsn("chaos_http")
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await install(conn, ["jobs", "idempotency", "webhook-inbox"])
    return url


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],  # noqa: S607
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


async def main(argv: list[str]) -> int:
    args = _arguments(argv)
    # the pool's reconnect warnings during the outage are expected, not news
    logging.getLogger("psycopg.pool").setLevel(logging.CRITICAL)
    plan = JobsPlan() if args.short else long_plan()
    plan.seed = args.seed
    if args.jobs:
        plan.jobs = args.jobs
    requests = args.requests or (300 if args.short else 2500)
    print(
        f"drainpipe chaos run, commit {_commit()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    print(f"plan: {plan}")
    cluster = ThrowawayCluster().init()
    cluster.start()
    print(f"throw-away cluster on port {cluster.port} ({cluster.bin})", flush=True)
    job_figures: list[Figures] = []
    fuzz_figures: list[FuzzFigures] = []
    logs = Path(tempfile.mkdtemp(prefix="drainpipe-chaos-logs-"))
    try:
        if not args.no_jobs:
            for backend in args.backends:
                figures = await run_jobs_chaos(cluster, backend, plan, logs / backend)
                job_figures.append(figures)
                print("\n".join(figures.lines()), flush=True)
        if not args.no_http:
            env = entry_env(await _fuzz_database(cluster))
            for entry in ENTRIES:
                if args.entries and entry.name not in args.entries:
                    continue
                started = time.monotonic()
                fuzz = await fuzz_entry(entry, env, requests=requests, seed=args.seed)
                fuzz_figures.append(fuzz)
                print(f"fuzz {fuzz.line()} in {time.monotonic() - started:.0f} s", flush=True)
                for example in fuzz.examples:
                    print(f"  5xx: {example[:400]}")
    finally:
        cluster.remove()
    failed = [
        f for f in job_figures if f.lost or f.stale_accepted or f.worker_gave_up or f.problems
    ]
    fivexx = sum(f.failures for f in fuzz_figures)
    print(
        f"total: jobs in {sum(f.jobs_in for f in job_figures)}, "
        f"completed {sum(f.completed for f in job_figures)}, dead {sum(f.dead for f in job_figures)}, "
        f"lost {sum(f.lost for f in job_figures)}, "
        f"run more than once {sum(f.run_more_than_once for f in job_figures)}, "
        f"stale completions refused {sum(f.stale_refused for f in job_figures)}, "
        f"stale accepted {sum(f.stale_accepted for f in job_figures)}, "
        f"5xx answers {fivexx} of {sum(f.requests for f in fuzz_figures)} requests"
    )
    if failed or fivexx:
        print(f"worker logs: {logs}")
        return 1
    shutil.rmtree(logs, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
