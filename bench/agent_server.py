"""The agent inbox's server path alone, next to raw pgmq's, with pgbench: no Python in the
loop, so what it measures is the SQL (issue 17).

    python -m bench.agent_server                       # ~2 minutes
    python -m bench.agent_server --candidate shape.sql # and a database with that SQL too

Each system is one pgbench script of two statements, run by ``--clients`` connections for
``--cycles`` cycles each:

* ``agents``  ``agent_next_v1(inbox, 'fifo', 10, 'manual')``, then ``agent_ack_many_v1``
  of the ten (the pull's bodies are read to their length on the server, as a client
  would read them)
* ``raw``     ``pgmq.read(q, 3600, 10)``, then ``pgmq.archive(q, ids[])``
* ``candidate`` (with ``--candidate FILE``) the agents script on a second database that
  has FILE applied after drainpipe's SQL: a changed function or storage shape, A/B against
  the installed one on the same server in the same rounds

Before every round each database gets as many events (and raw messages) again as the
round consumes, then a ``VACUUM``; the systems' order shifts every round. Prints the
cycles/s of every round, the medians and the ratios to raw. bench/agent_inbox.py is the
end-to-end bench; what this one found: ``git show 9b265e0:docs/benchmarks.md`` ("Fifth round").
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))

import drainpipe  # noqa: E402
from bench.agent_inbox import SERVER, with_database  # noqa: E402

AGENTS_SCRIPT = """\
SELECT array_agg(id)::text AS ids, array_agg(delivery)::text AS dels, \
array_agg(lease_token)::text AS toks, max(length(payload::text)) \
FROM drainpipe.agent_next_v1('{inbox}', 'fifo', 10, 'manual') \\gset
SELECT count(*) FROM drainpipe.agent_ack_many_v1(:ids::bigint[], :dels::integer[], \
:toks::uuid[], array_fill(NULL::jsonb, ARRAY[10]));
"""
RAW_SCRIPT = """\
SELECT array_agg(msg_id)::text AS ids, max(length(message::text)) \
FROM pgmq.read('q', 3600, 10) \\gset
SELECT pgmq.archive('q', :ids::bigint[]);
"""


def pgbench() -> str:
    found = shutil.which("pgbench") or next(
        (str(path) for path in sorted(Path("/usr/lib/postgresql").glob("*/bin/pgbench"))), None
    )
    if found is None:
        raise SystemExit("pgbench not found (Debian: apt install postgresql-client)")
    return found


async def prepare(url: str, candidate: str | None) -> str:
    """drainpipe's SQL, then ``candidate``'s (SQL text) if given, an inbox subscribed to 'bench', a pgmq queue 'q';
    returns the inbox id."""
    await drainpipe.install(url, ["jobs", "agent-inbox"], backend="pgmq")
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        if candidate is not None:
            await conn.execute(candidate)
        row = await (
            await conn.execute(
                "SELECT drainpipe.agent_create_inbox_v1('bench', 60, 604800, NULL, 'fifo',"
                " 'manual', ARRAY['manual', 'pickup'], NULL, NULL, 8192)"
            )
        ).fetchone()
        assert row is not None
        await conn.execute(
            "SELECT drainpipe.agent_subscribe_v1(%s, 'bench', NULL, NULL, NULL)", (row[0],)
        )
        await conn.execute("SELECT pgmq.create('q')")
    return str(row[0])


async def refill(url: str, count: int) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(
            "SELECT count(*) FROM (SELECT drainpipe.receive_webhook_v3('bench',"
            " md5(random()::text) || g, 'bench.event', jsonb_build_object('n', g), '{}',"
            " NULL, NULL, 'bench', true) FROM generate_series(1, %s) g) s",
            (count,),
        )
        await conn.execute(
            "SELECT pgmq.send_batch('q', ARRAY(SELECT jsonb_build_object('n', g)"
            " FROM generate_series(1, %s) g))",
            (count,),
        )
        await conn.execute("VACUUM")


def run_pgbench(url: str, script: Path, clients: int, cycles: int) -> float:
    params = conninfo_to_dict(url)
    command = [
        pgbench(), "-n", "-M", "prepared", "-c", str(clients), "-j", str(min(clients, 2)),
        "-t", str(cycles), "-f", str(script),
        "-h", str(params.get("host", "127.0.0.1")), "-p", str(params.get("port", 5432)),
        "-U", str(params.get("user", "postgres")), str(params["dbname"]),
    ]  # fmt: skip
    env = dict(os.environ)
    if params.get("password"):
        env["PGPASSWORD"] = str(params["password"])
    done = subprocess.run(  # noqa: S603 - pgbench, with arguments made here
        command, capture_output=True, text=True, check=False, env=env
    )
    found = re.search(r"tps = ([0-9.]+)", done.stdout)
    if done.returncode != 0 or found is None or "error" in done.stderr:
        raise SystemExit(f"pgbench failed on {script.name}:\n{done.stdout}\n{done.stderr}")
    return float(found.group(1))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default=SERVER)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--cycles", type=int, default=1000, help="pull+ack cycles a client")
    parser.add_argument("--candidate", type=Path, help="SQL applied to a second database")
    args = parser.parse_args()
    # each cycle consumes ten events; a fifth more, so that no pull comes back empty
    events = args.clients * args.cycles * 12
    tag = uuid.uuid4().hex[:8]
    names = {"agents": f"bench_server_{tag}", "raw": f"bench_server_{tag}"}
    if args.candidate is not None:
        names["candidate"] = f"bench_server_{tag}_candidate"
    async with await psycopg.AsyncConnection.connect(args.server, autocommit=True) as admin:
        for name in set(names.values()):
            await admin.execute(f'CREATE DATABASE "{name}"')
    urls = {system: with_database(args.server, name) for system, name in names.items()}
    rates: dict[str, list[float]] = {system: [] for system in names}
    candidate = args.candidate.read_text() if args.candidate is not None else None
    try:
        with tempfile.TemporaryDirectory() as folder:
            scripts: dict[str, Path] = {}
            for system, url in urls.items():
                inbox = (
                    await prepare(url, candidate if system == "candidate" else None)
                    if system != "raw"
                    else ""
                )
                scripts[system] = Path(folder) / f"{system}.sql"
                scripts[system].write_text(
                    RAW_SCRIPT if system == "raw" else AGENTS_SCRIPT.format(inbox=inbox)
                )
            systems = list(names)
            for round_ in range(args.rounds):
                for url in set(urls.values()):
                    await refill(url, events)
                shift = round_ % len(systems)
                for system in systems[shift:] + systems[:shift]:
                    rate = run_pgbench(urls[system], scripts[system], args.clients, args.cycles)
                    rates[system].append(rate)
        print(
            f"server only: pgbench, {args.clients} clients x {args.cycles} pull+ack cycles"
            f" (10 events each), {args.rounds} rounds"
        )
        for system, values in rates.items():
            print(
                f"  {system:<10} median {statistics.median(values):8.0f} cycles/s   (rounds: "
                + ", ".join(f"{value:.0f}" for value in values) + ")"
            )  # fmt: skip
        for system in (name for name in rates if name != "raw"):
            ratios = [a / r for a, r in zip(rates[system], rates["raw"], strict=True)]
            print(
                f"  {system} / raw: median {statistics.median(ratios):.2f}x (rounds: "
                + ", ".join(f"{ratio:.2f}" for ratio in ratios) + ")"
            )  # fmt: skip
    finally:
        async with await psycopg.AsyncConnection.connect(args.server, autocommit=True) as admin:
            for name in set(names.values()):
                await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    asyncio.run(main())
