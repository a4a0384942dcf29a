"""The Job Inbox's list under load (not part of bench.run).

    .venv/bin/python -m bench.job_inbox [STORED] [ROUNDS]

On a fresh database per storage backend, stores STORED jobs (default 100,000: 90% succeeded,
5% dead, the rest queued, over two queues), then times ``GET /jobs?limit=500``
through the management app in this process (server time: from the request reaching the app
to its last byte, no network), for the first page, a page deep in the list (through its
cursor), and the ``state=dead`` and ``queue=`` filters. Prints the median and p95 of ROUNDS
calls each and the plan Postgres used for the list statement (auto_explain, nested
statements, sent back as a NOTICE), to show it walks an index rather than scanning.
"""

from __future__ import annotations

import asyncio
import secrets
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))

import drainpipe  # noqa: E402
from drainpipe.sqlmodules import MODULES  # noqa: E402

SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"
TOKEN = secrets.token_urlsafe(24)
QUEUES: dict[str, Any] = {"emails": dict, "reports": dict}


def with_database(dsn: str, dbname: str) -> str:
    params = conninfo_to_dict(dsn)
    params["dbname"] = dbname
    return make_conninfo("", **params)


async def fill(url: str, stored: int, backend: str) -> None:
    """``stored`` jobs through ``enqueue_many``, then settled in bulk by SQL (a bench set-up,
    not the API: claiming 100,000 jobs one batch at a time would only measure claims)."""
    async with drainpipe.Jobs(url, QUEUES) as jobs:
        batch = 1000
        for start in range(0, stored, batch):
            queue = "emails" if (start // batch) % 4 else "reports"
            payloads = [{"n": n} for n in range(start, min(stored, start + batch))]
            await jobs.enqueue_many(queue, payloads)
    if backend != "table":
        return
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            """UPDATE drainpipe.job_messages
                  SET state = CASE WHEN id % 20 = 0 THEN 'dead'
                                   WHEN id % 10 = 0 THEN state ELSE 'succeeded' END,
                      attempts = CASE WHEN id % 10 = 0 AND id % 20 <> 0 THEN 0 ELSE 1 END,
                      started_at = enqueued_at, finished_at = CASE WHEN id % 10 = 0
                      AND id % 20 <> 0 THEN NULL ELSE enqueued_at END,
                      last_code = CASE WHEN id % 20 = 0 THEN 'MAX_ATTEMPTS' END"""
        )
        conn.execute("VACUUM ANALYZE drainpipe.job_messages")


async def timed(http: httpx.AsyncClient, params: dict[str, Any], rounds: int) -> list[float]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    times: list[float] = []
    for _ in range(rounds):
        started = time.perf_counter()
        response = await http.get("/jobs", params=params, headers=headers)
        times.append((time.perf_counter() - started) * 1000)
        if response.status_code != 200:
            raise RuntimeError(response.text)
    return times


def plan(url: str, backend: str) -> str:
    """The plan of the list statement inside ``list_jobs_v2``, as auto_explain reports it."""
    notices: list[str] = []
    with psycopg.connect(url, autocommit=True) as conn:
        conn.add_notice_handler(lambda diag: notices.append(diag.message_primary or ""))
        conn.execute("LOAD 'auto_explain'")
        for setting in (
            "auto_explain.log_min_duration = 0",
            "auto_explain.log_nested_statements = on",
            "auto_explain.log_analyze = on",
            "auto_explain.log_buffers = on",
            "auto_explain.log_level = notice",
            "client_min_messages = notice",
        ):
            conn.execute(f"SET {setting}")
        conn.execute("SELECT * FROM drainpipe.list_jobs_v2(NULL, NULL, NULL, 500)").fetchall()
    return "\n\n".join(notices) or f"(no plan reported on {backend})"


async def measure(backend: str, stored: int, rounds: int) -> None:
    name = f"bench_inbox_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(SERVER, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = with_database(SERVER, name)
    try:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await drainpipe.install(conn, MODULES, backend=backend)  # type: ignore[arg-type]
        started = time.perf_counter()
        await fill(url, stored, backend)
        print(f"\n{backend}: {stored} jobs stored in {time.perf_counter() - started:.1f} s")
        async with drainpipe.Jobs(url, QUEUES) as jobs:
            app = jobs.management_app(
                authorize=drainpipe.bearer_tokens({TOKEN: drainpipe.Principal("bench", "admin")}),
                cursor_secret=secrets.token_bytes(32),
                target="bench",
            )
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://bench") as http:
                await timed(http, {"limit": 500}, 3)  # warm the pool and the caches
                first = await http.get(
                    "/jobs", params={"limit": 500}, headers={"Authorization": f"Bearer {TOKEN}"}
                )
                deep = first.json()["meta"]["next_cursor"]
                for _ in range(40):  # 20,000 rows down
                    page = await http.get(
                        "/jobs",
                        params={"limit": 500, "cursor": deep},
                        headers={"Authorization": f"Bearer {TOKEN}"},
                    )
                    deep = page.json()["meta"]["next_cursor"]
                cases = {
                    "first page, limit 500": {"limit": 500},
                    "page 42 (cursor), limit 500": {"limit": 500, "cursor": deep},
                    "state=dead, limit 500": {"limit": 500, "state": "dead"},
                    "queue=reports, limit 500": {"limit": 500, "queue": "reports"},
                }
                print(f"{'case':34} {'median ms':>10} {'p95 ms':>8}")
                for label, params in cases.items():
                    times = sorted(await timed(http, params, rounds))
                    p95 = times[max(0, int(len(times) * 0.95) - 1)]
                    print(f"{label:34} {statistics.median(times):10.1f} {p95:8.1f}")
        print(f"\nplan of list_jobs_v2(limit 500) on {backend}:\n{plan(url, backend)}")
    finally:
        with psycopg.connect(SERVER, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> None:
    stored = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    for backend in ("table", "pgmq"):
        try:
            asyncio.run(measure(backend, stored, rounds))
        except (drainpipe.DrainpipeError, RuntimeError) as exc:  # a backend without records yet
            print(f"\n{backend}: skipped ({exc})")


if __name__ == "__main__":
    main()
