"""Cold starts pay for imports: ``import drainpipe`` stays light, and the PostgREST backend
never needs supabase unless it is handed a supabase client."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import ROOT

HEAVY = ("supabase", "postgrest", "psycopg", "psycopg_pool", "pydantic", "httpx")


def imported_modules(code: str, cwd: Path | None = None) -> set[str]:
    """Top-level packages imported while running ``code`` in a fresh interpreter."""
    result = subprocess.run(  # noqa: S603 - our own interpreter, fixed arguments
        [sys.executable, "-X", "importtime", "-c", code],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    modules = set()
    for line in result.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        name = line.rsplit("|", 1)[1].strip()
        modules.add(name.split(".")[0])
    return modules


def test_import_drainpipe_is_light() -> None:
    modules = imported_modules("import drainpipe")
    assert "drainpipe" in modules  # the parse works
    assert modules.isdisjoint(HEAVY), sorted(modules & set(HEAVY))


def test_jobs_and_the_backends_modules_are_light() -> None:
    modules = imported_modules(
        "import drainpipe.backends.pgmq_public, drainpipe.testing; from drainpipe import Jobs"
    )
    assert modules.isdisjoint(HEAVY), sorted(modules & set(HEAVY))


def test_url_backend_does_not_import_supabase() -> None:
    code = (
        "import sys\n"
        "from drainpipe import Jobs\n"
        "from drainpipe.backends.pgmq_public import PgmqPublicBackend\n"
        "jobs = Jobs(PgmqPublicBackend.from_url('https://x.supabase.test', 'k'), {'q': int})\n"
        "assert jobs.backend.name == 'pgmq_public'\n"
    )
    modules = imported_modules(code)
    assert modules.isdisjoint({"supabase", "postgrest"}), sorted(
        modules & {"supabase", "postgrest"}
    )


def test_function_files_import_no_heavy_module() -> None:
    # what Vercel loads on a cold start: api/*.py and the apps they import from functions/.
    # pydantic (the payload validator) and psycopg (the pool) load on the first request,
    # and no web framework at all (it cost 320-386 ms per import before).
    modules = imported_modules(
        "import api.drain, api.orders, api.billing_webhook, api.jobs", cwd=ROOT
    )
    assert {"api", "functions", "drainpipe"} <= modules  # the parse works
    heavy = {*HEAVY, "starlette", "standardwebhooks"}
    assert modules.isdisjoint(heavy), sorted(modules & heavy)


def test_import_drainpipe_sync_is_light_and_loads_no_asyncio() -> None:
    # a Django or Flask worker imports the sync twin at start-up: nothing heavy, no asyncio
    modules = imported_modules(
        "import drainpipe.sync\n"
        "from drainpipe.sync import Idempotency, Jobs, Lease, WebhookInbox, lease, with_lease\n"
        "from drainpipe.sync import AgentInbox, AgentInboxes, WebhookMessage\n"
        "from drainpipe.contrib.django import IdempotencyMiddleware\n"
    )
    assert "drainpipe" in modules  # the parse works
    assert modules.isdisjoint({*HEAVY, "asyncio", "starlette", "django"}), sorted(
        modules & {*HEAVY, "asyncio", "starlette", "django"}
    )


def test_the_sync_path_runs_no_event_loop(db_url: str) -> None:
    # psycopg imports asyncio itself, so the check is that no event loop is ever made:
    # every sync call below runs with the event loop's constructor refusing to run
    code = f"""
import asyncio, psycopg, psycopg_pool, pydantic

def refuse(*args, **kwargs):
    raise AssertionError("an event loop was created on the sync path")

asyncio.BaseEventLoop.__init__ = refuse
from drainpipe import sync
with sync.Jobs({db_url!r}, {{"q": dict}}) as jobs:
    jobs.enqueue("q", {{"n": 1}})
    jobs.enqueue_many("q", [{{"n": 2}}])
    jobs.schedule("s", "@daily", "q", {{}})
    jobs.run_schedules()
    report = jobs.drain("q", lambda payload, job: None, lease=5)
    assert report.succeeded == 2, report
    assert jobs.stats()["q"].ready == 0
