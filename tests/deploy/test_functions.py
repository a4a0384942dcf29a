"""The deployable functions (api/*.py, their apps in functions/) and what dev serves of them."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

import drainpipe
from drainpipe.dev.functions import FunctionsApp, load_function
from drainpipe.dev.server import start_server
from drainpipe.models import Job, JobContext
from drainpipe.serverless import LazyApp, json_response, log_failure
from tests.conftest import ROOT, connect


class Email(BaseModel):
    to: str
    subject: str = ""


ROUTES = {
    "/api/drain": "api/drain.py",
    "/api/orders": "api/orders.py",
    "/api/billing_webhook": "api/billing_webhook.py",
    "/api/billing-webhook": "api/billing_webhook.py",  # a rewrite in vercel.json
    "/api/jobs": "api/jobs.py",
    "/api/jobs/:path*": "api/jobs.py",  # the Job Inbox's routes, rewritten to its function
    "/api/executor": "api/executor.py",
    "/api/executor/:path*": "api/executor.py",  # the executors' routes, rewritten to it
    "/api/agent_inbox": "api/agent_inbox.py",
    "/v1/:path*": "api/agent_inbox.py",  # the agent inbox's routes, rewritten with their path
}
UNCONFIGURED = (
    "DATABASE_URL", "CRON_SECRET", "WEBHOOK_SECRET", "DRAIN_BUDGET", "MANAGEMENT_TOKENS",
    "AGENT_TOKEN", "AGENT_LEASE_SECRET", "AGENT_BUDGET", "EXECUTOR_TOKENS",
    "EXECUTOR_LEASE_SECRET", "EXECUTOR_BUDGET", "DRAINPIPE_SCOPE_KEY",
)  # fmt: skip


def test_dev_serves_each_function_at_vercels_paths_only() -> None:
    app = FunctionsApp.load(ROOT / "api")
    assert app.routes() == ROUTES
    assert app.warnings == []
    for path in ROUTES:
        sample = "agent/inbox/x/next"
        if path.startswith(("/api/jobs", "/api/executor")):
            sample = "jobs/emails/1"
        assert app.match(path.replace(":path*", sample)) is not None, path
    # what Vercel would 404: a trailing slash, the private module, the app folder
    for path in ("/api/drain/", "/api/_app", "/api/drain.py", "/functions/drain", "/api"):
        assert app.match(path) is None, path


@pytest.mark.parametrize("file", sorted(set(ROUTES.values())))
def test_each_function_exposes_an_asgi_app(file: str) -> None:
    app = load_function(ROOT / file)
    assert isinstance(app, LazyApp)


def test_functions_import_without_any_configuration() -> None:
    env = {k: v for k, v in os.environ.items() if k not in UNCONFIGURED}
    env["PYTHONPATH"] = str(ROOT / "lib")
    code = (
        "import api.drain, api.orders, api.billing_webhook, api.jobs\n"
        "print(type(api.drain.app).__name__, api.drain.app.missing())\n"
    )
    result = subprocess.run(  # noqa: S603 - our own interpreter and code
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "LazyApp ['DATABASE_URL', 'CRON_SECRET']"


async def _post(app: Any, path: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://function") as client:
        return await client.post(
            path,
            content=b"{}",
            headers={"Idempotency-Key": "k", "Authorization": "Bearer x"},
        )


@pytest.mark.parametrize(
    ("path", "missing"),
    [
        ("/api/drain", "DATABASE_URL, CRON_SECRET"),
        ("/api/orders", "DATABASE_URL, DRAINPIPE_SCOPE_KEY"),
        ("/api/billing-webhook", "DATABASE_URL, WEBHOOK_SECRET"),
        ("/api/jobs", "DATABASE_URL, MANAGEMENT_TOKENS"),
        ("/api/executor", "DATABASE_URL, EXECUTOR_TOKENS"),
    ],
)
async def test_every_unconfigured_function_names_what_is_missing(
    path: str, missing: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # never a bare 500 (functions/orders.py raised RuntimeError without DATABASE_URL), and
    # not "Database unreachable": the operator reads which variable to set
    for name in UNCONFIGURED:
        monkeypatch.delenv(name, raising=False)
    app = load_function(ROOT / ROUTES[path])
    with caplog.at_level(logging.ERROR, logger="drainpipe.functions"):
        response = await _post(app, path)
    assert response.status_code == 503, path
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body == {
        "type": "https://drainpipe.dev/problems/network",
        "title": "Function not configured",
        "status": 503,
        "kind": "network",
        "code": "NOT_CONFIGURED",
        "detail": f"set {missing} in this function's environment",
        "instance": path,
    }
    assert [r.getMessage() for r in caplog.records] == [
        f"{path} is not configured: {body['detail']}"
    ]


async def test_a_malformed_setting_is_named_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://127.0.0.1:1/nowhere")
    monkeypatch.setenv("CRON_SECRET", "s-0123456789abcdef0123456789abcdef")
    monkeypatch.setenv("DRAIN_BUDGET", "soon")
    body = (await _post(load_function(ROOT / "api/drain.py"), "/api/drain")).json()
    assert body["code"] == "NOT_CONFIGURED"
    assert body["detail"] == "DRAIN_BUDGET must be a positive number of seconds, not 'soon'"
    monkeypatch.setenv("WEBHOOK_SECRET", "whsec_%%%")
    hook = await _post(load_function(ROOT / "api/billing_webhook.py"), "/api/billing-webhook")
    assert hook.status_code == 503 and hook.json()["detail"].startswith("WEBHOOK_SECRET: ")
    assert "%%%" not in hook.json()["detail"]


async def test_lazy_app_builds_once_for_concurrent_first_requests() -> None:
    builds: list[int] = []

    async def hello(scope: Any, receive: Any, send: Any) -> None:
        await json_response({"ok": True})(scope, receive, send)

    def build(env: Any) -> tuple[Any, None]:
        builds.append(1)
        return hello, None

    env = {"X": ""}
    app = LazyApp(build, needs=("X",), env=env)
    assert app.missing() == ["X"]
    assert (await _post(app, "/f")).status_code == 503 and builds == []
    env["X"] = "set"
    answers = await asyncio.gather(*(_post(app, "/f") for _ in range(5)))
    assert [a.status_code for a in answers] == [200] * 5 and builds == [1]
    with pytest.raises(TypeError):
        LazyApp(build, needs="X")


def test_log_failure_names_queue_job_attempt_and_first_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    job = Job(
        id=7,
        queue="emails",
        payload={},
        context=JobContext(),
        attempts=2,
        max_attempts=5,
        enqueued_at=datetime.now(UTC),
        visible_until=datetime.now(UTC),
    )
    with caplog.at_level(logging.ERROR, logger="drainpipe.functions"):
        log_failure(RuntimeError("smtp said no\nsecond line"), job)
        log_failure(drainpipe.DrainpipeError("network", "pool timeout"), None)
    first, second = caplog.records
    assert first.getMessage() == (
        "drainpipe: emails job 7 failed (attempt 2/5): RuntimeError: smtp said no"
    )
    assert first.exc_info is not None  # the traceback goes to the platform's log viewer
    assert second.getMessage().startswith("drainpipe: DrainpipeError: ")


async def test_drain_function_drains_the_queue_and_the_billing_inbox(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", db_url)
    monkeypatch.setenv("CRON_SECRET", "function-secret-0123456789abcdef0123456789abcdef")
    monkeypatch.setenv("DRAIN_BUDGET", "10")
    jobs = drainpipe.Jobs(db_url, {"emails": Email})
    inbox = drainpipe.WebhookInbox(db_url, source="billing")
    try:
        await jobs.enqueue("emails", {"to": "a@x", "subject": "hi"})
        await inbox.store(id="evt_1", payload={"amount": 5}, type="invoice.paid")
        server = await start_server(FunctionsApp.load(ROOT / "api"))
        try:
            async with httpx.AsyncClient(base_url=server.url) as client:
                denied = await client.get("/api/drain")
                response = await client.get(
                    "/api/drain",
                    headers={
                        "Authorization": "Bearer function-secret-0123456789abcdef0123456789abcdef"
                    },
                )
                missing = await client.get("/api/nope")
        finally:
            await server.stop()  # lifespan shutdown closes the function's pool
        assert denied.status_code == 401
        assert response.status_code == 200
        report: dict[str, Any] = response.json()
        assert report["queues"] == {"emails": {"succeeded": 1, "failed": 0}}
        assert report["inboxes"] == {"billing": {"succeeded": 1, "failed": 0}}
        assert report["errors"] == 0 and report["more"] is False
        assert missing.status_code == 404
        conn = await connect(db_url)
        try:
            cur = await conn.execute("SELECT message_id, status FROM drainpipe.webhook_inbox")
            assert await cur.fetchall() == [("evt_1", "processed")]
        finally:
            await conn.close()
    finally:
        await inbox.close()
        await jobs.backend.db.close()  # type: ignore[attr-defined]


# -- the GitHub Actions caller ---------------------------------------------------------------


def workflow_script() -> str:
    """The shell script of .github/workflows/drain.yml's one step (the ``run: |`` block)."""
    text = (ROOT / ".github/workflows/drain.yml").read_text(encoding="utf-8")
    lines = text.split("        run: |\n", 1)[1].splitlines()
    return "\n".join(line.removeprefix("          ") for line in lines) + "\n"


