"""The agent inbox next to a raw pgmq loop, in one run, on one fresh database.

    python -m bench.agent_inbox            # ~1 minute
    python -m bench.agent_inbox --quick    # smoke run

Throughput (events/s through the consume loop only; the events are stored first, after
a ``VACUUM`` of that side's tables, as autovacuum would between bursts; ``--no-vacuum``
leaves them as they are: the agents' table then carries every earlier round's dead row
versions, and its hand-outs walk their index entries; ``--history N`` writes N settled
events and N archived raw messages first, the records of a system that has run a while):

* ``raw-pgmq batch``  ``pgmq.read(q, vt, 10)`` + one ``pgmq.archive(q, ids[])`` per read
  (the ids only: the messages are read on the server, never decoded)
* ``raw-pgmq bodies`` the same loop fetching ``message`` too, decoded as psycopg decodes
  jsonb: the peer of a consumer that looks at what it consumes, as ``bench.run``'s
  ``raw-pgmq`` does (the agents loop gets every event's body as its ``view``)
* ``raw-pgmq each``   ``pgmq.read(q, vt, 10)`` + ``pgmq.archive(q, id)`` per message
* ``agents``          ``inbox.next(max=10)`` + ``agents.ack(id, lease_id)`` per event (the
  contract acks one event per call; the acks of one pull are awaited together and go as
  one batch)
* ``agents riding``   the same calls, each pull's acks made before the next pull and
  awaited after it: they ride with that pull, one call and one transaction for both

Each system runs with ``--workers`` concurrent loops, rounds interleaved; the table shows the
median of the rounds, the client's CPU per event (this process: the database's share of
the two cores is not in it), the server's CPU per event (the local Postgres processes')
and agents / raw per round; then the CPU an event costs client and server together, raw /
agents, steadier than events/s on a busy machine. ``--profile`` adds a cProfile of
the agents loop's last round (the functions of most own time). Then the long-poll wake-up latency: a
poller long-polls (``wait=10``) while a producer stores one webhook at a time; latency is
from the store's commit (its call returning) to the poll's answer, with NOTIFY wake-ups
(``listen=True``, a long-lived server) and without (the serverless 100 ms → 1 s steps).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import AsyncConnectionPool

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))

import drainpipe  # noqa: E402
from bench.results import Row, append_run, describe_machine  # noqa: E402
from bench.run import postgres_cpu  # noqa: E402

RAW_SYSTEMS = ("raw-pgmq batch", "raw-pgmq bodies", "raw-pgmq each")
SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"
SECRET = "bench-lease-secret-0123456789"  # noqa: S105 - a throwaway database


def with_database(dsn: str, name: str) -> str:
    params = conninfo_to_dict(dsn)
    params["dbname"] = name
    return make_conninfo(**params)


#: What each round vacuums first, per side: the tables its loop reads and writes.
AGENT_TABLES = ("drainpipe.agent_events", "drainpipe.webhook_inbox")


async def vacuum(conn: psycopg.AsyncConnection[Any], tables: tuple[str, ...]) -> None:
    """What autovacuum does between bursts on a production cluster (many test clusters,
    this machine's among them, run without it). Both sides get it before every round and
    neither gets more: pgmq's queue is not truncated (``purge_queue`` would hand the raw
    loop a new table each round), and the agents' table keeps its acked events (records,
    as pgmq's archive keeps its rows)."""
    for table in tables:
        await conn.execute(f"VACUUM {table}")


async def fill_raw(url: str, queue: str, count: int, clean: bool = True) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        if clean:
            await vacuum(conn, (f"pgmq.q_{queue}", f"pgmq.a_{queue}"))
        await conn.execute(
            "SELECT pgmq.send_batch(%s, ARRAY(SELECT jsonb_build_object('n', g)"
            " FROM generate_series(1, %s) g))",
            (queue, count),
        )


