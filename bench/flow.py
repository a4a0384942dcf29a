"""Flow control (docs/flow-control.md): what the limits cost, and whether a rate holds.

    python -m bench.flow                      # 200,000 queued jobs; ~3 minutes
    python -m bench.flow --backlog 1000000    # the issue's backlog (slow to build here)
    python -m bench.flow --quick              # smoke run

Per storage (pgmq, table), each on a fresh database dropped at the end:

* ``backlog``: two queues with the same backlog straight into storage (``--backlog`` jobs
  over 10,000 keys, interleaved), one limited by ``key_concurrency=1`` with the first job
  of half the keys leased (so half the keys are held), the other without limits and as
  many jobs leased. Reported: the p50 of a claim of 10 (``claim_jobs_v1``, run in a
  transaction that is rolled back, so every sample sees the same backlog), limited over
  unlimited, the samples interleaved.
* ``processing``: ``drain`` (4 lanes, batches of 10, a no-op handler) of ``--jobs`` jobs on
  a queue with ``QueuePolicy(concurrency=10000)`` (never binding) against ``QueuePolicy()``
  and against no policy at all; rounds interleave, ratios are per round. Each drain starts
  after a ``VACUUM`` of its database, as autovacuum leaves a production queue between bursts
  (without it every round runs on the dead rows of all the rounds before). Beside the rate:
  the CPU each job took, this process's and (when the server runs on this machine) that of
  the database's own backends (``/proc/<pid>/schedstat``), which a loaded machine moves
  far less than the wall clock.
* ``stats`` (asked for by name): ``stats()`` with the held counts against without them, on
  the backlog's limited queue, and the drain report's held lookup on it.
* ``priority``: a queue with priorities (``--backlog`` jobs: one in 1,000 at priority 5, all
  of them leased, the rest at 0 and -1, interleaved) against the same backlog without
  priorities; reported: the p50 of a claim of 10, prioritised over plain (run it at two
  backlog sizes to see that it stays flat).
* ``rate``: ``Rate(100, per=1)``, 8 claimers on their own pools claiming batches of 10 and
  completing them at once for ``--seconds``; reported: claims per second over the run and
  the most claims any 1 s window held (from the attempts' start times the claim stamped).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))

from drainpipe import Jobs, QueuePolicy, Rate, install  # noqa: E402

from .policies import SERVER  # noqa: E402
from .results import Row, append_run  # noqa: E402

KEYS = 10_000
LANES = int(__import__("os").environ.get("FLOW_LANES", "4"))
BIG = 2**31 - 1


def database_url(name: str) -> str:
    params = conninfo_to_dict(SERVER)
    params["dbname"] = name
    return make_conninfo(**params)


async def fresh(backend: str) -> tuple[str, str]:
    name = f"bench_flow_{backend}_{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(SERVER, autocommit=True) as admin:
        await admin.execute(f'CREATE DATABASE "{name}"')
    url = database_url(name)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await install(conn, ["jobs"], backend=backend)  # type: ignore[arg-type]
    return name, url


async def drop(name: str) -> None:
    async with await psycopg.AsyncConnection.connect(SERVER, autocommit=True) as admin:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def stored(g: str, priority: str | None = None) -> str:
    extra = "" if priority is None else f", 'priority', {priority}"
    return (
        "jsonb_build_object('$dp', 1, 'context', '{}'::jsonb, 'key', 'k' || "
        f"mod({g}, {KEYS}), 'payload', jsonb_build_object('n', {g}){extra})"
    )


def fill(
    conn: psycopg.Connection[Any],
    backend: str,
    queue: str,
    count: int,
    priority: str | None = None,
) -> None:
    if backend == "table":
        conn.execute(
            "INSERT INTO drainpipe.job_messages (queue, payload, visible_at)"
            f" SELECT '{queue}', {stored('g', priority)},"
            " now() - interval '1 hour' + g * interval '1 microsecond'"
            f" FROM generate_series(1, {count}) g"
        )
    else:
        conn.execute("SELECT drainpipe.ensure_job_queue_v1(%s)", (queue,))
        conn.execute(
            f"INSERT INTO pgmq.q_{queue} (vt, message)"
            " SELECT now() - interval '1 hour' + g * interval '1 microsecond',"
            f" jsonb_build_object('payload', {stored('g', priority)}, 'max_attempts', 5)"
            f" FROM generate_series(1, {count}) g"
        )


def backlog(backend: str, count: int, samples: int) -> Row:
    name, url = asyncio.run(fresh(backend))
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "SELECT drainpipe.ensure_queue_flow_v1('limited', NULL, 1, NULL, NULL, NULL,"
                " NULL, false)"
            )
            for queue in ("limited", "plain"):
                fill(conn, backend, queue, count)
            conn.execute("VACUUM ANALYZE" if backend == "table" else "ANALYZE")
            # half the keys held: the first job of keys 0..4999 leased (and as many leased
            # on the unlimited queue)
            for queue in ("limited", "plain"):
                got = conn.execute(
                    "SELECT count(*) FROM drainpipe.claim_jobs_v1(%s, 3600, %s)",
                    (queue, KEYS // 2),
                ).fetchone()
                assert got == (KEYS // 2,), got
            times: dict[str, list[float]] = {"limited": [], "plain": []}
            for i in range(samples):
                order = ("limited", "plain") if i % 2 == 0 else ("plain", "limited")
                for queue in order:
                    with conn.transaction(force_rollback=True):
                        started = time.perf_counter()
                        rows = conn.execute(
                            "SELECT id FROM drainpipe.claim_jobs_v1(%s, 300, 10)", (queue,)
                        ).fetchall()
                        times[queue].append(time.perf_counter() - started)
                    assert len(rows) == 10
        limited = statistics.median(times["limited"]) * 1000
        plain = statistics.median(times["plain"]) * 1000
        print(
            f"{backend:6} backlog {count:,}: claim of 10 p50 limited {limited:.3f} ms"
            f" plain {plain:.3f} ms ratio {limited / plain:.2f}"
        )
        return Row(
            metric=f"claim of 10 p50, {count:,} queued over 10,000 keys, half held",
            system=f"{backend} key_concurrency=1",
            baseline=f"{backend} no limits",
            ratio=round(limited / plain, 2),
            value=round(limited, 3),
            unit="ms",
            note=f"time ratio (lower is better); no limits: {plain:.3f} ms; {samples} samples"
            " each, interleaved, every claim rolled back",
        )
    finally:
        asyncio.run(drop(name))


PRIORITIES = "CASE WHEN mod(g, 1000) = 0 THEN 5 WHEN mod(g, 2) = 0 THEN 0 ELSE -1 END"


def priority_backlog(backend: str, count: int, samples: int) -> Row:
    name, url = asyncio.run(fresh(backend))
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            for level in (5, -1):  # as the enqueues of such jobs would have noted them
                conn.execute("SELECT drainpipe.note_job_priority('prio', %s)", (level,))
            fill(conn, backend, "prio", count, PRIORITIES)
            fill(conn, backend, "plain", count)
            conn.execute("VACUUM ANALYZE" if backend == "table" else "ANALYZE")
            # the priority-5 jobs leased (and as many on the plain queue)
            for queue in ("prio", "plain"):
                conn.execute(
                    "SELECT count(*) FROM drainpipe.claim_jobs_v1(%s, 3600, %s)",
                    (queue, count // 1000),
                )
            times: dict[str, list[float]] = {"prio": [], "plain": []}
            for i in range(samples):
                for queue in ("prio", "plain") if i % 2 == 0 else ("plain", "prio"):
                    with conn.transaction(force_rollback=True):
                        started = time.perf_counter()
                        rows = conn.execute(
                            "SELECT id FROM drainpipe.claim_jobs_v1(%s, 300, 10)", (queue,)
                        ).fetchall()
                        times[queue].append(time.perf_counter() - started)
                    assert len(rows) == 10
        prio = statistics.median(times["prio"]) * 1000
        plain = statistics.median(times["plain"]) * 1000
        print(
            f"{backend:6} priority backlog {count:,}: claim of 10 p50 prioritised {prio:.3f} ms"
            f" plain {plain:.3f} ms ratio {prio / plain:.2f}"
        )
        return Row(
            metric=f"claim of 10 p50, {count:,} queued at priorities 5/0/-1, the 5s leased",
            system=f"{backend} priorities",
            baseline=f"{backend} no priorities",
            ratio=round(prio / plain, 2),
            value=round(prio, 3),
            unit="ms",
            note=f"time ratio (lower is better); no priorities: {plain:.3f} ms; {samples}"
            " samples each, interleaved, every claim rolled back",
        )
    finally:
        asyncio.run(drop(name))


async def noop(payload: Any, job: Any) -> None:
    return None


async def backend_pids(url: str) -> list[int]:
    """The client backends connected to ``url``'s database, other than this query's."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
        )
        return [pid for (pid,) in await cur.fetchall()]