async def _run_workflow(url: str, secret: str) -> subprocess.CompletedProcess[str]:
    if not (shutil.which("curl") and shutil.which("jq")):
        pytest.skip("the workflow's script needs curl and jq")
    process = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        workflow_script(),
        env={"PATH": os.environ["PATH"], "CRON_SECRET": secret, "DRAIN_URL": url},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await process.communicate()
    return subprocess.CompletedProcess([], process.returncode or 0, out.decode(), "")


async def test_the_workflow_shows_why_a_call_failed_and_stops() -> None:
    calls: list[str] = []

    class Monitor:
        def on_start(self, request: Any) -> None:
            calls.append("call")

    jobs = drainpipe.Jobs("postgresql://127.0.0.1:1/nowhere", {"emails": Email})
    route = jobs.drain_route(
        secret="right-0123456789abcdef0123456789abcdef",
        handlers={},
        schedules=False,
        monitor=Monitor(),
    )
    server = await start_server(route)
    try:
        wrong = await _run_workflow(server.url + "/api/drain", "wrong")
        right = await _run_workflow(
            server.url + "/api/drain", "right-0123456789abcdef0123456789abcdef"
        )
    finally:
        await server.stop()
    # a wrong secret: the status and the Problem body, one error annotation, one call only
    assert wrong.returncode == 1, wrong.stdout
    assert "call 1: HTTP 401" in wrong.stdout and '"kind":"unauthorized"' in wrong.stdout
    assert "::error title=drain answered 401::Unauthorized" in wrong.stdout
    assert "curl: (22)" not in wrong.stdout and "call 2" not in wrong.stdout
    # the right one: the report, and no second call when nothing more is waiting
    assert right.returncode == 0, right.stdout
    assert "call 1: {" in right.stdout and '"more":false' in right.stdout
    assert calls == ["call"]