async def add_history(url: str, inbox_id: str, queue: str, count: int) -> None:
    """``count`` settled events in the inbox and as many archived messages in the raw
    queue, written straight into storage: a system that has run for a while keeps its
    records (the agents' acked events until they are purged, pgmq's archive). The table
    then has the size at which plans made from stale statistics go wrong."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(
            "INSERT INTO drainpipe.agent_events (inbox_id, message_id, subscription_id,"
            " source, state, hold_until, due_at, received_at, settled_at, last_op)"
            " SELECT %s, -g, s.id, 'bench', 'acked', now() + interval '7 days',"
            " now() - interval '2 days', now() - interval '2 days', now() - interval '1 day',"
            " 'ack' FROM generate_series(1, %s) g,"
            " (SELECT id FROM drainpipe.agent_subscriptions WHERE inbox_id = %s) s",
            (inbox_id, count, inbox_id),
        )
        await conn.execute(
            f"INSERT INTO pgmq.a_{queue} (msg_id, read_ct, enqueued_at, archived_at, vt, message)"
            " SELECT -g, 1, now() - interval '2 days', now() - interval '1 day',"
            " now() - interval '2 days', jsonb_build_object('n', g)"
            " FROM generate_series(1, %s) g",
            (count,),
        )


async def fill_inbox(url: str, count: int, clean: bool = True) -> None:
    """Stores ``count`` webhooks of the bench source: the trigger fans each out."""
    tag = uuid.uuid4().hex[:8]
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        if clean:
            await vacuum(conn, AGENT_TABLES)
        await conn.execute(
            "SELECT drainpipe.receive_webhook_v3('bench', %s || g, 'bench.event',"
            " jsonb_build_object('n', g), '{}', NULL, NULL, 'bench', true)"
            " FROM generate_series(1, %s) g",
            (tag, count),
        )


async def raw_loop(
    pool: AsyncConnectionPool[Any], queue: str, batch_archive: bool, bodies: bool = False
) -> int:
    done = 0
    read = f"SELECT msg_id{', message' if bodies else ''} FROM pgmq.read(%s, 30, 10)"
    while True:
        async with pool.connection() as conn:
            rows = await (await conn.execute(read, (queue,))).fetchall()
            if not rows:
                return done
            ids = [row[0] for row in rows]
            if batch_archive:
                await conn.execute("SELECT pgmq.archive(%s, %s::bigint[])", (queue, ids))
        if not batch_archive:

            async def archive(msg_id: int) -> None:
                async with pool.connection() as conn:
                    await conn.execute("SELECT pgmq.archive(%s, %s::bigint)", (queue, msg_id))

            await asyncio.gather(*(archive(i) for i in ids))
        done += len(ids)


async def agents_loop(agents: drainpipe.AgentInboxes, inbox_id: str) -> int:
    done = 0
    inbox = agents.inbox(inbox_id)
    while events := await inbox.next(max=10):
        results = await asyncio.gather(
            *(agents.ack(event.id, event.lease_id or "") for event in events)
        )
        assert all(results)
        done += len(events)
    return done


async def agents_riding_loop(agents: drainpipe.AgentInboxes, inbox_id: str) -> int:
    """The same work, the acks of each pull made before the next pull and awaited after
    it: they ride with it, one call and one transaction (``agent_ack_next_v1``)."""
    done = 0
    inbox = agents.inbox(inbox_id)
    events = await inbox.next(max=10)
    while events:
        acks = [agents.ack(event.id, event.lease_id or "") for event in events]
        done += len(events)
        events = await inbox.next(max=10)
        assert all(await asyncio.gather(*acks))
    return done


AGENT_LOOPS = {"agents": agents_loop, "agents riding": agents_riding_loop}


async def timed(workers: int, loop: Any) -> tuple[float, float, float | None]:
    """Events per second, and the client's and the local server's CPU seconds per event
    (None: no Postgres process visible here). The server's is what the processes alive at
    the end spent meanwhile: a backend that exits during the round (the fill's, closing)
    would otherwise take its whole life's CPU out of the sum."""
    before = postgres_cpu()
    started, cpu = time.perf_counter(), time.process_time()
    counts = await asyncio.gather(*(loop() for _ in range(workers)))
    done = sum(counts)
    rate, used = done / (time.perf_counter() - started), (time.process_time() - cpu) / done
    after = postgres_cpu()
    if not after:
        return rate, used, None
    server = sum(ns - before.get(pid, 0) for pid, ns in after.items()) / 1e9
    return rate, used, server / done


async def throughput(
    url: str,
    rounds: int,
    count: int,
    workers: int,
    profile: cProfile.Profile | None,
    clean: bool = True,
    history: int = 0,
) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, list[float]]]:
    pool = AsyncConnectionPool(
        url, min_size=10, max_size=10, open=False, kwargs={"autocommit": True}
    )
    await pool.open()
    agents = drainpipe.AgentInboxes(pool, lease_secret=SECRET)
    inbox_id = await agents.create("bench", lease_seconds=60)
    await agents.subscribe(inbox_id, "bench")
    async with pool.connection() as conn:
        await conn.execute("SELECT pgmq.create('agentbench')")
    if history:
        await add_history(url, inbox_id, "agentbench", history)
    rates: dict[str, list[float]] = {name: [] for name in (*RAW_SYSTEMS, *AGENT_LOOPS)}
    cpu: dict[str, list[float]] = {name: [] for name in rates}
    server: dict[str, list[float]] = {name: [] for name in rates}
    systems = list(rates)
    try:
        for round_ in range(rounds):
            shift = round_ % len(systems)
            for name in systems[shift:] + systems[:shift]:
                if name in AGENT_LOOPS:
                    await fill_inbox(url, count, clean)
                    watch = profile if round_ == rounds - 1 and name == "agents" else None
                    if watch is not None:
                        watch.enable()
                    rate, used, on_server = await timed(
                        workers, lambda loop=AGENT_LOOPS[name]: loop(agents, inbox_id)
                    )
                    if watch is not None:
                        watch.disable()
                else:
                    await fill_raw(url, "agentbench", count, clean)
                    batch = name != "raw-pgmq each"
                    bodies = name == "raw-pgmq bodies"
                    rate, used, on_server = await timed(
                        workers,
                        lambda b=batch, m=bodies: raw_loop(pool, "agentbench", b, m),
                    )
                rates[name].append(rate)
                cpu[name].append(used)
                if on_server is not None:
                    server[name].append(on_server)
    finally:
        await agents.close()
        await pool.close()
    return rates, cpu, server