def backend_cpu_ns(pids: list[int]) -> dict[int, int]:
    """CPU nanoseconds each backend has run so far; empty when the server is elsewhere."""
    spent: dict[int, int] = {}
    for pid in pids:
        try:
            spent[pid] = int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return spent


async def processing(backend: str, jobs_count: int, rounds: int) -> list[Row]:
    systems = {
        "none": None,
        "policy": QueuePolicy(max_pending=BIG),
        "concurrency": QueuePolicy(max_pending=BIG, concurrency=10_000),
    }
    created = {kind: await fresh(backend) for kind in systems}
    rates: dict[str, list[float]] = {kind: [] for kind in systems}
    client_cpu: dict[str, list[float]] = {kind: [] for kind in systems}
    server_cpu: dict[str, list[float]] = {kind: [] for kind in systems}
    try:
        for round_no in range(rounds):
            kinds = list(systems)
            kinds = kinds[round_no % 3 :] + kinds[: round_no % 3]
            for kind in kinds:
                policy = systems[kind]
                policies = {"q": policy} if policy is not None else None
                async with Jobs(created[kind][1], {"q": dict[str, Any]}, policies=policies) as j:
                    if policy is not None:
                        await j.ensure_policies()
                    for start in range(0, jobs_count, 100):
                        await j.enqueue_many("q", [{"n": n} for n in range(start, start + 100)])
                    with psycopg.connect(created[kind][1], autocommit=True) as conn:
                        conn.execute("VACUUM")
                    server_before = backend_cpu_ns(await backend_pids(created[kind][1]))
                    client_before = time.process_time()
                    started = time.perf_counter()
                    report = await j.drain("q", noop, concurrency=LANES, batch=10, lease=30)
                    rates[kind].append(report.succeeded / (time.perf_counter() - started))
                    client_cpu[kind].append((time.process_time() - client_before) / jobs_count)
                    # a backend the drain opened counts from zero; one it closed is missed
                    server_after = backend_cpu_ns(await backend_pids(created[kind][1]))
                    if server_after:
                        spent = sum(
                            n - server_before.get(pid, 0) for pid, n in server_after.items()
                        )
                        server_cpu[kind].append(spent / 1e9 / jobs_count)
                    assert report.succeeded == jobs_count
    finally:
        for name, _ in created.values():
            await drop(name)
    rows = []
    cpu_note = ""
    for kind in systems:
        client_us = statistics.median(client_cpu[kind]) * 1e6
        server_us = statistics.median(server_cpu[kind]) * 1e6 if server_cpu[kind] else None
        server_text = "not visible" if server_us is None else f"{server_us:.1f} us"
        print(f"{backend:6} {kind:12} CPU a job: client {client_us:.1f} us, server {server_text}")
    if server_cpu["concurrency"] and server_cpu["none"]:
        cpu_ratios = [
            (cc + sc) / (cn + sn)
            for cc, sc, cn, sn in zip(
                client_cpu["concurrency"],
                server_cpu["concurrency"],
                client_cpu["none"],
                server_cpu["none"],
                strict=True,
            )
        ]
        cpu_note = (
            f"; CPU a job (client and the database's backends) {statistics.median(cpu_ratios):.2f}x"
            f" no policy's ({min(cpu_ratios):.2f}-{max(cpu_ratios):.2f})"
        )
        print(f"{backend:6} CPU a job, concurrency=10000 / none: {cpu_note[2:]}")
    for baseline in ("none", "policy"):
        ratios = [c / b for c, b in zip(rates["concurrency"], rates[baseline], strict=True)]
        print(
            f"{backend:6} processing concurrency=10000 / {baseline}: "
            + " ".join(f"{r:.2f}" for r in ratios)
        )
        rows.append(
            Row(
                metric="processing, a concurrency that does not bind",
                system=f"{backend} concurrency=10000",
                baseline=f"{backend} {'no policy' if baseline == 'none' else 'QueuePolicy()'}",
                ratio=round(statistics.median(ratios), 2),
                ratio_range=(round(min(ratios), 2), round(max(ratios), 2)),
                value=round(statistics.median(rates["concurrency"])),
                unit="jobs/s",
                note=f"drain, 4 lanes, batch 10, {jobs_count:,} jobs, {rounds} rounds"
                + (cpu_note if baseline == "none" else ""),
            )
        )
    return rows