with sync.Idempotency({db_url!r}) as idem:
    begun = idem.begin("k", "fp")
    assert idem.complete("k", begun.holder, 200, b"ok")
with sync.lease({db_url!r}, "k") as held:
    assert held is not None and held.extend()
with sync.AgentInboxes({db_url!r}, lease_secret="s" * 16) as agents:
    inbox_id = agents.create("support")
    agents.subscribe(inbox_id, "s")
    with sync.WebhookInbox({db_url!r}, source="s") as inbox:
        assert not inbox.store(id="1", payload={{}}).duplicate
        assert inbox.process(lambda message: message.checkpoint({{"n": 1}})).succeeded == 1
    [event] = agents.inbox(inbox_id).next(wait=0.2)
    assert agents.ack(event.id, event.lease_id)
print("ok")
"""
    result = subprocess.run(  # noqa: S603 - our own interpreter, fixed arguments
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]


COLD_BUILD = """
import json, sys, time
t0 = time.perf_counter()
import drainpipe
async def handler(payload, job):
    return None
jobs = drainpipe.Jobs({db}, {{"q": dict}})
route = jobs.drain_route(secret="x-0123456789abcdef0123456789abcdef", handlers={{"q": handler}})
ms = (time.perf_counter() - t0) * 1000
print(json.dumps({{"ms": ms, "modules_full": sorted(sys.modules)}}))
"""
POSTGREST_DB = 'drainpipe.PostgrestBackend("https://x.supabase.test", "k")'
SQL_DB = '"postgresql://postgres@127.0.0.1:1/none"'


def _cold_build(db: str) -> dict[str, Any]:
    import json

    result = subprocess.run(  # noqa: S603 - our own interpreter, fixed code
        [sys.executable, "-c", COLD_BUILD.format(db=db)],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return dict(json.loads(result.stdout))


def test_a_function_on_the_postgrest_backend_starts_cold_like_one_on_sql() -> None:
    # what a function file does at import over PostgREST: Jobs and its drain route, no
    # psycopg (there is no connection), and httpx only on the first request. The import
    # time itself is measured by bench.cold_entries (examples/postgrest/drain.py, < 150 ms)
    # and bench.run's cold mode; on a shared test machine timing only adds noise, so this
    # test compares what is imported: the SQL path's modules, with the PostgREST backend's
    # small ones (the backend by meaning, its HTTP call, its rows) in place of backends.sql,
    # and nothing else
    rest = set(_cold_build(POSTGREST_DB)["modules_full"])
    sql = set(_cold_build(SQL_DB)["modules_full"])
    assert {m.split(".")[0] for m in rest}.isdisjoint(HEAVY)
    assert rest - sql == {
        "drainpipe.backends.postgrest",
        "drainpipe.backends.postgrest_http",
        "drainpipe.backends.postgrest_policies",
        "drainpipe.backends.postgrest_rows",
        "drainpipe.backends.postgrest_schedules",
        "drainpipe.backends.postgrest_steps",
    }
    assert sql - rest == {
        "drainpipe.backends.sql",
        "drainpipe.backends.job_statements",
        "drainpipe.backends.sql_enqueue",
        "drainpipe.backends.sql_leases",
        "drainpipe.backends.pause_statements",
        "drainpipe.backends.schedule_statements",
    }


def test_the_first_postgrest_request_imports_httpx_without_its_cli() -> None:
    code = (
        "import sys\n"
        "from drainpipe.backends.postgrest_http import import_httpx\n"
        "httpx = import_httpx()\n"
        "assert callable(httpx.AsyncClient) and 'httpx._main' not in sys.modules\n"
    )
    modules = imported_modules(code)
    assert "httpx" in modules and modules.isdisjoint({"click", "rich", "pygments", "psycopg"})