async def wake_latency(url: str, listen: bool, samples: int) -> list[float]:
    agents = drainpipe.AgentInboxes(url, lease_secret=SECRET, listen=listen)
    webhooks = drainpipe.WebhookInbox(url, source=f"latency-{listen}")
    inbox_id = await agents.create(f"latency-{listen}")
    await agents.subscribe(inbox_id, f"latency-{listen}")
    inbox = agents.inbox(inbox_id)
    found: list[float] = []
    try:
        for n in range(samples):
            poll = asyncio.create_task(inbox.next(wait=10))
            await asyncio.sleep(0.05 + (n % 7) * 0.11)  # arrivals at varied points of the poll
            await webhooks.store(id=f"{uuid.uuid4().hex}", payload={"n": n})
            stored = time.perf_counter()
            [event] = await poll
            found.append(max(0.0, time.perf_counter() - stored))
            assert await agents.ack(event.id, event.lease_id or "")
    finally:
        await agents.close()
        await webhooks.close()
    return found


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def recorded_rows(
    metric: str,
    rates: dict[str, list[float]],
    cpu: dict[str, list[float]],
    server: dict[str, list[float]],
    latencies: dict[str, list[float]],
) -> list[Row]:
    """What ``bench.results`` keeps of a run: each loop's median rate and CPU per event, each
    agents loop over each raw loop (median and range of the rounds), the wake-up latency."""

    def cost(system: str) -> str:
        used = f"client CPU {statistics.median(cpu[system]) * 1e6:.1f} µs"
        if server[system]:
            used += f", server CPU {statistics.median(server[system]) * 1e6:.1f} µs"
        return used + " an event"

    rows = [
        Row(
            metric, raw, value=round(statistics.median(rates[raw])), unit="events/s", note=cost(raw)
        )
        for raw in RAW_SYSTEMS
    ]
    for mine, raw in [(m, r) for m in AGENT_LOOPS for r in RAW_SYSTEMS]:
        ratios = [a / r for a, r in zip(rates[mine], rates[raw], strict=True)]
        rows.append(
            Row(
                metric,
                mine,
                raw,
                ratio=round(statistics.median(ratios), 3),
                ratio_range=(round(min(ratios), 3), round(max(ratios), 3)),
                value=round(statistics.median(rates[mine])),
                unit="events/s",
                note=cost(mine),
            )
        )
    for label, found in latencies.items():
        rows.append(
            Row(
                "long-poll wake-up p50",
                label,
                value=round(percentile(found, 0.5) * 1000, 1),
                unit="ms",
                note=f"p99 {percentile(found, 0.99) * 1000:.0f} ms, {len(found)} arrivals",
            )
        )
    return rows


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--server", default=SERVER)
    parser.add_argument("--profile", action="store_true", help="cProfile the agents loop")
    parser.add_argument("--count", type=int, default=0, help="events per round")
    parser.add_argument("--no-latency", action="store_true", help="skip the wake-up latency")
    parser.add_argument(
        "--no-record", action="store_true", help="do not append the run to bench/results/"
    )
    parser.add_argument(
        "--no-vacuum", action="store_true", help="no VACUUM between rounds (either side)"
    )
    parser.add_argument(
        "--history", type=int, default=0,
        help="settled events (and archived raw messages) written first, as a system that"
        " has run a while keeps",
    )  # fmt: skip
    args = parser.parse_args()
    profile = cProfile.Profile() if args.profile else None
    rounds, count, samples = (2, 500, 10) if args.quick else (5, 6000, 60)
    count = args.count or count
    samples = 0 if args.no_latency else samples
    name = f"bench_agents_{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(args.server, autocommit=True) as admin:
        await admin.execute(f'CREATE DATABASE "{name}"')
    url = with_database(args.server, name)
    try:
        await drainpipe.install(url, ["jobs", "agent-inbox"], backend="pgmq")
        rates, cpu, server = await throughput(
            url, rounds, count, args.workers, profile, not args.no_vacuum, args.history
        )
        print(
            f"throughput: {count} events per round, {rounds} rounds, {args.workers} workers,"
            f" {'no VACUUM' if args.no_vacuum else 'VACUUM before each round'},"
            f" {args.history} settled events of history"
        )
        print(
            f"  {'system':<16} {'median events/s':>16} {'client CPU us/event':>20}"
            f" {'server CPU us/event':>20}"
        )
        for system, values in rates.items():
            used = statistics.median(cpu[system]) * 1e6
            spent = f"{statistics.median(server[system]) * 1e6:.1f}" if server[system] else "-"
            print(
                f"  {system:<16} {statistics.median(values):>16.0f} {used:>20.1f} {spent:>20}"
                "   (rounds: " + ", ".join(f"{v:.0f}" for v in values) + ")"
            )
        for mine, raw in [(m, r) for m in AGENT_LOOPS for r in RAW_SYSTEMS]:
            ratios = [a / r for a, r in zip(rates[mine], rates[raw], strict=True)]
            print(f"  {mine} / {raw}: median {statistics.median(ratios):.2f}x (rounds: "
                  + ", ".join(f"{x:.2f}" for x in ratios) + ")")  # fmt: skip
        if all(server[name] and len(server[name]) == rounds for name in rates):
            # the work each event costs both processes: steadier than events/s on a busy
            # machine, since time spent waiting for a core counts in neither
            for mine, raw in [(m, r) for m in AGENT_LOOPS for r in RAW_SYSTEMS[:2]]:
                shares = [
                    (rc + rs) / (ac + as_)
                    for rc, rs, ac, as_ in zip(
                        cpu[raw], server[raw], cpu[mine], server[mine], strict=True
                    )
                ]
                print(
                    f"  CPU per event (client + server), {raw} / {mine}: median"
                    f" {statistics.median(shares):.2f} (rounds: "
                    + ", ".join(f"{x:.2f}" for x in shares)
                    + ")"
                )
        latencies: dict[str, list[float]] = {}
        for listen in (True, False) if samples else ():
            found = await wake_latency(url, listen, samples)
            label = "NOTIFY (listen=True)" if listen else "poll steps (serverless)"
            latencies[label] = found
            print(
                f"long-poll wake-up, {label}: p50 {percentile(found, 0.5) * 1000:.0f} ms,"
                f" p99 {percentile(found, 0.99) * 1000:.0f} ms ({len(found)} arrivals)"
            )
        if not (args.quick or args.no_record):
            async with await psycopg.AsyncConnection.connect(url) as conn:
                version = await (await conn.execute("SHOW server_version")).fetchone()
            metric = "events/s" + (", no VACUUM" if args.no_vacuum else "")
            metric += f", {args.history:,} settled events first" if args.history else ""
            rows = recorded_rows(metric, rates, cpu, server, latencies)
            machine = describe_machine(str(version[0]).split()[0] if version else None)
            path = append_run("bench.agent_inbox", rows, machine=machine)
            print(
                f"recorded in {path}; refresh: python -m bench.results --write docs/benchmarks.md"
            )
    finally:
        async with await psycopg.AsyncConnection.connect(args.server, autocommit=True) as admin:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    if profile is not None:
        print("cProfile of the agents loop's last round (own time):")
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    asyncio.run(main())