def held_stats(backend: str, count: int, samples: int) -> list[Row]:
    """``stats()`` with held counts against the same counts without them
    (``job_queue_stats_v2`` and the pause), on a backlog over 10,000 keys with half the keys held by
    ``key_concurrency=1``; and the drain report's ``job_queue_holds_v1`` on it."""
    name, url = asyncio.run(fresh(backend))
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "SELECT drainpipe.ensure_queue_flow_v1('limited', NULL, 1, NULL, NULL, NULL,"
                " NULL, false)"
            )
            fill(conn, backend, "limited", count)
            conn.execute("VACUUM ANALYZE" if backend == "table" else "ANALYZE")
            conn.execute(
                "SELECT count(*) FROM drainpipe.claim_jobs_v1('limited', 3600, %s)", (KEYS // 2,)
            )
            calls = {
                "v3": "SELECT *, EXISTS (SELECT 1 FROM drainpipe.queue_pauses p"
                " WHERE p.queue = s.queue) FROM drainpipe.job_queue_stats_v2(ARRAY['limited']) s",
                "v4": "SELECT * FROM drainpipe.job_queue_stats_v4(ARRAY['limited'])",
                "holds": "SELECT * FROM drainpipe.job_queue_holds_v1(ARRAY['limited'])",
            }
            held = conn.execute(calls["v4"]).fetchone()
            assert held is not None
            times: dict[str, list[float]] = {kind: [] for kind in calls}
            for i in range(samples):
                for kind in list(calls)[i % 3 :] + list(calls)[: i % 3]:
                    started = time.perf_counter()
                    conn.execute(calls[kind]).fetchall()
                    times[kind].append(time.perf_counter() - started)
        p50 = {kind: statistics.median(values) * 1000 for kind, values in times.items()}
        print(
            f"{backend:6} stats over {count:,} queued, half the keys held: v4 {p50['v4']:.1f} ms,"
            f" v3 {p50['v3']:.1f} ms, holds {p50['holds']:.1f} ms; held {held[-1]}"
        )
        return [
            Row(
                metric=f"stats() p50, {count:,} queued over 10,000 keys, half held",
                system=f"{backend} with held counts",
                baseline=f"{backend} without",
                ratio=round(p50["v4"] / p50["v3"], 2),
                value=round(p50["v4"], 1),
                unit="ms",
                note=f"time ratio (lower is better); without: {p50['v3']:.1f} ms; the drain"
                f" report's holds alone: {p50['holds']:.1f} ms; p50 of {samples} interleaved;"
                f" held counts {held[-1]}",
            )
        ]
    finally:
        asyncio.run(drop(name))


def rate_windows(times: list[float]) -> tuple[float, list[int], int]:
    """The claims' start times (sorted) → (claims per second over the whole seconds from
    the first claim, the count of each of those seconds, the most in any 1 s window).

    Only whole seconds count: a sliding window lets a run of s seconds start up to n claims
    at its first instant and n more every second after, so claims over (last - first) read
    above the rate by one burst (the 20 s runs read 103-104/s that way)."""
    if not times:
        return 0.0, [], 0
    first = times[0]
    whole = int(times[-1] - first)
    bins = [0] * whole
    for t in times:
        i = int(t - first)
        if i < whole:
            bins[i] += 1
    worst = 0
    j = 0
    for i, start in enumerate(times):
        while j < len(times) and times[j] < start + 1.0:
            j += 1
        worst = max(worst, j - i)
    return (sum(bins) / whole if whole else 0.0), bins, worst


async def rate(backend: str, seconds: float) -> Row:
    name, url = await fresh(backend)
    policy = QueuePolicy(max_pending=BIG, rate=Rate(100, per=1))
    queues: dict[str, Any] = {"q": dict[str, Any]}
    try:
        async with Jobs(url, queues, policies={"q": policy}) as setup:
            await setup.ensure_policies()
            total = int(100 * seconds) + 2000
            for start in range(0, total, 500):
                await setup.enqueue_many("q", [{"n": n} for n in range(start, start + 500)])
        stop = time.perf_counter() + seconds

        async def claimer() -> None:
            async with Jobs(url, queues, policies={"q": policy}) as jobs:
                while time.perf_counter() < stop:
                    claimed = await jobs.claim("q", batch=10)
                    for job in claimed:
                        await jobs.complete(job)
                    if not claimed:
                        await asyncio.sleep(0.01)

        await asyncio.gather(*(claimer() for _ in range(8)))
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            column = "started_at" if backend == "table" else "last_read_at"
            source = (
                "drainpipe.job_messages WHERE queue = 'q' AND attempts > 0"
                if backend == "table"
                else "(SELECT last_read_at FROM pgmq.a_q UNION ALL SELECT last_read_at"
                " FROM pgmq.q_q WHERE read_ct > 0) s"
            )
            rows = await (
                await conn.execute(
                    f"SELECT extract(epoch FROM {column})::float8 FROM {source} ORDER BY 1"
                )
            ).fetchall()
        times = [r[0] for r in rows if r[0] is not None]
        achieved, bins, worst = rate_windows(times)
        print(
            f"{backend:6} rate Rate(100, per=1), 8 claimers, {seconds:.0f} s: {achieved:.1f}/s"
            f" over {len(bins)} whole seconds (each {min(bins, default=0)}-{max(bins, default=0)}),"
            f" at most {worst} in any 1 s window, {len(times)} claims"
        )
        return Row(
            metric=f"claims/s under Rate(100, per=1), 8 claimers, {seconds:.0f} s",
            system=backend,
            value=round(achieved, 1),
            unit="claims/s",
            note=f"{len(bins)} whole seconds from the first claim held"
            f" {min(bins, default=0)}-{max(bins, default=0)} each; at most {worst} in any"
            f" 1 s window; {len(times)} claims",
        )
    finally:
        await drop(name)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.flow")
    parser.add_argument("--backlog", type=int, default=200_000)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--backends", default="pgmq,table")
    parser.add_argument("--parts", default="backlog,processing,rate")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--record", action="store_true", help="append to bench/results")
    args = parser.parse_args(argv)
    if args.quick:
        args.backlog, args.samples, args.jobs, args.rounds, args.seconds = 20_000, 30, 500, 2, 3
    rows: list[Row] = []
    parts = args.parts.split(",")
    for backend in args.backends.split(","):
        if "backlog" in parts:
            rows.append(backlog(backend, args.backlog, args.samples))
        if "processing" in parts:
            rows.extend(asyncio.run(processing(backend, args.jobs, args.rounds)))
        if "priority" in parts:
            rows.append(priority_backlog(backend, args.backlog, args.samples))
        if "rate" in parts:
            rows.append(asyncio.run(rate(backend, args.seconds)))
        if "stats" in parts:  # not in the default parts: python -m bench.flow --parts stats
            rows.extend(held_stats(backend, args.backlog, args.samples))
    if args.record:
        print(append_run("bench.flow", rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
